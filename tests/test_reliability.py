"""Reliability: nothing a user can pass produces a silent wrong answer.

- Bad input to every entry point: a ValueError naming what and where (row,
  column, index, label), raised before any state changes -- a fitted model
  keeps every attribute (coef_, loss_curve_, n_iter_, _sgd_state...).
- Every accepted input form (read-only, memory-mapped, Fortran, strided,
  integer, boolean, DataFrame, list) gives the result of a C-contiguous
  float copy, and the caller's arrays are never modified.
- Extreme magnitudes: finite, correct results wherever the answer is finite
  in the dtype; a clear error (never NaN, never a leaked RuntimeWarning)
  where it is not.
- A divergent learning rate stops training with a warning naming it and
  keeps the last finite weights (sgd, bgd, partial_fit).
- Model files: anything that is not a model file is a ValueError, and
  pickled content is never executed; the command line reports it in one
  line with exit status 1.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import pathlib
import pickle
import re
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from _helpers import parallel_launches
from sklearn.exceptions import ConvergenceWarning

import fastsoftmax as fs
from fastsoftmax import DivergenceWarning, SoftmaxRegression, reference
from fastsoftmax.cli import main as cli_main

REPO = pathlib.Path(fs.__file__).resolve().parent.parent


def toy(m=60, n=3, k=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n))
    y = np.arange(m) % k
    X += y[:, None]  # separable enough to train quickly
    return X, y


def snapshot(est):
    return copy.deepcopy(est.__dict__)


def assert_same_state(before, after, path="model"):
    assert before.keys() == after.keys(), f"{path}: attributes {set(before) ^ set(after)}"
    for key in before:
        a, b = before[key], after[key]
        where = f"{path}.{key}"
        if isinstance(a, np.ndarray):
            assert isinstance(b, np.ndarray), where
            assert a.dtype == b.dtype and a.shape == b.shape, where
            np.testing.assert_array_equal(a, b, err_msg=where)
        elif isinstance(a, dict):
            assert isinstance(b, dict), where
            assert_same_state(a, b, where)
        elif dataclasses.is_dataclass(a):
            assert type(a) is type(b), where
            assert_same_state(vars(a), vars(b), where)
        else:
            assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture
def fitted():
    """An SGD model trained by fit then partial_fit, so that every attribute
    (including the carried momentum in _sgd_state) is populated."""
    X, y = toy()
    est = SoftmaxRegression("sgd", max_iter=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    est.partial_fit(X, y)
    assert est._sgd_state is not None and est._sgd_state.velocity_coef.any()
    return est


def with_nan(X, i, j, value=np.nan):
    X = np.array(X, dtype=float)
    X[i, j] = value
    return X


X0, Y0 = toy()

# (method, args, kwargs, message regex)
REJECTED = {
    "fit NaN X": ("fit", (with_nan(X0, 7, 2), Y0), {}, r"X contains NaN at row 7, column 2"),
    "fit inf X": ("fit", (with_nan(X0, 3, 0, np.inf), Y0), {},
                  r"X contains inf at row 3, column 0"),
    "fit -inf X other width": ("fit", (np.c_[with_nan(X0, 5, 1, -np.inf), X0], Y0), {},
                               r"X contains -inf at row 5, column 1"),
    "fit NaN sample_weight": ("fit", (X0, Y0),
                              dict(sample_weight=with_nan(np.ones((1, 60)), 0, 9)[0]),
                              r"sample_weight contains NaN at index 9"),
    "fit inf sample_weight": ("fit", (X0, Y0),
                              dict(sample_weight=with_nan(np.ones((1, 60)), 0, 4, np.inf)[0]),
                              r"sample_weight contains inf at index 4"),
    "fit negative sample_weight": ("fit", (X0, Y0),
                                   dict(sample_weight=with_nan(np.ones((1, 60)), 0, 2, -1.0)[0]),
                                   r"sample_weight\[2\] = -1\.0 is negative"),
    "fit sample_weight length": ("fit", (X0, Y0), dict(sample_weight=np.ones(59)),
                                 r"sample_weight has 59 entries but X has 60 rows"),
    "fit X 1-D": ("fit", (X0[:, 0], Y0), {}, r"Expected 2D array"),
    "fit X 3-D": ("fit", (X0[:, :, None], Y0), {}, r"dim 3|3D|3-D|ndim"),
    "fit X and y lengths": ("fit", (np.c_[X0, X0][:50], Y0), {},
                            r"y has 60 labels but X has 50 rows"),
    "fit empty": ("fit", (np.zeros((0, 3)), np.zeros(0)), {}, r"0 sample"),
    "fit no features": ("fit", (np.zeros((60, 0)), Y0), {}, r"0 feature"),
    "fit single class": ("fit", (np.c_[X0, X0], np.full(60, 7)), {},
                         r"at least 2 classes in y; got 1 class: 7"),
    "fit NaN label": ("fit", (X0, np.where(Y0 == 1, np.nan, Y0)), {}, r"NaN"),
    "fit soft targets": ("fit", (X0, np.full((60, 3), 1 / 3)), {}, r"1d array"),
    "fit impossible early stopping": (
        "fit", (X0[:4], Y0[:4]), {}, r"early_stopping cannot hold out"),
    "partial_fit unseen label": ("partial_fit", (X0, np.where(np.arange(60) == 11, 9, Y0)), {},
                                 r"y\[11\] = 9 is not one of the classes \[0, 1, 2\]"),
    "partial_fit other classes": ("partial_fit", (X0, Y0), dict(classes=[0, 1, 2, 3]),
                                  r"differs from the classes"),
    "partial_fit feature count": ("partial_fit", (np.c_[X0, X0], Y0), {},
                                  r"X has 6 features, but SoftmaxRegression is expecting 3"),
    "partial_fit NaN X": ("partial_fit", (with_nan(X0, 0, 1), Y0), {}, r"row 0, column 1"),
    "partial_fit lengths": ("partial_fit", (X0, Y0[:-1]), {}, r"y has 59 labels but X has 60 rows"),
    "partial_fit sample_weight": ("partial_fit", (X0, Y0), dict(sample_weight=-np.ones(60)),
                                  r"sample_weight\[0\] = -1\.0 is negative"),
    "predict feature count": ("predict", (np.c_[X0, X0],), {}, r"X has 6 features.*expecting 3"),
    "predict NaN": ("predict", (with_nan(X0, 12, 2),), {}, r"X contains NaN at row 12, column 2"),
    "predict_proba inf": ("predict_proba", (with_nan(X0, 1, 1, np.inf),), {},
                          r"X contains inf at row 1, column 1"),
    "predict_log_proba 1-D": ("predict_log_proba", (X0[0],), {}, r"Expected 2D array"),
    "decision_function empty": ("decision_function", (np.zeros((0, 3)),), {}, r"0 sample"),
    "score lengths": ("score", (X0, Y0[:10]), {}, r"inconsistent|10"),
}


@pytest.mark.parametrize("case", list(REJECTED))
def test_rejected_call_names_the_problem_and_changes_nothing(fitted, case):
    method, args, kwargs, match = REJECTED[case]
    if case == "fit impossible early stopping":
        fitted.set_params(early_stopping=True, validation_fraction=0.5)
    before = snapshot(fitted)
    inputs = copy.deepcopy((args, kwargs))
    with pytest.raises(ValueError, match=match):
        getattr(fitted, method)(*args, **kwargs)
    assert_same_state(before, snapshot(fitted))
    for a, b in zip(args, inputs[0], strict=True):
        np.testing.assert_array_equal(a, b)


def test_fit_interrupted_by_a_warning_turned_error_changes_nothing(fitted):
    """Under warnings-as-errors a DivergenceWarning leaves fit mid-way: the
    model must still be the one from before."""
    before = snapshot(fitted)
    changes = dict(learning_rate="constant", eta0=1e6, alpha=10.0, n_iter_no_change=1000,
                   max_iter=200)
    fitted.set_params(**changes)
    before.update(changes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DivergenceWarning)
        with pytest.raises(DivergenceWarning):
            fitted.fit(X0 * 1e3, Y0)
    assert_same_state(before, snapshot(fitted))


def test_first_partial_fit_rejected_leaves_an_unfitted_model():
    est = SoftmaxRegression("sgd")
    with pytest.raises(ValueError, match=r"y\[0\] = 5 is not one of the classes"):
        est.partial_fit(X0, Y0 + 5, classes=[0, 1, 2])
    assert not hasattr(est, "n_features_in_") and not hasattr(est, "classes_")


@pytest.mark.parametrize("parallel", [False, True], ids=["one chunk", "every thread"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_soft_targets_rejected_with_the_row(dt, parallel):
    """The scan names the row in one chunk (a small call) and across chunks."""
    X, y = toy()
    X = X.astype(dt)
    Y = np.full((60, 3), 1 / 3, dtype=dt)
    W = np.zeros((3, 3), dtype=dt)
    with parallel_launches() if parallel else contextlib.nullcontext():
        bad = Y.copy()
        bad[17] = [0.5, 0.75, -0.25]
        with pytest.raises(ValueError, match=r"y row 17 is not a probability vector.*min -0\.25"):
            fs.loss_and_grad(X, bad, W)
        bad = Y.copy()
        bad[41] = [0.5, 0.5, 0.5]
        with pytest.raises(ValueError, match=r"y row 41 is not a probability vector.*sum 1\.5"):
            fs.loss_and_grad(X, bad, W)


# ------------------------------------------------------------- input forms
def _forms(a: np.ndarray, tmp_path: pathlib.Path, tag: str):
    """(name, array-like) pairs holding ``a``'s values in every accepted form."""
    ro = np.array(a)
    ro.flags.writeable = False
    wide = np.zeros((a.shape[0], 2 * a.shape[1]) if a.ndim == 2 else 2 * a.shape[0], a.dtype)
    if a.ndim == 2:
        wide[:, ::2] = a
        strided = wide[:, ::2]
    else:
        wide[::2] = a
        strided = wide[::2]
    mm = np.memmap(tmp_path / f"{tag}.dat", dtype=a.dtype, mode="w+", shape=a.shape)
    mm[:] = a
    mm.flush()
    mm_r = np.memmap(tmp_path / f"{tag}.dat", dtype=a.dtype, mode="r", shape=a.shape)
    np.save(tmp_path / f"{tag}.npy", a)
    loaded = np.load(tmp_path / f"{tag}.npy", mmap_mode="r")
    forms = [("readonly", ro), ("memmap", mm_r), ("load_mmap", loaded),
             ("fortran", np.asfortranarray(a)), ("strided", strided), ("list", a.tolist())]
    if a.ndim == 2:
        forms.append(("dataframe", pd.DataFrame(a)))
    return forms


