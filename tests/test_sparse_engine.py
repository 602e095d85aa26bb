"""Sparse X through the estimator and the public functions (``_sparse_engine`` and its callers).

The kernels themselves are checked against the NumPy reference and finite
differences in test_sparse_kernels.py; here the question is whether a
scipy.sparse X trains and predicts exactly what the same data dense does,
reaches scikit-learn's optimum, is rejected with the right errors, and is
never densified.
"""

from __future__ import annotations

import tracemalloc
import warnings

import numba
import numpy as np
import pytest
import scipy.sparse as sp
from _helpers import FLOAT_DTYPES, dtype_id, parallel_launches
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from fastsoftmax import SoftmaxRegression, hessp, loss_and_grad
from fastsoftmax.datasets import make_text_like

SOLVERS = ("newton", "lbfgs", "bgd", "sgd")


@pytest.fixture(scope="module")
def text():
    X, y = make_text_like(n_samples=1200, n_features=3000, n_classes=4, nnz_per_row=30,
                          random_state=0)
    return X, y


def _fit(X, y, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return SoftmaxRegression(random_state=0, **params).fit(X, y)


# ------------------------------------------------------- sparse == dense
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("solver", SOLVERS)
def test_every_solver_trains_the_dense_model(text, solver, dtype):
    X, y = text
    Xs = X.astype(dtype)
    # float32 stops where its rounding does: tol within reach of it
    params = dict(solver=solver, alpha=1e-3, max_iter=60,
                  tol=1e-5 if dtype == np.float32 else 1e-8)
    a = _fit(Xs, y, **params)
    b = _fit(Xs.toarray(), y, **params)
    assert a.coef_.dtype == np.dtype(dtype)
    if dtype == np.float64:  # float32 rounding may end a fit one iteration apart
        assert a.n_iter_ == b.n_iter_
    tol = 2e-4 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(a.coef_, b.coef_, atol=tol * np.abs(b.coef_).max())
    np.testing.assert_allclose(a.intercept_, b.intercept_, atol=tol * np.abs(b.coef_).max())
    np.testing.assert_array_equal(a.predict(Xs), a.predict(Xs.toarray()))
    ptol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(a.predict_proba(Xs), a.predict_proba(Xs.toarray()), atol=ptol)
    np.testing.assert_allclose(a.predict_log_proba(Xs), a.predict_log_proba(Xs.toarray()),
                               atol=ptol * 10)
    np.testing.assert_allclose(a.decision_function(Xs), a.decision_function(Xs.toarray()),
                               atol=ptol * 10)
    assert a.score(Xs, y) == a.score(Xs.toarray(), y)


def test_newton_reaches_sklearn_optimum_on_sparse_data(text):
    X, y = text
    C = 10.0
    alpha = 1.0 / (C * X.shape[0])
    sk = LogisticRegression(C=C, solver="newton-cg", tol=1e-10, max_iter=10_000).fit(X, y)
    opt = loss_and_grad(X, y, sk.coef_.T.copy(), sk.intercept_.copy(), alpha=alpha)[0]
    est = SoftmaxRegression(alpha=alpha, tol=1e-10, max_iter=200).fit(X, y)
    got = loss_and_grad(X, y, est.coef_.T, est.intercept_, alpha=alpha)[0]
    assert got <= opt * (1 + 1e-6)
    assert abs(got - opt) <= 1e-6 * opt
    np.testing.assert_array_equal(est.predict(X), sk.predict(X))


def test_binary_decision_function_is_the_log_odds(text):
    X, y = text
    keep = y < 2
    Xb, yb = X[keep], y[keep]
    est = _fit(Xb, yb, max_iter=20)
    d = est.decision_function(Xb)
    assert d.shape == (Xb.shape[0],)
    np.testing.assert_allclose(d, est.decision_function(Xb.toarray()), atol=1e-12)


def test_weights_class_weights_and_early_stopping(text):
    X, y = text
    sw = np.random.default_rng(1).uniform(0.2, 2.0, size=len(y))
    for params in (dict(solver="lbfgs", class_weight="balanced"),
                   dict(solver="newton", fit_intercept=False),
                   dict(solver="sgd", early_stopping=True, max_iter=30)):
        a = SoftmaxRegression(random_state=0, **params)
        b = SoftmaxRegression(random_state=0, **params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            a.fit(X, y, sample_weight=sw)
            b.fit(X.toarray(), y, sample_weight=sw)
        np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-8 * np.abs(b.coef_).max())


def test_partial_fit_equals_dense(text):
    X, y = text
    classes = np.unique(y)
    a = SoftmaxRegression(solver="sgd", random_state=3)
    b = SoftmaxRegression(solver="sgd", random_state=3)
    for part in (slice(0, 500), slice(500, None)):
        a.partial_fit(X[part], y[part], classes=classes)
        b.partial_fit(X[part].toarray(), y[part], classes=classes)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-10)
    # momentum: the velocity goes through the sparse epoch too
    a = SoftmaxRegression(solver="sgd", momentum=0.9, random_state=3)
    b = SoftmaxRegression(solver="sgd", momentum=0.9, random_state=3)
    for _ in range(2):
        a.partial_fit(X, y, classes=classes)
        b.partial_fit(X.toarray(), y, classes=classes)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-10)


