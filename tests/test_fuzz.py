"""Fuzzing every public entry point with hypothesis.

Random shapes (0 rows or columns included), dtypes (float16/32/64, int,
bool, complex, object, strings), memory orders and values (extremes, NaN,
±inf). Every call must either raise ValueError/TypeError with a non-empty
message, or return a finite, correct result (checked against
``fastsoftmax.reference`` where it applies) -- and never modify its input.
Shapes are small and examples bounded (the "ci" profile of conftest) so
that the whole file runs in well under a minute.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

import fastsoftmax as fs
from fastsoftmax import SoftmaxRegression, reference

ALLOWED = (ValueError, TypeError)
FUZZ = settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow,
                                                        HealthCheck.data_too_large])

SPECIAL = [0.0, -0.0, 1.0, -1.0, 1e30, -1e30, 1e300, -1e300, 1e38, -1e38,
           np.nan, np.inf, -np.inf, 5e-324]
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8, np.bool_,
          np.complex128, "object", "U3"]


@st.composite
def arrays(draw, ndim=None, max_side=5, dtypes=DTYPES, min_side=0, finite=False):
    nd = draw(st.sampled_from([1, 2])) if ndim is None else ndim
    shape = tuple(draw(st.integers(min_side, max_side)) for _ in range(nd))
    dt = draw(st.sampled_from(dtypes))
    special = [v for v in SPECIAL if np.isfinite(v) and abs(v) < 1e35] if finite else SPECIAL
    values = draw(st.lists(st.one_of(st.sampled_from(special),
                                     st.floats(-10, 10, allow_nan=False)),
                           min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    base = np.array(values, dtype=np.float64).reshape(shape)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # casting NaN/inf to ints
        if dt == "object":
            a = base.astype(object)
        elif dt == "U3":
            a = base.astype(str).astype("U3")
        else:
            a = base.astype(dt)
    layout = draw(st.sampled_from(["c", "fortran", "strided", "readonly", "list"]))
    if layout == "fortran":
        a = np.asfortranarray(a)
    elif layout == "strided" and a.ndim == 2 and a.size:
        wide = np.empty((a.shape[0], 2 * a.shape[1]), dtype=a.dtype)
        wide[:, ::2] = a
        a = wide[:, ::2]
    elif layout == "readonly":
        a = np.array(a)
        a.flags.writeable = False
    elif layout == "list":
        return a.tolist()
    return a


def frozen(a):
    """A copy to compare against after the call."""
    return a if not isinstance(a, np.ndarray) else a.copy()


def same(a, b):
    if isinstance(a, np.ndarray) and a.dtype.kind not in "biufc":
        return a.dtype == b.dtype and a.shape == b.shape and repr(a.tolist()) == repr(b.tolist())
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
            a, b, equal_nan=a.dtype.kind in "fc")
    return a == b or (a != a and b != b)


def call(f, *args, **kwargs):
    """Run f; return its result, or None after an allowed clean error."""
    before = [frozen(a) for a in args] + [frozen(v) for v in kwargs.values()]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.simplefilter("ignore", ConvergenceWarning)  # DivergenceWarning too
            result = f(*args, **kwargs)
    except ALLOWED as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        result = None
    after = list(args) + list(kwargs.values())
    for a, b in zip(after, before, strict=True):
        assert same(a, b) if isinstance(b, np.ndarray) else True, "input modified"
    return result


def as_float(a):
    arr = np.asarray(a)
    dt = arr.dtype if arr.dtype in (np.float32, np.float64) else np.float64
    return arr.astype(dt)


def finite_input(a):
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return bool(np.all(np.isfinite(arr)))


@FUZZ
@given(arrays())
def test_softmax_family(Z):
    for f in (fs.softmax, fs.log_softmax, fs.logsumexp):
        got = call(f, Z)
        if got is None:
            continue
        Zf = as_float(Z)
        assert Zf.shape[-1] > 0, "a row of length 0 was accepted"
        assert got.dtype == Zf.dtype
        assert got.shape == (Zf.shape if f is not fs.logsumexp else Zf.shape[:-1])
        if Zf.size == 0:
            continue
        # log_softmax as (z - max) - log(sum(exp(z - max))): the reference's
        # z - logsumexp(z) loses every digit when |max z| is huge (1e30 in
        # float32 gives 0 instead of -log 2).
        with np.errstate(all="ignore"):
            mx = np.max(Zf, axis=-1, keepdims=True)
            mx = np.where(np.isfinite(mx), mx, 0)
            lse_c = np.log(np.sum(np.exp(Zf - mx), axis=-1, keepdims=True))
            want = {"softmax": reference.softmax(Zf), "log_softmax": (Zf - mx) - lse_c,
                    "logsumexp": (mx + lse_c)[..., 0]}[f.__name__]
        rtol = 1e-3 if Zf.dtype == np.float32 else 1e-6
        assert not np.any(np.isnan(got)), "NaN from finite input"
        if f is fs.softmax:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)
        else:
            # -inf only where the true value is below the dtype's range
            ok = np.isfinite(want)
            np.testing.assert_array_equal(np.isfinite(got), ok)
            np.testing.assert_allclose(np.where(ok, got, 0), np.where(ok, want, 0),
                                       rtol=rtol, atol=1e-5)


@st.composite
def problems(draw):
    m = draw(st.integers(0, 6))
    n = draw(st.integers(0, 4))
    k = draw(st.integers(0, 4))
    X = draw(arrays(ndim=2, max_side=6))
    if draw(st.booleans()):  # usually consistent shapes, so the kernels run
        X = draw(arrays(ndim=2, max_side=6, dtypes=[np.float32, np.float64, np.int64,
                                                    np.bool_]))
        Xa = np.asarray(X)
        m, n = Xa.shape
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    W = draw(st.sampled_from(["ok", "fuzz"]))
    W = (rng.standard_normal((n, k)) * draw(st.sampled_from([1e-3, 1.0, 1e3]))
         if W == "ok" else draw(arrays(ndim=2)))
    b = draw(st.sampled_from(["none", "ok", "fuzz"]))
    b = None if b == "none" else (np.zeros(k) if b == "ok" else draw(arrays(ndim=1)))
    kind = draw(st.sampled_from(["labels", "soft", "fuzz"]))
    if kind == "labels":
        y = rng.integers(0, max(k, 1), m)
    elif kind == "soft":
        y = rng.dirichlet(np.ones(max(k, 1)), m) if k else np.zeros((m, 0))
    else:
        y = draw(arrays())
    sw = draw(st.sampled_from(["none", "ok", "fuzz"]))
    sw = None if sw == "none" else (rng.uniform(0.1, 2, m) if sw == "ok" else draw(arrays(ndim=1)))
    return X, y, W, b, sw


@FUZZ
@given(problems(), st.sampled_from([0.0, 0.5]))
def test_loss_and_grad(problem, alpha):
    X, y, W, b, sw = problem
    got = call(fs.loss_and_grad, X, y, W, b, alpha=alpha, sample_weight=sw)
    if got is None:
        return
    loss, gW, gb = got
    Xf = as_float(X)
    assert np.isfinite(loss) and np.all(np.isfinite(gW))
    assert gW.dtype == Xf.dtype and (gb is None) == (b is None)
    with np.errstate(all="ignore"):
        rl, rW, rb = reference.loss_and_grad(Xf, np.asarray(y), np.asarray(W, Xf.dtype),
                                             None if b is None else np.asarray(b, Xf.dtype),
                                             alpha=alpha, sample_weight=sw)
    rtol = 1e-3 if Xf.dtype == np.float32 else 1e-7
    if np.isfinite(rl):
        np.testing.assert_allclose(loss, rl, rtol=rtol, atol=1e-6)
        scale = max(1.0, float(np.abs(rW).max()) if rW.size else 1.0)
        np.testing.assert_allclose(gW, rW, rtol=rtol, atol=rtol * scale)


@st.composite
def training_sets(draw):
    X = draw(st.one_of(
        arrays(ndim=2, max_side=8),
        # mostly trainable data, so that fit, predict and partial_fit run
        arrays(ndim=2, max_side=8, min_side=1, dtypes=[np.float32, np.float64, np.int64],
               finite=True)))
    n_rows = np.asarray(X).shape[0] if not isinstance(X, list) or X else 0
    labels = st.lists(st.sampled_from([0, 1, 2]), min_size=n_rows, max_size=n_rows)
    y = draw(st.one_of(
        labels.map(np.array), labels.map(np.array),
        st.lists(st.sampled_from(["a", "b"]), min_size=n_rows, max_size=n_rows).map(np.array),
        arrays(ndim=1, max_side=8)))
    sw = draw(st.one_of(st.none(), st.none(), arrays(ndim=1, max_side=8)))
    return X, y, sw


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(training_sets(), st.sampled_from(["lbfgs", "sgd", "bgd"]), arrays(ndim=2, max_side=8))
def test_estimator_fit_predict_partial_fit_save_load(tmp_path_factory, data, solver, X_new):
    X, y, sw = data
    est = SoftmaxRegression(solver, max_iter=5, random_state=0)
    fitted = call(est.fit, X, y, sample_weight=sw)
    event("fit accepted" if fitted is not None else "fit rejected")
    if fitted is None:
        assert not hasattr(est, "coef_")  # a rejected first fit leaves no model
        return
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    assert est.coef_.dtype == (np.float32 if np.asarray(X).dtype == np.float32 else np.float64)
    for X_in in (X, X_new):
        P = call(est.predict_proba, X_in)
        if P is not None:
            assert not np.any(np.isnan(P)), "NaN probabilities"
            np.testing.assert_allclose(P.sum(axis=1), 1, rtol=1e-4)
            labels = call(est.predict, X_in)
            np.testing.assert_array_equal(labels, est.classes_[np.argmax(P, axis=1)]) \
                if finite_input(X_in) and np.ptp(P, axis=1).min(initial=1) > 1e-4 else None
        # the other predict-like methods accept and reject exactly what
        # predict_proba does, and agree with it
        L = call(est.predict_log_proba, X_in)
        D = call(est.decision_function, X_in)
        assert (L is None) == (P is None) and (D is None) == (P is None)
        if P is not None:
            assert not np.any(np.isnan(L)) and not np.any(np.isnan(D))
            np.testing.assert_allclose(np.exp(L), P, rtol=1e-3, atol=1e-6)
            assert D.shape == ((len(P),) if len(est.classes_) == 2 else P.shape)
            y_in = np.resize(est.classes_, len(P))
            score = call(est.score, X_in, y_in)
            assert score is not None and 0 <= score <= 1
            assert score == np.mean(call(est.predict, X_in) == y_in)
    state = {key: (v.copy() if isinstance(v, np.ndarray) else v)
             for key, v in est.__dict__.items() if key.endswith("_")}
    classes = est.classes_
    pf = call(est.partial_fit, X_new, np.resize(classes, np.asarray(X_new).shape[0])
              if np.ndim(X_new) == 2 else classes)
    if pf is None:  # rejected: nothing changed
        for key, v in state.items():
            assert same(getattr(est, key), v) if isinstance(v, np.ndarray) else True, key
    assert np.all(np.isfinite(est.coef_))
    path = tmp_path_factory.mktemp("fuzz") / "model.npz"
    est.save(path)
    back = SoftmaxRegression.load(path)
    np.testing.assert_array_equal(back.coef_, est.coef_)
    np.testing.assert_array_equal(back.classes_, est.classes_)


_MODEL_X = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
_MODEL: list[bytes] = []


def _model_bytes() -> bytes:
    if not _MODEL:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.npz")
            SoftmaxRegression(max_iter=50, tol=1e-2).fit(_MODEL_X, [0, 1, 0, 1]).save(path)
            with open(path, "rb") as fh:
                _MODEL.append(fh.read())
    return _MODEL[0]


@FUZZ
@given(st.binary(max_size=400), st.integers(0, 2000))
def test_load_random_bytes_and_corrupted_models(tmp_path_factory, junk, cut):
    folder = tmp_path_factory.mktemp("load")
    path = folder / "junk.npz"
    path.write_bytes(junk)
    call(SoftmaxRegression.load, path)
    # a real model, truncated or with bytes flipped
    X = _MODEL_X
    raw = bytearray(_model_bytes())
    cut = cut % len(raw)
    (folder / "cut.npz").write_bytes(raw[:cut])
    call(SoftmaxRegression.load, folder / "cut.npz")
    flipped = bytearray(raw)
    flipped[cut] ^= 0xFF
    (folder / "flip.npz").write_bytes(flipped)
    model = call(SoftmaxRegression.load, folder / "flip.npz")
    if model is not None:
        assert np.all(np.isfinite(model.coef_))
        P = call(model.predict_proba, X)
        assert P is None or not np.any(np.isnan(P))


@pytest.mark.parametrize("dt", ["float16", "int8", "uint16", "bool"])
def test_non_working_dtypes_become_float64(dt):
    Z = np.array([[1, 0, 1], [0, 0, 1]], dtype=dt)
    assert fs.softmax(Z).dtype == np.float64
    np.testing.assert_allclose(fs.softmax(Z), reference.softmax(Z.astype(np.float64)))


_LR_X = np.random.default_rng(7).standard_normal((12, 3)) + np.arange(12)[:, None] % 3
_LR_Y = np.arange(12) % 3


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(solver=st.sampled_from(["sgd", "bgd"]),
       log_eta=st.integers(-8, 308),
       learning_rate=st.sampled_from(["constant", "invscaling", "adaptive"]),
       alpha=st.sampled_from([0.0, 1e-4, 1.0]),
       batch_size=st.sampled_from([1, 5, 64]),
       momentum=st.sampled_from([0.0, 0.9]),
       scale=st.sampled_from([1.0, 1e3, 1e30]),
       dt=st.sampled_from([np.float32, np.float64]),
       binary=st.booleans())
# The audit's case: no penalty, one batch per epoch, and the epoch's only
# update overflows the weights while the loss it reports is finite.
@example(solver="sgd", log_eta=307, learning_rate="constant", alpha=0.0, batch_size=64,
         momentum=0.0, scale=1e3, dt=np.float64, binary=False)
@example(solver="sgd", log_eta=37, learning_rate="constant", alpha=0.0, batch_size=64,
         momentum=0.9, scale=1e3, dt=np.float32, binary=True)
@example(solver="bgd", log_eta=300, learning_rate="invscaling", alpha=0.0, batch_size=64,
         momentum=0.0, scale=1e3, dt=np.float32, binary=False)
def test_any_learning_rate_gives_finite_weights(solver, log_eta, learning_rate, alpha,
                                                batch_size, momentum, scale, dt, binary):
    """eta0 from 1e-8 to 1e308: fit and partial_fit end with finite weights --
    converged, or stopped by a DivergenceWarning naming the learning rate --
    never NaN; every predict-like method then gives a consistent finite
    answer or a clear ValueError (logits beyond the dtype)."""
    eta0 = 10.0 ** log_eta
    X = (_LR_X * scale).astype(dt)
    y = _LR_Y % 2 if binary else _LR_Y
    est = SoftmaxRegression(solver, eta0=eta0, learning_rate=learning_rate, alpha=alpha,
                            batch_size=batch_size, momentum=momentum, max_iter=4,
                            random_state=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est.fit(X, y)
        est.partial_fit(X, y)
    for w in record:
        # only convergence reports; no RuntimeWarning or anything else leaks
        assert issubclass(w.category, ConvergenceWarning), (w.category, str(w.message))
        if issubclass(w.category, fs.DivergenceWarning) and "non-finite" in str(w.message):
            assert "learning rate eta=" in str(w.message)
            event("diverged")
    assert est.coef_.dtype == dt
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    assert np.all(np.isfinite(est.loss_curve_))
    D = call(est.decision_function, X)
    L = call(est.predict_log_proba, X)
    P = call(est.predict_proba, X)
    labels = call(est.predict, X)
    assert labels is not None and labels.shape == (len(y),)
    score = call(est.score, X, y)
    assert score == np.mean(labels == y)
    if P is None:  # the logits overflow the dtype: all three say so
        assert D is None and L is None
        return
    assert D is not None and L is not None
    assert not np.any(np.isnan(D)) and not np.any(np.isnan(L)) and not np.any(np.isnan(P))
    np.testing.assert_allclose(P.sum(axis=1), 1, rtol=1e-4)
    np.testing.assert_allclose(np.exp(L), P, rtol=1e-3, atol=1e-6)
    if binary:
        assert D.shape == (len(y),)
        ok = np.abs(D) > 1e-3 * (1 + np.abs(D).max())  # away from a tie
        np.testing.assert_array_equal(labels[ok], np.where(D > 0, 1, 0)[ok])
    else:
        Ds = np.sort(D, axis=1)
        ok = Ds[:, -1] - Ds[:, -2] > 1e-3 * (1 + np.abs(D).max())
        np.testing.assert_array_equal(labels[ok], est.classes_[np.argmax(D, axis=1)][ok])