def _unchanged(form, original):
    arr = form.to_numpy() if hasattr(form, "to_numpy") else np.asarray(form)
    np.testing.assert_array_equal(arr, original)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_every_input_form_gives_the_c_contiguous_result(tmp_path, dt):
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((9, 4)).astype(dt) * 3
    Z[2, 1] = -np.inf
    X = rng.standard_normal((40, 3)).astype(dt)
    y = np.arange(40) % 4
    W = rng.standard_normal((3, 4)).astype(dt)
    b = rng.standard_normal(4).astype(dt)
    sw = rng.uniform(0.5, 2, 40).astype(dt)
    Y = rng.dirichlet(np.ones(4), 40).astype(dt)
    Y /= Y.sum(axis=1, keepdims=True)
    want = {f.__name__: f(Z) for f in (fs.softmax, fs.log_softmax, fs.logsumexp)}
    want_lag = fs.loss_and_grad(X, y, W, b, sample_weight=sw, alpha=0.1)
    want_soft = fs.loss_and_grad(X, Y, W, b)
    forms = {name: dict(_forms(a, tmp_path, name)) for name, a in
             dict(Z=Z, X=X, W=W, b=b, sw=sw, Y=Y).items()}
    for form in forms["Z"]:
        for f in (fs.softmax, fs.log_softmax, fs.logsumexp):
            got = f(forms["Z"][form])
            # lists become float64: compare against the float64 result then
            ref = want[f.__name__] if form != "list" else f(Z.astype(np.float64))
            np.testing.assert_array_equal(got, ref, err_msg=f"{f.__name__} {form}")
        _unchanged(forms["Z"][form], Z)
    for form in forms["X"]:
        fX = forms["X"][form]
        if form == "list":
            continue  # a list X is float64; covered by the dtype tests
        got = fs.loss_and_grad(fX, y, forms["W"].get(form, W), forms["b"].get(form, b),
                               sample_weight=forms["sw"].get(form, sw), alpha=0.1)
        assert got[0] == want_lag[0], form
        np.testing.assert_array_equal(got[1], want_lag[1], err_msg=form)
        np.testing.assert_array_equal(got[2], want_lag[2], err_msg=form)
        got = fs.loss_and_grad(fX, forms["Y"].get(form, Y), W, b)
        assert got[0] == want_soft[0], form
        np.testing.assert_array_equal(got[1], want_soft[1], err_msg=form)
    for name, a in dict(X=X, W=W, b=b, sw=sw, Y=Y).items():
        for form in forms[name].values():
            _unchanged(form, a)