# ------------------------------------------------------- formats, errors
def _variants(X):
    """The same matrix in the forms users hand over."""
    coo = X.tocoo()
    yield "csc", X.tocsc()
    yield "coo", coo
    yield "csr_array", sp.csr_array(X)
    i64 = X.copy()
    i64.indices = i64.indices.astype(np.int64)
    i64.indptr = i64.indptr.astype(np.int64)
    yield "int64 indices", i64
    # each entry split in two halves, in reversed order: duplicates, unsorted
    rows = np.concatenate([coo.row, coo.row])[::-1]
    cols = np.concatenate([coo.col, coo.col])[::-1]
    vals = np.concatenate([coo.data / 2, coo.data / 2])[::-1]
    order = np.lexsort((-cols, rows))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=X.shape[0]))])
    yield "duplicates, unsorted", sp.csr_matrix((vals[order], cols[order], indptr),
                                                shape=X.shape)


def test_every_format_gives_the_csr_model(text):
    X, y = text
    want = _fit(X, y, max_iter=15)
    for name, Xv in _variants(X):
        got = _fit(Xv, y, max_iter=15)
        np.testing.assert_allclose(got.coef_, want.coef_, atol=1e-10, err_msg=name)
        np.testing.assert_allclose(got.predict_proba(Xv), want.predict_proba(X), atol=1e-12,
                                   err_msg=name)


def test_caller_matrix_is_not_modified(text):
    X, y = text
    X = X.tocsc()
    before = (X.data.copy(), X.indices.copy(), X.indptr.copy())
    est = _fit(X, y, solver="sgd", max_iter=3)
    est.predict_proba(X)
    for a, b in zip(before, (X.data, X.indices, X.indptr), strict=True):
        np.testing.assert_array_equal(a, b)
    assert X.format == "csc"


def test_bad_sparse_input_is_named_before_any_state_changes(text):
    X, y = text
    bad = X.copy()
    row = 17
    bad.data[bad.indptr[row]] = np.nan
    est = SoftmaxRegression()
    with pytest.raises(ValueError, match=f"row {row} has a NaN or infinite value"):
        est.fit(bad, y)
    assert not hasattr(est, "coef_")
    fitted = _fit(X, y, max_iter=5)
    coef = fitted.coef_.copy()
    with pytest.raises(ValueError, match=f"row {row} has a NaN"):
        fitted.predict(bad)
    with pytest.raises(ValueError, match=f"row {row} has a NaN"):
        fitted.partial_fit(bad, y)
    np.testing.assert_array_equal(fitted.coef_, coef)
    out_of_range = X.copy()
    out_of_range.indices[out_of_range.indptr[row]] = X.shape[1] + 5
    with pytest.raises(ValueError, match=f"row {row} has a column index outside"):
        SoftmaxRegression().fit(out_of_range, y)
    with pytest.raises(ValueError, match="labels but X has"):
        SoftmaxRegression().fit(X, y[:-1])
    with pytest.raises(ValueError, match="features"):
        fitted.predict(X[:, :100])
    with pytest.raises(ValueError, match="0 sample"):
        SoftmaxRegression().fit(X[:0], y[:0])


# ------------------------------------------------------- public functions
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_loss_and_grad_and_hessp_take_sparse_x(text, dtype):
    X, y = text
    Xs = X.astype(dtype)
    rng = np.random.default_rng(2)
    n, k = X.shape[1], 4
    W = rng.normal(scale=0.3, size=(n, k)).astype(dtype)
    b = rng.normal(size=k).astype(dtype)
    V = rng.normal(size=(n, k)).astype(dtype)
    c = rng.normal(size=k).astype(dtype)
    sw = rng.uniform(0.5, 1.5, size=X.shape[0])
    rtol = 2e-5 if dtype == np.float32 else 1e-11
    for kw in (dict(), dict(alpha=0.3, sample_weight=sw)):
        got = loss_and_grad(Xs.tocsc(), y, W, b, **kw)
        want = loss_and_grad(Xs.toarray(), y, W, b, **kw)
        assert got[1].dtype == np.dtype(dtype)
        np.testing.assert_allclose(got[0], want[0], rtol=rtol)
        for g, w in zip(got[1:], want[1:], strict=True):
            np.testing.assert_allclose(g, w, atol=rtol * np.abs(w).max())
        got = hessp(Xs, y, W, b, V, c, **kw)
        want = hessp(Xs.toarray(), y, W, b, V, c, **kw)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, atol=rtol * np.abs(w).max())
    # soft targets
    Y = np.eye(k, dtype=dtype)[y] * 0.9 + 0.025
    np.testing.assert_allclose(loss_and_grad(Xs, Y, W, b)[0],
                               loss_and_grad(Xs.toarray(), Y, W, b)[0], rtol=rtol)


