"""Model files (fastsoftmax._persistence): SoftmaxRegression.save and .load
round trips of every parameter and label type, pickling, and rejected files."""

import pickle
import warnings

import numpy as np
import pytest
from _helpers import toy_data
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from fastsoftmax import SoftmaxRegression


def test_save_load_roundtrip(tmp_path):
    X, y = toy_data()
    names = np.array(["a", "b", "c"])[y]
    est = SoftmaxRegression(alpha=0.01).fit(X.astype(np.float32), names)
    path = tmp_path / "model.npz"
    est.save(path)
    back = SoftmaxRegression.load(path)
    assert back.get_params() == est.get_params()
    np.testing.assert_array_equal(back.coef_, est.coef_)
    assert back.coef_.dtype == np.float32
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict_proba(X), est.predict_proba(X))


NON_DEFAULT_PARAMS = dict(
    solver="sgd", alpha=0.02, fit_intercept=False, max_iter=7, tol=1e-3, n_iter_no_change=3,
    batch_size=16, learning_rate="invscaling", eta0=0.05, power_t=0.3, momentum=0.5,
    nesterov=False, early_stopping=True, validation_fraction=0.2, shuffle=False,
    random_state=11, warm_start=True, class_weight={0: 2.0, 1: 0.5}, n_threads=1, verbose=2,
)


@pytest.mark.parametrize("labels", ["int", "str", "float"])
def test_save_load_roundtrips_every_parameter(tmp_path, labels):
    defaults = SoftmaxRegression().get_params()
    assert NON_DEFAULT_PARAMS.keys() == defaults.keys()  # every parameter covered...
    for name, value in NON_DEFAULT_PARAMS.items():  # ...with a non-default value
        assert value != defaults[name], name
    X, y = toy_data()
    X = StandardScaler().fit_transform(X)
    label_values = {"int": np.array([0, 1, 2]), "str": np.array(["a", "b", "c"]),
                    "float": np.array([0.0, 1.0, 2.0])}[labels]
    yl = label_values[y]
    first, second = label_values[:2].tolist()  # python int / str / float
    params = {**NON_DEFAULT_PARAMS, "class_weight": {first: 2.0, second: 0.5}}
    est = SoftmaxRegression().fit(X, yl)
    est.set_params(**params)
    est.save(tmp_path / "model.npz")
    back = SoftmaxRegression.load(tmp_path / "model.npz")
    assert back.get_params() == est.get_params()
    assert [type(key) for key in back.class_weight] == [type(key) for key in params["class_weight"]]
    # the loaded model refits with its class_weight (labels still match y),
    # exactly as the saved one does (warm_start: both start from coef_)
    back.set_params(verbose=0)
    ref = pickle.loads(pickle.dumps(est)).set_params(verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        back.fit(X, yl)
        ref.fit(X, yl)
    np.testing.assert_array_equal(back.coef_, ref.coef_)


def test_save_load_numpy_scalar_parameters_and_old_class_weight_files(tmp_path):
    X, y = toy_data()
    est = SoftmaxRegression(max_iter=np.int64(300), alpha=np.float32(0.5),
                            class_weight={np.int64(2): np.float64(3.0)}).fit(X, y)
    est.save(tmp_path / "model.npz")
    back = SoftmaxRegression.load(tmp_path / "model.npz")
    assert back.get_params() == est.get_params()  # nothing dropped
    # a file written when class_weight was a JSON object (keys became strings)
    with np.load(tmp_path / "model.npz") as data:
        arrays = dict(data)
    arrays["params"] = np.array('{"class_weight": {"2": 3.0}}')
    np.savez(tmp_path / "old.npz", **arrays)
    assert SoftmaxRegression.load(tmp_path / "old.npz").class_weight == {2: 3.0}


@pytest.mark.parametrize("state", [np.random.default_rng(0), np.random.RandomState(0)],
                         ids=["Generator", "RandomState"])
def test_save_refuses_a_random_state_object(tmp_path, state):
    X, y = toy_data()
    est = SoftmaxRegression(random_state=state).fit(X, y)
    with pytest.raises(TypeError, match=r"random_state=.* cannot be stored in a model file.*"
                                        r"set_params\(random_state=<int or None>\)"):
        est.save(tmp_path / "model.npz")
    assert not (tmp_path / "model.npz").exists()  # nothing half-written
    est.set_params(random_state=5).save(tmp_path / "model.npz")
    assert SoftmaxRegression.load(tmp_path / "model.npz").random_state == 5


def test_load_rejects_malformed_files(tmp_path):
    X, y = toy_data()
    good = tmp_path / "good.npz"
    SoftmaxRegression().fit(X, y).save(good)
    raw = good.read_bytes()
    (tmp_path / "truncated.npz").write_bytes(raw[: len(raw) // 2])
    np.savez(tmp_path / "foreign.npz", a=np.arange(3))
    np.savez(tmp_path / "pickled.npz", format=np.array("fastsoftmax-model"),
             coef=np.array([{"x": 1}], dtype=object))
    with np.load(good) as data:
        arrays = dict(data)
    arrays["coef"] = arrays["coef"][:, :1]
    np.savez(tmp_path / "shape.npz", **arrays)
    (tmp_path / "text.npz").write_text("not a zip file")
    for name, message in [("truncated", "not a readable"), ("foreign", "missing arrays"),
                          ("pickled", "not a fastsoftmax model file|not a readable"),
                          ("text", "not a fastsoftmax model file")]:
        with pytest.raises(ValueError, match=message):
            SoftmaxRegression.load(tmp_path / f"{name}.npz")
    # A wrong coefficient shape only shows against data: the loaded model
    # must refuse data of the other width, with the feature count named.
    model = SoftmaxRegression.load(tmp_path / "shape.npz")
    with pytest.raises(ValueError, match="features"):
        model.predict(X)