@pytest.mark.parametrize("kind", ["int", "bool"])
def test_integer_and_boolean_data_equal_float64(kind):
    rng = np.random.default_rng(2)
    Xi = rng.integers(-3, 4, (50, 4)) if kind == "int" else rng.random((50, 4)) > 0.5
    y = np.arange(50) % 3
    Xf = Xi.astype(np.float64)
    W = rng.standard_normal((4, 3))
    for got, want in zip(fs.loss_and_grad(Xi, y, W), fs.loss_and_grad(Xf, y, W), strict=True):
        if want is not None:
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(fs.softmax(Xi), fs.softmax(Xf))
    a = SoftmaxRegression(max_iter=30).fit(Xi, y)
    b = SoftmaxRegression(max_iter=30).fit(Xf, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.coef_.dtype == np.float64
    np.testing.assert_array_equal(a.predict_proba(Xi), b.predict_proba(Xf))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_estimator_accepts_every_form_and_modifies_nothing(tmp_path, dt):
    X, y = toy(m=90, n=4)
    X = X.astype(dt)
    sw = np.linspace(0.5, 1.5, 90).astype(dt)
    params = dict(max_iter=15, random_state=0)

    def train(Xf, swf, solver):
        est = SoftmaxRegression(solver, **params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return est.fit(Xf, y, sample_weight=swf)

    ref = {s: train(X, sw, s) for s in ("lbfgs", "sgd")}
    sw_forms = dict(_forms(sw, tmp_path, "sw"))
    for form, Xf in _forms(X, tmp_path, "X"):
        if form == "list":
            continue  # a list is float64 data: a different model in float32
        for solver in ("lbfgs", "sgd"):
            est = train(Xf, sw_forms.get(form, sw), solver)
            np.testing.assert_array_equal(est.coef_, ref[solver].coef_, err_msg=form)
            np.testing.assert_array_equal(est.intercept_, ref[solver].intercept_)
            assert est.coef_.dtype == dt
        model = ref["lbfgs"]
        np.testing.assert_array_equal(model.predict(Xf), model.predict(X), err_msg=form)
        for method in ("predict_proba", "predict_log_proba", "decision_function"):
            np.testing.assert_array_equal(getattr(model, method)(Xf), getattr(model, method)(X),
                                          err_msg=f"{method} {form}")
        assert model.score(Xf, y) == model.score(X, y)
        pf = SoftmaxRegression("sgd", random_state=0).partial_fit(Xf, y, classes=[0, 1, 2])
        pr = SoftmaxRegression("sgd", random_state=0).partial_fit(X, y, classes=[0, 1, 2])
        np.testing.assert_array_equal(pf.coef_, pr.coef_, err_msg=form)
        _unchanged(Xf, X)
    for form in sw_forms.values():
        _unchanged(form, sw)


def _read_only_signatures() -> set[str]:
    """The signatures of this package's kernels that take a read-only array."""
    from numba import types
    from numba.core.registry import CPUDispatcher

    found = set()
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] != "fastsoftmax":
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, CPUDispatcher):
                found.update(f"{name}.{attr}{sig}" for sig in value.signatures
                             if any(isinstance(t, types.Array) and not t.mutable for t in sig))
    return found