def test_a_small_call_runs_one_chunk_and_a_fit_every_thread(text, monkeypatch):
    """Below _launch.SERIAL_WORK loss_and_grad and hessp on CSR X run their
    passes in one chunk (at one thread: no worker to wake after an idle
    spell), with the numbers of a launch on every thread; a solver's passes
    over the same data (warm: from _launch.SERIAL_WORK_WARM) take every
    thread."""
    from fastsoftmax import _launch, _sparse

    X, y = text
    n, k = X.shape[1], 4
    assert (_launch.SERIAL_WORK_WARM < _launch.sparse_launch_work(X.shape[0], X.nnz, k)
            < _launch.SERIAL_WORK)
    # Calls back to back would count as a loop (_launch.calls_in_a_loop).
    monkeypatch.setattr(_launch, "LOOP_SPAN_S", float("inf"))
    chunks = []
    for name in ("_sparse_loss_grad", "_sparse_hessp"):  # their last argument: (chunks, ...)
        kernel = getattr(_sparse, name)
        monkeypatch.setattr(_sparse, name, lambda *a, kernel=kernel: (
            chunks.append(a[-1].shape[0]) or kernel(*a)))
    rng = np.random.default_rng(3)
    W, V = rng.normal(scale=0.3, size=(2, n, k))
    b, c = rng.normal(size=(2, k))

    def calls():
        return [*loss_and_grad(X, y, W, b, alpha=0.1, n_threads=2),
                *hessp(X, y, W, b, V, c, alpha=0.1, n_threads=2)]

    small = calls()
    with parallel_launches():
        every = calls()
    assert chunks == [1, 1, 1, 2, 2, 2]  # hessp: a gradient pass, then the product
    for a, b_ in zip(small, every, strict=True):
        np.testing.assert_allclose(a, b_, rtol=1e-12, atol=1e-13)
    chunks.clear()
    _fit(X, y, solver="lbfgs", max_iter=2, n_threads=2)
    assert chunks and set(chunks) == {2}


def test_loss_and_grad_names_the_row_of_a_bad_sparse_value(text):
    X, y = text
    bad = X.copy()
    bad.data[bad.indptr[5] + 1] = np.inf
    W = np.zeros((X.shape[1], 4))
    with pytest.raises(ValueError, match="row 5 has a NaN or infinite value"):
        loss_and_grad(bad, y, W)


# ------------------------------------------------------- never densified
def test_wide_data_is_never_densified():
    """500,000 features: dense X would take 8 GB; memory stays X + O(threads n k)."""
    m, n, k = 2000, 500_000, 3
    rng = np.random.default_rng(0)
    nnz = 20
    cols = rng.integers(0, n, size=m * nnz)
    X = sp.csr_matrix((rng.uniform(0.1, 1.0, size=m * nnz), cols, np.arange(0, m * nnz + 1,
                                                                             nnz)), shape=(m, n))
    y = rng.integers(0, k, size=m)
    x_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    nk_bytes = n * k * 8
    threads = numba.get_num_threads()

    def peak(run):
        run()  # compiled and cached before measuring
        tracemalloc.start()
        try:
            run()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    W = np.zeros((n, k))
    # one evaluation: the result, the per-thread accumulators, the layout
    # transposes of W and of the gradient
    assert peak(lambda: loss_and_grad(X, y, W, np.zeros(k))) <= x_bytes + (threads + 4) * nk_bytes
    # the default solver (Newton): a dozen vectors of n k numbers besides
    assert peak(lambda: _fit(X, y, max_iter=5)) <= 2 * x_bytes + (threads + 20) * nk_bytes
    est = _fit(X, y, max_iter=5)
    assert est.coef_.shape == (k, n)
    # L-BFGS adds its history: 10 pairs of vectors (scipy's workspace)
    assert peak(lambda: _fit(X, y, solver="lbfgs", max_iter=5)) <= (
        2 * x_bytes + (threads + 50) * nk_bytes)
