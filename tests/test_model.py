"""SoftmaxModel: the estimator without scikit-learn behaves as SoftmaxRegression does."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse
from sklearn.exceptions import NotFittedError

from fastsoftmax import SoftmaxRegression
from fastsoftmax._model import SoftmaxModel
from fastsoftmax._validation import check_class_labels


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 6))
    y = np.argmax(X @ rng.standard_normal((6, 4)) + rng.gumbel(size=(300, 4)), axis=1)
    return X, np.array(["ant", "bee", "cat", "dog"])[y]


def test_the_same_parameters_and_defaults():
    assert SoftmaxModel().get_params() == SoftmaxRegression().get_params()
    model = SoftmaxModel()
    assert model.set_params(alpha=0.5, solver="sgd") is model
    assert model.get_params()["alpha"] == 0.5 and model.solver == "sgd"
    with pytest.raises(ValueError, match="Invalid parameter 'alfa'"):
        model.set_params(alfa=1.0)
    assert model.alpha == 0.5


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # max_iter=20
@pytest.mark.parametrize("solver", ["newton", "lbfgs", "sgd", "bgd"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_same_fit_and_predictions(data, solver, sparse, dtype):
    X, y = data
    X = X.astype(dtype)
    if sparse:
        X = scipy.sparse.csr_matrix(np.where(np.abs(X) > 0.5, X, 0))
    params = dict(solver=solver, alpha=1e-3, max_iter=20, random_state=0)
    a = SoftmaxModel(**params).fit(X, y)
    b = SoftmaxRegression(**params).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.intercept_, b.intercept_)
    np.testing.assert_array_equal(a.classes_, b.classes_)
    assert a.n_iter_ == b.n_iter_ and a.loss_curve_ == b.loss_curve_
    assert a.coef_.dtype == dtype
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    np.testing.assert_array_equal(a.predict_log_proba(X), b.predict_log_proba(X))
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))


def test_partial_fit_is_the_same(data):
    X, y = data
    a, b = SoftmaxModel(random_state=1), SoftmaxRegression(random_state=1)
    for part in np.array_split(np.arange(len(y)), 3):
        a.partial_fit(X[part], y[part], classes=np.unique(y))
        b.partial_fit(X[part], y[part], classes=np.unique(y))
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.n_iter_ == b.n_iter_ == 3


def test_model_files_are_shared(data, tmp_path):
    X, y = data
    SoftmaxModel(alpha=0.01).fit(X, y).save(tmp_path / "a.npz")
    b = SoftmaxRegression.load(tmp_path / "a.npz")
    assert isinstance(b, SoftmaxRegression) and b.alpha == 0.01
    b.save(tmp_path / "b.npz")
    a = SoftmaxModel.load(tmp_path / "b.npz")
    assert type(a) is SoftmaxModel
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


def test_unfitted_and_wrong_width_are_refused(data):
    X, y = data
    with pytest.raises(NotFittedError, match="This SoftmaxModel instance is not fitted yet"):
        SoftmaxModel().predict(X)
    with pytest.raises(NotFittedError):
        SoftmaxModel().save("never-written.npz")
    model = SoftmaxModel().fit(X, y)
    before = model.coef_.copy()
    message = "X has 5 features, but SoftmaxModel is expecting 6 features as input."
    for method in (model.predict, model.predict_proba, model.decision_function):
        with pytest.raises(ValueError, match=message):
            method(X[:, :5])
    with pytest.raises(ValueError, match=message):
        model.partial_fit(X[:, :5], y)
    np.testing.assert_array_equal(model.coef_, before)


def test_feature_names_are_recorded(data):
    X, y = data
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    model = SoftmaxModel().fit(frame, y)
    assert list(model.feature_names_in_) == list(frame.columns)
    model.fit(X, y)
    assert not hasattr(model, "feature_names_in_") and model.n_features_in_ == 6


@pytest.mark.parametrize("labels", [
    np.array([3, 1, 2, 1]), np.array([0, 1], dtype=np.uint8), np.array([True, False]),
    np.array(["a", "b", "a"]),
])
def test_plain_labels_skip_scikit_learn_checks_that_would_pass(labels, monkeypatch):
    """Integer, boolean and string 1-D labels are returned as they are: the
    scikit-learn checks the fast path skips accept them unchanged."""
    from sklearn.utils.multiclass import check_classification_targets, type_of_target

    assert type_of_target(labels) in ("binary", "multiclass")
    check_classification_targets(labels)
    assert check_class_labels(labels) is labels
    with pytest.raises(ValueError, match="Unknown label type"):
        check_class_labels(np.array([0.5, 1.5]))