def test_no_kernel_is_compiled_for_read_only_arrays():
    """Read-only arrays -- memory-mapped files, joblib's memmaps of a model or
    of sparse data in parallel workers -- reach the kernels typed writable:
    Numba would otherwise compile each kernel a second time for them.
    Every entry point, with every array it takes read-only, dense and
    sparse, and a model whose attributes are read-only."""
    import scipy.sparse

    def ro(a):
        a = np.array(a)
        a.flags.writeable = False
        return a

    X, y = toy(m=90, n=4)
    S = scipy.sparse.csr_matrix(X)
    S.data, S.indices, S.indptr = ro(S.data), ro(S.indices), ro(S.indptr)
    sw = ro(np.linspace(0.5, 1.5, 90))
    W, b, V, c = ro(np.zeros((4, 3))), ro(np.zeros(3)), ro(np.ones((4, 3))), ro(np.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for data in (ro(X), S):
            fs.loss_and_grad(data, ro(y), W, b, sample_weight=sw, alpha=0.1)
            fs.hessp(data, ro(y), W, b, V, c, sample_weight=sw, alpha=0.1)
            for solver in ("auto", "sgd"):
                model = SoftmaxRegression(solver, max_iter=3, random_state=0).fit(
                    data, ro(y), sample_weight=sw)
                for attr in ("coef_", "intercept_"):
                    setattr(model, attr, ro(getattr(model, attr)))
                for method in ("predict", "predict_proba", "predict_log_proba",
                               "decision_function"):
                    getattr(model, method)(data)
                for data_again in (ro(X), S):
                    model.predict_proba(data_again)
            model.partial_fit(data, ro(y))
        fs.softmax(ro(X))
        fs.log_softmax(ro(X))
        fs.logsumexp(ro(X))
    assert not _read_only_signatures()


def test_warm_start_with_one_feature_does_not_alias_coef():
    X, y = toy(n=1)
    est = SoftmaxRegression("sgd", warm_start=True, max_iter=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
        held = est.coef_
        kept = held.copy()
        est.fit(X, y)
    np.testing.assert_array_equal(held, kept)  # the old array was not written through
    kept = est.coef_.copy()
    held = est.coef_
    est.partial_fit(X, y)
    np.testing.assert_array_equal(held, kept)


# ---------------------------------------------------------------- extremes
@pytest.mark.parametrize("dt, big", [(np.float64, 1e300), (np.float32, 1e38)])
def test_huge_logits_give_finite_correct_results(dt, big):
    Z = np.array([[big, -big, 0.0], [big, big, big], [big, big / 2, -np.inf],
                  [-big, -big, -big], [0.0, 0.0, 0.0]], dtype=dt)
    with np.errstate(all="raise"):
        P = fs.softmax(Z)
        L = fs.log_softmax(Z)
        lse = fs.logsumexp(Z)
    assert P.dtype == dt and L.dtype == dt and lse.dtype == dt
    assert np.all(np.isfinite(P)) and np.all(np.isfinite(lse))
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(P, reference.softmax(Z), rtol=1e-6, atol=0)
        np.testing.assert_allclose(lse, reference.logsumexp(Z), rtol=1e-6)
    np.testing.assert_allclose(P.sum(axis=1), 1, rtol=1e-6)
    np.testing.assert_array_equal(P[1], np.full(3, 1 / 3, dtype=dt))
    np.testing.assert_array_equal(P[[2], 2], [0])
    # log_softmax: finite wherever z - logsumexp(z) is representable
    assert L[2, 2] == -np.inf
    assert np.isfinite(L[1]).all() and np.isfinite(L[3]).all() and np.isfinite(L[2, :2]).all()
    np.testing.assert_allclose(L[[1, 3, 4]], np.log(1 / 3), rtol=1e-6)
    assert L[0, 0] == 0 and L[0, 2] == -big


def test_loss_and_grad_with_huge_features_and_small_weights():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 4)) * 1e30
    y = np.arange(30) % 3
    W = rng.standard_normal((4, 3)) * 1e-3
    b = np.zeros(3)
    with np.errstate(all="raise"):
        loss, gW, gb = fs.loss_and_grad(X, y, W, b)
    rl, rW, rb = reference.loss_and_grad(X, y, W, b)
    assert np.isfinite(loss) and np.all(np.isfinite(gW)) and np.all(np.isfinite(gb))
    np.testing.assert_allclose(loss, rl, rtol=1e-10)
    np.testing.assert_allclose(gW, rW, rtol=1e-10, atol=1e-10 * np.abs(rW).max())
    # logits of 1e300: the loss is ~1e300, still finite in float64
    X = np.array([[1e150, 0.0], [0.0, 1e150], [1.0, 1.0]])
    W = np.array([[1e150, -1e150, 0.0], [0.0, 1.0, 2.0]])
    loss, gW, _ = fs.loss_and_grad(X, [1, 0, 2], W, np.zeros(3))
    np.testing.assert_allclose(loss, reference.loss_and_grad(X, [1, 0, 2], W, np.zeros(3))[0])
    assert np.isfinite(loss) and np.all(np.isfinite(gW))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_logits_that_overflow_the_dtype_are_a_clear_error(dt):
    big = np.finfo(dt).max / 4
    X = np.full((3, 2), big, dtype=dt)
    W = np.full((2, 3), 8, dtype=dt)
    match = f"not finite at row 0: .*too large for {np.dtype(dt).name}"
    with pytest.raises(ValueError, match=match):
        fs.loss_and_grad(X, [0, 1, 2], W)


@pytest.mark.parametrize("solver", ["lbfgs", "sgd", "bgd"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_training_on_features_of_1e30(solver, dt):
    """Either a finite model or a clear error; never NaN weights or a leaked
    RuntimeWarning (pytest turns it into an error)."""
    X, y = toy()
    X = (X * 1e30).astype(dt)
    est = SoftmaxRegression(solver, max_iter=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # DivergenceWarning included
        try:
            est.fit(X, y)
        except ValueError as exc:
            assert "too large" in str(exc) or "not finite" in str(exc)
            assert not hasattr(est, "coef_")
            return
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    try:
        P = est.predict_proba(X)
    except ValueError as exc:  # finite weights, but logits beyond the dtype
        assert f"overflow {np.dtype(dt).name} at row" in str(exc)
        return
    assert np.all(np.isfinite(P))
    np.testing.assert_allclose(P.sum(axis=1), 1, rtol=1e-5)


@pytest.mark.parametrize("solver", ["lbfgs", "sgd", "bgd"])
def test_all_equal_rows_train_to_the_class_frequencies(solver):
    X = np.ones((60, 3))
    y = np.r_[np.zeros(30), np.ones(20), np.full(10, 2)].astype(int)
    est = SoftmaxRegression(solver, alpha=0.0, max_iter=300, random_state=0, eta0=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    P = est.predict_proba(X[:1])[0]
    assert np.all(np.isfinite(est.coef_))
    # lbfgs and bgd reach the optimum; sgd ends within its step noise
    np.testing.assert_allclose(P, [0.5, 1 / 3, 1 / 6], atol=0.03 if solver != "sgd" else 0.1)


def test_decision_function_overflow_is_a_clear_error():
    est = SoftmaxRegression().fit(*toy(n=2))
    X = np.array([[0.0, 0.0], [1.7e308, 1.7e308]]) * np.sign(est.coef_[0])
    for method in ("decision_function", "predict_proba", "predict_log_proba"):
        with pytest.raises(ValueError, match="overflow float64 at row 1: .*rescale X"):
            getattr(est, method)(X)


def test_predict_on_huge_rows_is_finite():
    est = SoftmaxRegression().fit(*toy(n=2))
    X = np.array([[1e300, 1e300], [1.7e308, -1.7e308], [-1e300, 0.0]])
    with np.errstate(all="raise"):
        P = est.predict_proba(X)
        L = est.predict_log_proba(X)
    assert np.all(np.isfinite(P)) and not np.any(np.isnan(L))
    np.testing.assert_allclose(P.sum(axis=1), 1)
    np.testing.assert_array_equal(est.predict(X), est.classes_[P.argmax(axis=1)])


# -------------------------------------------------------------- divergence
@pytest.mark.parametrize("solver", ["sgd", "bgd", "partial_fit"])
def test_divergent_learning_rate_is_named_and_last_weights_kept(solver):
    X, y = toy()
    X = X * 1e3
    params = dict(learning_rate="constant", eta0=1e6, alpha=10.0, n_iter_no_change=1000,
                  max_iter=200)
    if solver == "partial_fit":
        est = SoftmaxRegression("sgd", random_state=0, batch_size=8,
                                **{**params, "eta0": 1e-3})
        est.partial_fit(X, y, classes=[0, 1, 2])
        est.set_params(eta0=1e6)  # takes effect in the next call, momentum carried
        with pytest.warns(DivergenceWarning,
                          match=r"non-finite.*learning rate eta=1e\+06") as record:
            for _ in range(50):
                good = (est.coef_.copy(), est.intercept_.copy())
                est.partial_fit(X, y)
                if any(issubclass(w.category, DivergenceWarning) for w in record):
                    break
        # the weights from before the call that diverged
        np.testing.assert_array_equal(est.coef_, good[0])
        np.testing.assert_array_equal(est.intercept_, good[1])
    else:
        est = SoftmaxRegression(solver, random_state=0, **params)
        with pytest.warns(DivergenceWarning, match=r"non-finite.*learning rate eta=1e\+06"):
            est.fit(X, y)
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    assert np.all(np.isfinite(est.loss_curve_))
    assert np.all(np.isfinite(est.predict_proba(X)))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("how", ["fit", "partial_fit", "bgd"])
def test_overflow_in_the_last_update_without_penalty_keeps_finite_weights(how, dt):
    """alpha = 0 and one batch per epoch: the epoch's only update overflows the
    weights while the loss it reports (from the logits before the update) is
    finite. The weights' finiteness must count as divergence by itself."""
    X, y = toy()
    X = (X * 1e3).astype(dt)
    eta0 = 1e307 if dt == np.float64 else 1e37
    est = SoftmaxRegression("sgd" if how != "bgd" else "bgd", alpha=0.0, batch_size=64,
                            eta0=eta0, learning_rate="constant", n_iter_no_change=1000,
                            random_state=0)
    with pytest.warns(DivergenceWarning,
                      match="non-finite.*learning rate eta=" + re.escape(f"{eta0:g}")):
        if how == "partial_fit":
            est.partial_fit(X, y, classes=[0, 1, 2])
        else:
            est.fit(X, y)
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    assert np.all(np.isfinite(est.loss_curve_))
    # the first update already overflowed: the kept weights are the starting ones
    np.testing.assert_array_equal(est.coef_, 0)
    assert np.all(np.isfinite(est.predict_proba(X)))


def test_partial_fit_after_an_overflowing_call_kept_the_previous_weights():
    X, y = toy()
    X = X * 1e3
    est = SoftmaxRegression("sgd", alpha=0.0, batch_size=64, learning_rate="constant",
                            eta0=1e-3, random_state=0)
    est.partial_fit(X, y, classes=[0, 1, 2])
    good = (est.coef_.copy(), est.intercept_.copy())
    assert np.abs(good[0]).max() > 0
    est.set_params(eta0=1e307)
    with pytest.warns(DivergenceWarning, match=r"learning rate eta=1e\+307"):
        est.partial_fit(X, y)
    np.testing.assert_array_equal(est.coef_, good[0])
    np.testing.assert_array_equal(est.intercept_, good[1])


@pytest.mark.parametrize("where", ["coef_", "intercept_"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_model_with_non_finite_weights_refuses_to_predict(where, bad):
    X, y = toy()
    est = SoftmaxRegression().fit(X, y)
    getattr(est, where)[0] = bad
    for method in ("predict", "predict_proba", "predict_log_proba", "decision_function"):
        with pytest.raises(ValueError, match="coef_ or intercept_ holds NaN or inf"):
            getattr(est, method)(X)
    with pytest.raises(ValueError, match="coef_ or intercept_ holds NaN or inf"):
        est.score(X, y)
    binary = SoftmaxRegression().fit(X, y % 2)
    getattr(binary, where)[0] = bad
    with pytest.raises(ValueError, match="coef_ or intercept_ holds NaN or inf"):
        binary.decision_function(X)


# ------------------------------------------------------------- model files
class _Payload:
    """Unpickling this creates ``path``: proof that pickled code ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


@pytest.fixture
def model_files(tmp_path):
    X, y = toy()
    good = tmp_path / "good.npz"
    SoftmaxRegression().fit(X, y).save(good)
    with np.load(good) as data:
        arrays = dict(data)
    raw = good.read_bytes()
    marker = tmp_path / "PWNED"
    files = {}

    def variant(name, **changes):
        a = {**arrays, **changes}
        for key in [k for k, v in changes.items() if v is None]:
            del a[key]
        np.savez(tmp_path / f"{name}.npz", **a)
        files[name] = tmp_path / f"{name}.npz"

    (tmp_path / "truncated.npz").write_bytes(raw[: len(raw) // 2])
    files["truncated"] = tmp_path / "truncated.npz"
    (tmp_path / "empty.npz").write_bytes(b"")
    files["empty"] = tmp_path / "empty.npz"
    (tmp_path / "text.npz").write_text("coef,intercept\n1,2\n")
    files["text"] = tmp_path / "text.npz"
    np.savez(tmp_path / "foreign.npz", a=np.arange(3), b=np.eye(2))
    files["foreign"] = tmp_path / "foreign.npz"
    np.save(tmp_path / "array.npy", np.eye(3))
    files["npy"] = tmp_path / "array.npy"
    # pickled objects: inside the .npz, and a bare pickle under a model's name
    payload = np.empty(1, dtype=object)
    payload[0] = _Payload(marker)
    variant("pickled_coef", coef=payload)
    variant("pickled_extra", evil=payload)
    (tmp_path / "pickle.npz").write_bytes(pickle.dumps(_Payload(marker)))
    files["pickle"] = tmp_path / "pickle.npz"
    variant("coef_1d", coef=arrays["coef"][0])
    variant("coef_int", coef=arrays["coef"].astype(np.int64))
    variant("coef_nan", coef=np.full_like(arrays["coef"], np.nan))
    variant("intercept_shape", intercept=arrays["intercept"][:2])
    variant("intercept_dtype", intercept=arrays["intercept"].astype(np.float32))
    variant("classes_shape", classes=np.arange(5))
    variant("classes_unsorted", classes=arrays["classes"][::-1])
    variant("no_coef", coef=None)
    variant("format_other", format=np.array("someone-else"))
    variant("format_int", format=np.array(3))
    variant("version_2d", format_version=np.ones((2, 2), dtype=int))
    variant("version_text", format_version=np.array("one"))
    variant("n_iter_text", n_iter=np.array("many"))
    variant("loss_curve_text", loss_curve=np.array(["a", "b"]))
    variant("params_list", params=np.array("[1, 2]"))
    variant("params_bad_json", params=np.array("{not json"))
    variant("params_unknown", params=np.array('{"kernel": "rbf"}'))
    variant("params_invalid", params=np.array('{"n_threads": 0}'))
    variant("names_shape", feature_names_in=np.array(["a"]))
    return good, files, marker


def test_pickle_payload_is_live(tmp_path):
    """The payload used below really would create the marker if unpickled,
    so the tests that it does not are not vacuous."""
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.exists()


def test_load_rejects_every_malformed_file_without_running_code(model_files):
    good, files, marker = model_files
    SoftmaxRegression.load(good)  # the base file itself is fine
    for name, path in files.items():
        with pytest.raises(ValueError, match=r"not a (valid|readable|fastsoftmax)") as err:
            SoftmaxRegression.load(path)
        assert str(path) in str(err.value), name
        assert "\n" not in str(err.value).strip(), name
        assert not marker.exists(), f"{name}: pickled code was executed"


def test_cli_predict_on_malformed_model_files(model_files, tmp_path, capsys):
    good, files, marker = model_files
    data = tmp_path / "data.npz"
    np.savez(data, X=toy()[0])
    assert cli_main(["predict", str(good), str(data), "-o", str(tmp_path / "p.csv")]) == 0
    capsys.readouterr()
    for name, path in files.items():
        assert cli_main(["predict", str(path), str(data)]) == 1, name
        out, err = capsys.readouterr()
        assert out == "", name
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fastsoftmax: error: "), (name, err)
        assert str(path) in lines[0], name
        assert not marker.exists(), f"{name}: pickled code was executed"


@pytest.mark.slow
def test_cli_predict_on_pickle_in_a_subprocess(model_files):
    """The installed command path, in a fresh interpreter: exit status 1,
    one line, and the payload not run."""
    _, files, marker = model_files
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.path.dirname(__file__)] + [os.environ.get("PYTHONPATH", "")])}
    for name in ("pickle", "pickled_coef"):
        data = files[name].parent / "data.npz"
        np.savez(data, X=toy()[0])
        proc = subprocess.run([sys.executable, "-m", "fastsoftmax", "predict",
                               str(files[name]), str(data)],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 1, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not marker.exists()
