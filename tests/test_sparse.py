"""The sparse (CSR) kernels and their launchers, against NumPy on the densified matrix.

Matrices are built from raw CSR arrays with empty rows, unsorted column
indices and repeated ones within a row; the expected values come from the
summed-duplicates dense matrix (``toarray`` adds repeated entries), through
:mod:`fastsoftmax.reference`. Shapes are small: every kernel compiles once
per data dtype (indices are int32 and indptr int64 after ``as_csr``).

Tolerances: float64 to 1e-10 relative (the sums are the same up to order);
float32 to 2e-4 relative with an absolute floor of 2e-5 (gradients here are
O(0.1-1), sums of a few dozen float32 terms).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from _helpers import parallel_launches
from hypothesis import given
from hypothesis import strategies as st

import fastsoftmax
from fastsoftmax import _sparse, reference
from fastsoftmax._sparse import CSR, as_csr

TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}
DTYPES = [np.float32, np.float64]


def _raw_csr(rng, m, n, dtype, *, max_row=6, index_dtype=np.int32):
    """Raw CSR arrays: empty rows, unsorted and repeated column indices."""
    lengths = rng.integers(0, max_row + 1, m)
    lengths[::5] = 0  # every fifth row empty
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(index_dtype)
    nnz = int(indptr[-1])
    indices = rng.integers(0, n, nnz).astype(index_dtype)
    # Force a repeated index in every row with at least two entries.
    for i in range(m):
        lo, hi = indptr[i], indptr[i + 1]
        if hi - lo >= 2:
            indices[hi - 1] = indices[lo]
    data = rng.uniform(-1.0, 1.0, nnz).astype(dtype)
    X = sp.csr_matrix((data, indices, indptr), shape=(m, n))
    # scipy narrows index arrays whose values fit in int32; set them back.
    X.indices = indices
    X.indptr = indptr
    assert X.indices.dtype == index_dtype
    assert not X.has_sorted_indices or nnz == 0
    return X


SCHEMES = ["scatter", "transpose", "panels"]


def _layout(c, scheme, k):
    """The copy of X a gradient scheme needs (None for the scatter scheme).

    The panel copy is cut into at least 4 panels per thread, here of one
    or two of the 11 columns, so that every row crosses several panels.
    """
    if scheme == "transpose":
        return _sparse.transpose(c)
    if scheme == "panels":
        return _sparse.panels(c, k, 2)
    return None


def _problem(dtype, *, m=37, n=11, k=4, seed=0, index_dtype=np.int32, soft=False,
             weighted=False):
    rng = np.random.default_rng(seed)
    X = _raw_csr(rng, m, n, dtype, index_dtype=index_dtype)
    if soft:
        Y = rng.uniform(0.0, 1.0, (m, k))
        y = (Y / Y.sum(axis=1, keepdims=True)).astype(dtype)
    else:
        y = rng.integers(0, k, m).astype(np.int64)
    sw = rng.uniform(0.1, 2.0, m).astype(dtype) if weighted else None
    if weighted:
        sw[3] = 0  # a zero weight: its row still gets a probability row
    W = (0.5 * rng.standard_normal((n, k))).astype(dtype)
    b = (0.5 * rng.standard_normal(k)).astype(dtype)
    return X, y, sw, W, b


# ------------------------------------------------------------------ as_csr
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "csr_array", "lil"])
def test_as_csr_converts_formats(fmt):
    X, *_ = _problem(np.float64)
    dense = X.toarray()
    src = sp.csr_array(X) if fmt == "csr_array" else X.asformat(fmt)
    c = as_csr(src)
    assert c.shape == X.shape and c.dtype == np.float64
    assert c.indices.dtype == np.int32 and c.indptr.dtype == np.int64
    np.testing.assert_array_equal(c.to_scipy().toarray(), dense)


def test_as_csr_keeps_csr_arrays_without_copy():
    X, *_ = _problem(np.float32)
    X.indptr = X.indptr.astype(np.int64)
    c = as_csr(X)
    assert c.data is X.data and c.indices is X.indices and c.indptr is X.indptr


@pytest.mark.parametrize("src, expected", [
    (np.float32, np.float32), (np.float64, np.float64), (np.longdouble, np.float64),
    (np.uint8, np.float64),
    (np.int64, np.float64), (np.bool_, np.float64),
])
def test_as_csr_dtype_policy(src, expected):
    X = sp.csr_matrix(np.array([[0, 1, 0], [2, 0, 0]], dtype=src))
    assert as_csr(X).dtype == expected
    assert as_csr(X, dtype=np.float32).dtype == np.float32


def test_as_csr_int64_indices_become_int32():
    X, *_ = _problem(np.float64, index_dtype=np.int64)
    assert X.indices.dtype == np.int64
    c = as_csr(X)
    assert c.indices.dtype == np.int32 and c.indptr.dtype == np.int64
    np.testing.assert_array_equal(c.to_scipy().toarray(), X.toarray())


def test_as_csr_rejects_dense_and_bad_arguments():
    with pytest.raises(TypeError, match="scipy.sparse"):
        as_csr(np.eye(3))
    with pytest.raises(ValueError, match="float32 or float64"):
        as_csr(sp.eye(3, format="csr"), dtype=np.int32)
    with pytest.raises(TypeError, match="real numbers"):
        as_csr(sp.csr_matrix(np.eye(2, dtype=np.complex128)))


def _broken(kind, index_dtype, dtype=np.float64):
    """A 6 x 5 CSR whose row 4 (and, for some kinds, row 5) is bad."""
    indptr = np.array([0, 1, 2, 2, 4, 6, 7], dtype=index_dtype)
    indices = np.array([0, 1, 4, 2, 3, 1, 0], dtype=index_dtype)
    data = np.arange(1.0, 8.0).astype(dtype)
    if kind == "index_high":
        indices[5] = 5
        indices[6] = 9
    elif kind == "index_negative":
        indices[4] = -1
    elif kind == "index_wraps":  # would wrap into range if cast to int32 first
        indices = indices.astype(np.int64)
        indices[5] = 2**32 + 1
    elif kind == "nan":
        data[4] = np.nan
    elif kind == "inf":
        data[5] = -np.inf
    elif kind == "indptr_decreasing":
        indptr[5] = 3  # row 4 is [4, 3)
    elif kind == "indptr_past_end":
        indptr[5] = 40
        indptr[6] = 41
    return CSR(data, indices, indptr, (6, 5))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind, message", [
    ("index_high", r"row 4 has a column index outside \[0, 5\)"),
    ("index_negative", r"row 4 has a column index outside"),
    ("nan", r"row 4 has a NaN or infinite value"),
    ("inf", r"row 4 has a NaN or infinite value"),
    ("indptr_decreasing", r"row 4 has an indptr range that decreases"),
    ("indptr_past_end", r"row 4 has an indptr range"),
])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_validation_scan_names_first_bad_row(kind, message, index_dtype, dtype, n_threads):
    """A chunk per thread (the bad row in the second of two), as a large scan runs."""
    with parallel_launches(), pytest.raises(ValueError, match=message):
        as_csr(_broken(kind, index_dtype, dtype), n_threads=n_threads)


@pytest.mark.parametrize("indptr_dtype", [np.int32, np.int64])
def test_int64_index_is_checked_before_narrowing(indptr_dtype):
    """2**32 + 1 would become 1 (in range) if cast to int32 before the scan."""
    with pytest.raises(ValueError, match=r"row 4 has a column index outside \[0, 5\)"):
        as_csr(_broken("index_wraps", indptr_dtype))


def test_kernels_take_int64_indices_when_n_needs_them(monkeypatch):
    """n >= 2**31 keeps int64 indices; the kernels are generic in the index width."""
    X, _, _, W, b = _problem(np.float64, index_dtype=np.int64)
    monkeypatch.setattr(_sparse, "_INT32_MAX", 5)
    c = as_csr(X)
    assert c.indices.dtype == np.int64
    np.testing.assert_allclose(_sparse.logits(c, W, b), X.toarray() @ W + b, rtol=1e-12)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_validation_scan_accepts_valid_input(index_dtype):
    c = as_csr(_broken("none", index_dtype))
    assert c.nnz == 7 and c.indices.dtype == np.int32


def test_validation_scan_through_scipy_object():
    X = sp.csr_matrix((np.array([1.0, np.inf]), np.array([0, 1]), np.array([0, 1, 2])),
                      shape=(2, 2))
    with pytest.raises(ValueError, match="X: row 1 has a NaN"):
        as_csr(X)


def test_length_mismatches_are_rejected():
    with pytest.raises(ValueError, match="m \\+ 1"):
        as_csr(CSR(np.ones(2), np.zeros(2, np.int32), np.array([0, 2]), (3, 2)))
    with pytest.raises(ValueError, match="one length"):
        as_csr(CSR(np.ones(2), np.zeros(3, np.int32), np.array([0, 2]), (1, 2)))


# ------------------------------------------------------------------ reference on sparse X
@pytest.mark.parametrize("container", [sp.csr_matrix, sp.csr_array, sp.csc_matrix])
def test_reference_accepts_sparse(container):
    X, y, sw, W, b = _problem(np.float64, weighted=True)
    want = reference.loss_and_grad(X.toarray(), y, W, b, alpha=0.1, sample_weight=sw)
    got = reference.loss_and_grad(container(X), y, W, b, alpha=0.1, sample_weight=sw)
    assert got[0] == pytest.approx(want[0], rel=1e-12)
    assert isinstance(got[1], np.ndarray)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ loss and gradient
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("intercept", [True, False])
@pytest.mark.parametrize("soft", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_loss_and_grad_matches_reference(dtype, n_threads, intercept, soft, weighted,
                                         index_dtype, scheme):
    X, y, sw, W, b = _problem(dtype, soft=soft, weighted=weighted, index_dtype=index_dtype)
    b = b if intercept else None
    alpha = 0.05
    c = as_csr(X)
    XT = _layout(c, scheme, W.shape[1])
    m, k = X.shape[0], W.shape[1]
    P = np.empty((m, k), dtype)
    loss, gW, gb = _sparse.loss_and_grad(c, y, sw, W, b, alpha, n_threads=n_threads, P=P,
                                         XT=XT)
    want_loss, want_gW, want_gb = reference.loss_and_grad(X.toarray(), y, W, b, alpha=alpha,
                                                          sample_weight=sw)
    assert gW.dtype == dtype and gW.shape == W.shape
    assert loss == pytest.approx(want_loss, rel=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(gW, want_gW, **TOL[dtype])
    if intercept:
        assert gb.dtype == dtype
        np.testing.assert_allclose(gb, want_gb, **TOL[dtype])
    else:
        assert gb is None
    Z = X.toarray().astype(np.float64) @ W + (0 if b is None else b)
    np.testing.assert_allclose(P, reference.softmax(Z), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_loss_and_grad_matches_dense_kernel(dtype):
    X, y, sw, W, b = _problem(dtype, weighted=True)
    got = _sparse.loss_and_grad(as_csr(X), y, sw, W, b, 0.01)
    want = fastsoftmax.loss_and_grad(X.toarray(), y, W, b, alpha=0.01, sample_weight=sw)
    assert got[0] == pytest.approx(want[0], rel=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(got[1], want[1], **TOL[dtype])
    np.testing.assert_allclose(got[2], want[2], **TOL[dtype])


def test_thread_count_and_scheme_change_only_rounding():
    X, y, sw, W, b = _problem(np.float64, m=203, weighted=True)
    c = as_csr(X)
    XT = _sparse.transpose(c)
    layouts = [_sparse.panels(c, W.shape[1], 1), _sparse.panels(c, W.shape[1], 2)]
    one = _sparse.loss_and_grad(c, y, sw, W, b, 0.1, n_threads=1)
    for n_threads, xt in [(2, None), (1, XT), (2, XT), *((t, p) for t in (1, 2)
                                                         for p in layouts)]:
        other = _sparse.loss_and_grad(c, y, sw, W, b, 0.1, n_threads=n_threads, XT=xt)
        assert one[0] == pytest.approx(other[0], rel=1e-13)
        np.testing.assert_allclose(one[1], other[1], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(one[2], other[2], rtol=1e-12, atol=1e-15)


def test_transpose_is_the_csc_of_x():
    X, *_ = _problem(np.float32, index_dtype=np.int64)
    c = as_csr(X)
    XT = _sparse.transpose(c)
    assert XT.shape == (X.shape[1], X.shape[0]) and XT.dtype == np.float32
    assert XT.indices.dtype == np.int32 and XT.indptr.dtype == np.int64
    np.testing.assert_array_equal(XT.to_scipy().toarray(), X.toarray().T)


@pytest.mark.parametrize("threads", [1, 2])
def test_panels_hold_every_entry_once(threads):
    """The panel copy: columns cut at increasing bounds, every entry of X once,
    in its panel and row, in its row's order."""
    X, *_ = _problem(np.float64, m=57, n=40, index_dtype=np.int64)
    c = as_csr(X)
    p = _sparse.panels(c, 3, threads)
    n_panels = p.ptr.shape[0]
    assert p.bounds[0] == 0 and p.bounds[-1] == X.shape[1] and np.all(np.diff(p.bounds) > 0)
    assert len(p.bounds) == n_panels + 1 and n_panels >= _sparse.PANELS_PER_THREAD * threads
    assert p.ptr[0, 0] == 0 and p.ptr[-1, -1] == c.nnz
    assert np.all(np.diff(p.ptr, axis=1) >= 0) and np.all(p.ptr[1:, 0] == p.ptr[:-1, -1])
    for q in range(n_panels):
        lo, hi = p.bounds[q], p.bounds[q + 1]
        for i in range(X.shape[0]):
            a, z = c.indptr[i], c.indptr[i + 1]
            keep = (c.indices[a:z] >= lo) & (c.indices[a:z] < hi)
            np.testing.assert_array_equal(p.indices[p.ptr[q, i]:p.ptr[q, i + 1]],
                                          c.indices[a:z][keep])
            np.testing.assert_array_equal(p.data[p.ptr[q, i]:p.ptr[q, i + 1]],
                                          c.data[a:z][keep])


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_panel_owners_share_every_panel_once_and_evenly(threads):
    """The column pass's owners: each panel formed by one owner, in increasing
    order per owner, and no owner more than one panel's cost above another."""
    rng = np.random.default_rng(1)
    n = 40_000
    cols = np.minimum((rng.pareto(1.0, 200_000) * 10).astype(np.int32), n - 1)
    X = sp.csr_matrix((np.ones(cols.size), (np.repeat(np.arange(2_000), 100), cols)),
                      shape=(2_000, n))
    p = _sparse.panels(as_csr(X.astype(np.float32)), 20, 2)
    owned, start = p.owners(threads)
    n_panels = p.ptr.shape[0]
    assert len(start) == min(threads, n_panels) + 1 and start[0] == 0
    assert start[-1] == n_panels and np.all(np.diff(start) >= 1)
    np.testing.assert_array_equal(np.sort(owned), np.arange(n_panels))
    m = X.shape[0]
    cost = p.ptr[:, m] - p.ptr[:, 0] + m
    loads = [cost[owned[a:b]].sum() for a, b in zip(start[:-1], start[1:], strict=True)]
    assert max(loads) - min(loads) <= cost.max()
    for a, b in zip(start[:-1], start[1:], strict=True):
        assert np.all(np.diff(owned[a:b]) > 0)


def test_panels_fit_in_l2_and_split_the_entries_evenly():
    rng = np.random.default_rng(0)
    n, k = 40_000, 20
    # Zipf-like columns: the first ones far fuller than the rest.
    cols = np.minimum((rng.pareto(1.0, 200_000) * 10).astype(np.int32), n - 1)
    rows = np.repeat(np.arange(2_000), 100)
    X = sp.csr_matrix((np.ones(cols.size), (rows, cols)), shape=(2_000, n))
    c = as_csr(X.astype(np.float32))
    bounds = _sparse.panel_bounds(c, k, 2)
    width = _sparse.PANEL_BYTES // (k * 4)
    assert np.diff(bounds).max() <= width
    counts = np.add.reduceat(np.bincount(c.indices, minlength=n), bounds[:-1])
    # Equal shares of the entries (a panel too wide is split further), but
    # for the fullest columns, which cannot be split.
    share = c.nnz / _sparse.panel_count(c, k, 2)
    assert counts.max() <= max(share * 1.25, np.bincount(c.indices).max())
    assert len(bounds) - 1 > _sparse.panel_count(c, k, 2)  # the sparse tail was split


def test_gradient_scheme_follows_memory():
    """Transpose only when the copy of X plus E fit in one (n, k) accumulator."""
    wide = CSR(np.ones(4000), np.zeros(4000, np.int32), np.arange(0, 4001, 20, dtype=np.int64),
               (200, 2_000_000))
    tall = CSR(np.ones(6000), np.zeros(6000, np.int32), np.arange(0, 6001, 60, dtype=np.int64),
               (100, 100))
    assert _sparse.gradient_scheme(wide, 20) == "transpose"
    assert _sparse.gradient_scheme(tall, 20) == "scatter"


def test_gradient_scheme_takes_panels_for_full_rows_and_a_wide_w():
    """Panels when W outgrows one panel and rows hold a few entries per panel."""
    def text(m, n, per_row):
        nnz = m * per_row
        return CSR(np.ones(nnz, np.float32), np.zeros(nnz, np.int32),
                   np.arange(0, nnz + 1, per_row, dtype=np.int64), (m, n))

    assert _sparse.gradient_scheme(text(1000, 100_000, 60), 20, 2) == "panels"
    assert _sparse.gradient_scheme(text(1000, 100_000, 8), 20, 2) != "panels"  # few per panel
    assert _sparse.gradient_scheme(text(1000, 10_000, 60), 20, 2) != "panels"  # W fits one


def test_gradient_central_differences():
    X, y, sw, W, b = _problem(np.float64, weighted=True, soft=True)
    c = as_csr(X)
    alpha = 0.03
    _, gW, gb = _sparse.loss_and_grad(c, y, sw, W, b, alpha)
    rng = np.random.default_rng(1)
    h = 1e-6
    for _ in range(3):
        V = rng.standard_normal(W.shape)
        v = rng.standard_normal(b.shape)
        plus = _sparse.loss_and_grad(c, y, sw, W + h * V, b + h * v, alpha)[0]
        minus = _sparse.loss_and_grad(c, y, sw, W - h * V, b - h * v, alpha)[0]
        fd = (plus - minus) / (2 * h)
        exact = float(np.sum(gW * V) + np.sum(gb * v))
        assert fd == pytest.approx(exact, rel=1e-7, abs=1e-9)


def test_columns_never_touched_get_only_the_penalty():
    X, y, sw, W, b = _problem(np.float64, n=11)
    X = X[:, :8]  # columns 8..10 of W see no data
    W = np.vstack([W[:8], np.ones((3, W.shape[1]))])
    c = CSR(X.data, X.indices, X.indptr.astype(np.int64), (X.shape[0], 11))
    _, gW, _ = _sparse.loss_and_grad(as_csr(c), y, None, W, b, 0.5)
    np.testing.assert_array_equal(gW[8:], 0.5)


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_non_finite_logits_name_the_first_row(n_threads, scheme):
    X, y, _, W, b = _problem(np.float64, m=40)
    X = X.tolil()
    X[30, 0] = 1e300
    X[9, 2] = 1e300
    X[9, 3] = -1e300
    W = np.full_like(W, 1e10)
    c = as_csr(X)
    XT = _layout(c, scheme, W.shape[1])
    with pytest.raises(ValueError, match="not finite at row 9"):
        _sparse.loss_and_grad(c, y, None, W, b, n_threads=n_threads, XT=XT)


@given(rows=st.lists(st.lists(st.tuples(st.integers(0, 6), st.floats(-3, 3)), max_size=8),
                     min_size=1, max_size=12),
       seed=st.integers(0, 2**16))
def test_any_row_structure_matches_dense(rows, seed):
    """Any mix of empty rows, repeats and orders: the summed-duplicates matrix's result."""
    n, k = 7, 3
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    indices = np.array([f for r in rows for f, _ in r], dtype=np.int32)
    data = np.array([v for r in rows for _, v in r], dtype=np.float64)
    m = len(rows)
    dense = np.zeros((m, n))
    for i, r in enumerate(rows):
        for f, v in r:
            dense[i, f] += v
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, m)
    W = rng.standard_normal((n, k))
    b = rng.standard_normal(k)
    got = _sparse.loss_and_grad(as_csr(CSR(data, indices, indptr, (m, n))), y, None, W, b)
    want = reference.loss_and_grad(dense, y, W, b)
    assert got[0] == pytest.approx(want[0], rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ Hessian-vector product
def _hessp_numpy(X, P, sw, V, c, alpha):
    """The Hessian product written out on the dense matrix."""
    X = X.astype(np.float64)
    P = P.astype(np.float64)
    m = X.shape[0]
    w = np.ones(m) if sw is None else sw.astype(np.float64)
    U = X @ V + c
    S = (w / w.sum())[:, None] * (P * U - P * np.sum(P * U, axis=1, keepdims=True))
    return X.T @ S + alpha * V, S.sum(axis=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_hessp_matches_numpy(dtype, n_threads, intercept, weighted, scheme):
    X, y, sw, W, b = _problem(dtype, weighted=weighted)
    b = b if intercept else None
    c = as_csr(X)
    XT = _layout(c, scheme, W.shape[1])
    m, k = X.shape[0], W.shape[1]
    P = np.empty((m, k), dtype)
    _sparse.loss_and_grad(c, y, sw, W, b, 0.1, P=P, n_threads=n_threads, XT=XT)
    rng = np.random.default_rng(2)
    V = rng.standard_normal(W.shape).astype(dtype)
    cv = rng.standard_normal(k).astype(dtype) if intercept else None
    HV, Hc = _sparse.hessp(c, P, sw, V, cv, alpha=0.1, n_threads=n_threads, XT=XT)
    want_HV, want_Hc = _hessp_numpy(X.toarray(), P, sw, V, 0 if cv is None else cv, 0.1)
    assert HV.dtype == dtype
    np.testing.assert_allclose(HV, want_HV, **TOL[dtype])
    if intercept:
        np.testing.assert_allclose(Hc, want_Hc, **TOL[dtype])
    else:
        assert Hc is None


def test_hessp_central_differences_of_the_gradient():
    X, y, sw, W, b = _problem(np.float64, weighted=True, soft=True)
    c = as_csr(X)
    alpha = 0.02
    P = np.empty((X.shape[0], W.shape[1]))
    _sparse.loss_and_grad(c, y, sw, W, b, alpha, P=P)
    rng = np.random.default_rng(3)
    V = rng.standard_normal(W.shape)
    v = rng.standard_normal(b.shape)
    HV, Hc = _sparse.hessp(c, P, sw, V, v, alpha=alpha)
    h = 1e-5
    _, gWp, gbp = _sparse.loss_and_grad(c, y, sw, W + h * V, b + h * v, alpha)
    _, gWm, gbm = _sparse.loss_and_grad(c, y, sw, W - h * V, b - h * v, alpha)
    np.testing.assert_allclose(HV, (gWp - gWm) / (2 * h), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(Hc, (gbp - gbm) / (2 * h), rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------------ prediction
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_threads", [1, 2])
def test_logits_and_labels(dtype, n_threads):
    X, _, _, W, b = _problem(dtype)
    c = as_csr(X)
    Z = _sparse.logits(c, W, b, n_threads=n_threads)
    want = X.toarray().astype(np.float64) @ W + b
    np.testing.assert_allclose(Z, want, **TOL[dtype])
    out = np.empty_like(Z)
    assert _sparse.logits(c, W, None, out=out, n_threads=n_threads) is out
    np.testing.assert_allclose(out, want - b, **TOL[dtype])
    labels = _sparse.predict_labels(c, W, b, n_threads=n_threads)
    assert labels.dtype == np.int64
    np.testing.assert_array_equal(labels, np.argmax(Z, axis=1))


def test_labels_ties_go_to_the_lowest_class():
    X, *_ = _problem(np.float64)
    labels = _sparse.predict_labels(as_csr(X), np.zeros((X.shape[1], 4)), np.array([0, 2, 2, 1.0]))
    np.testing.assert_array_equal(labels, 1)


# ------------------------------------------------------------------ SGD epoch
def _numpy_epoch(X, y, sw, W, b, order, *, batch_size, eta0, alpha, momentum, nesterov,
                 fit_intercept, invscaling=False, power_t=0.5):
    """reference.sgd_epoch one batch at a time, with the epoch loss and the schedule."""
    Xd = X.toarray()
    m, k = Xd.shape[0], W.shape[1]
    w = np.ones(m) if sw is None else sw.astype(np.float64)
    VW, Vb = np.zeros_like(W), np.zeros_like(b)
    steps = -(-m // batch_size)
    total = 0.0
    for t, start in enumerate(range(0, m, batch_size)):
        rows = order[start:start + batch_size]
        Z = (Xd[rows] @ W + b).astype(np.float64)
        Y = reference.one_hot(y[rows], k) if y.ndim == 1 else y[rows].astype(np.float64)
        ce = reference.logsumexp(Z) - np.sum(Y * Z, axis=1)
        total += float(np.dot(w[rows], ce))
        eta = eta0 / (1 + t / steps) ** power_t if invscaling else eta0
        reference.sgd_epoch(X, y, W, b, rows, batch_size=batch_size, eta=eta, alpha=alpha,
                            momentum=momentum, nesterov=nesterov, VW=VW, Vb=Vb,
                            sample_weight=sw, fit_intercept=fit_intercept)
    return total


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_size", [1, 7, 64])
@pytest.mark.parametrize("momentum, nesterov", [(0.0, False), (0.9, False), (0.9, True)])
@pytest.mark.parametrize("alpha", [0.0, 0.01])
@pytest.mark.parametrize("weighted", [False, True])
def test_sgd_epoch_matches_numpy_loop(dtype, batch_size, momentum, nesterov, alpha, weighted):
    X, y, sw, W0, b0 = _problem(dtype, m=53, weighted=weighted, seed=batch_size)
    order = np.random.default_rng(batch_size).permutation(X.shape[0])
    kw = dict(batch_size=batch_size, eta0=0.3, alpha=alpha, momentum=momentum,
              nesterov=nesterov, fit_intercept=True)
    W_ref, b_ref = W0.copy(), b0.copy()
    loss_ref = _numpy_epoch(X, y, sw, W_ref, b_ref, order, **kw)
    W, b = W0.copy(), b0.copy()
    VW = np.zeros_like(W) if momentum else None
    steps, loss = _sparse.sgd_epoch(as_csr(X), y, sw, W, b, order, VW=VW, **kw)
    assert steps == -(-X.shape[0] // batch_size)
    np.testing.assert_allclose(W, W_ref, **TOL[dtype])
    np.testing.assert_allclose(b, b_ref, **TOL[dtype])
    assert loss == pytest.approx(loss_ref, rel=1e-5 if dtype == np.float32 else 1e-11)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eta0, alpha", [(0.5, 1.9), (0.5, 2.0), (0.2, 0.3)])
def test_sgd_wscale_rescaling_matches_plain_update(dtype, eta0, alpha):
    """(1 - eta alpha) = 0.05 drops wscale below 1e-9 within the epoch (W_hat is
    multiplied out); (1 - eta alpha) = 0 zeroes W; soft targets, no intercept."""
    X, Y, sw, W0, _ = _problem(dtype, m=61, soft=True, weighted=True, seed=5)
    b0 = np.zeros(W0.shape[1], dtype)
    order = np.random.default_rng(0).permutation(X.shape[0])
    kw = dict(batch_size=4, eta0=eta0, alpha=alpha, momentum=0.0, nesterov=False,
              fit_intercept=False)
    W_ref, b_ref = W0.copy(), b0.copy()
    loss_ref = _numpy_epoch(X, Y, sw, W_ref, b_ref, order, **kw)
    W, b = W0.copy(), b0.copy()
    steps, loss = _sparse.sgd_epoch(as_csr(X), Y, sw, W, b, order, **kw)
    assert steps == 16
    np.testing.assert_allclose(W, W_ref, **TOL[dtype])
    np.testing.assert_array_equal(b, 0)
    assert loss == pytest.approx(loss_ref, rel=1e-5 if dtype == np.float32 else 1e-11)


def test_sgd_invscaling_schedule():
    X, y, _, W0, b0 = _problem(np.float64, m=40)
    order = np.arange(40)[::-1].copy()
    kw = dict(batch_size=6, eta0=0.4, alpha=0.01, momentum=0.0, nesterov=False,
              fit_intercept=True)
    W_ref, b_ref = W0.copy(), b0.copy()
    _numpy_epoch(X, y, None, W_ref, b_ref, order, invscaling=True, power_t=0.5, **kw)
    W, b = W0.copy(), b0.copy()
    _sparse.sgd_epoch(as_csr(X), y, None, W, b, order, learning_rate="invscaling",
                      power_t=0.5, **kw)
    np.testing.assert_allclose(W, W_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b, b_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_divergence_is_reported(momentum):
    X, y, _, W0, b0 = _problem(np.float64, m=40)
    X = X * 1e200
    W, b = W0.copy(), b0.copy()
    VW = np.zeros_like(W) if momentum else None
    steps, loss = _sparse.sgd_epoch(as_csr(X), y, None, W, b, np.arange(40), batch_size=5,
                                    eta0=1e200, momentum=momentum, VW=VW)
    assert steps < 0 and np.isnan(loss)


def test_sgd_epoch_leaves_untouched_columns_alone_without_penalty():
    """alpha = 0, no momentum: features absent from the data keep their weights."""
    X, y, _, W0, b0 = _problem(np.float64)
    W0[5] = 7.0
    X = X.tolil()
    X[:, 5] = 0
    X = X.tocsr()
    X.eliminate_zeros()
    W, b = W0.copy(), b0.copy()
    _sparse.sgd_epoch(as_csr(X), y, None, W, b, np.arange(X.shape[0]), batch_size=3, eta0=0.5)
    np.testing.assert_array_equal(W[5], 7.0)
    assert not np.array_equal(W, W0)


@pytest.mark.parametrize("bad", [[0, 37], [-1, 2]])
def test_sgd_order_out_of_range_is_rejected(bad):
    X, y, _, W, b = _problem(np.float64)
    with pytest.raises(ValueError, match=r"order must hold row indices in \[0, 37\)"):
        _sparse.sgd_epoch(as_csr(X), y, None, W, b, bad, batch_size=2, eta0=0.1)


def test_sgd_in_place_arguments_are_checked():
    X, y, _, W, b = _problem(np.float64)
    with pytest.raises(ValueError, match="W must be"):
        _sparse.sgd_epoch(as_csr(X), y, None, W.astype(np.float32), b, [0], batch_size=1,
                          eta0=0.1)
    with pytest.raises(ValueError, match="momentum > 0 needs"):
        _sparse.sgd_epoch(as_csr(X), y, None, W, b, [0], batch_size=1, eta0=0.1, momentum=0.5)


# ------------------------------------------------------------------ on-disk cache
USE_SPARSE_KERNELS = r"""
import json
import numpy as np
import scipy.sparse as sp
from numba.core.registry import CPUDispatcher
from fastsoftmax import _sparse
from fastsoftmax._kernels import _sparse as kernels

X = sp.random(30, 8, density=0.3, format="csr", random_state=0)
c = _sparse.as_csr(X)
W = np.zeros((8, 3))
_sparse.logits(c, W)
_sparse.loss_and_grad(c, np.arange(30) % 3, None, W, None, 0.1, XT=_sparse.transpose(c))
stats = {}
for name, obj in vars(kernels).items():
    if isinstance(obj, CPUDispatcher):
        hits = sum(obj.stats.cache_hits.values())
        misses = sum(obj.stats.cache_misses.values())
        if hits or misses:
            stats[name] = [hits, misses]
print(json.dumps(stats))
"""


@pytest.mark.slow
def test_sparse_kernels_load_from_disk_cache(tmp_path):
    """cache=True holds for the sparse module: a second process compiles nothing.

    Four of the dispatchers (the scan, logits, the transpose scheme's row and
    column passes), not all: each costs seconds to compile cold (~10 s here).
    """
    repo = Path(fastsoftmax.__file__).resolve().parent.parent
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(repo)] + ([os.environ["PYTHONPATH"]]
                                                          if os.environ.get("PYTHONPATH")
                                                          else [])))
    env.pop("NUMBA_DISABLE_JIT", None)

    def run():
        proc = subprocess.run([sys.executable, "-c", USE_SPARSE_KERNELS], env=env,
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run()
    second = run()
    assert {"_csr_first_bad_row", "_sparse_logits", "_sparse_loss_grad",
            "_csc_gather"} <= set(first)
    assert all(hits == 0 and misses > 0 for hits, misses in first.values()), first
    assert set(second) == set(first)
    assert all(hits > 0 and misses == 0 for hits, misses in second.values()), second


def test_sgd_kernel_can_carry_wscale_between_epochs():
    """The kernel leaves W = wscale * W_hat for a caller that keeps wscale across
    epochs (no O(n k) pass per epoch); a momentum epoch multiplies it out first."""
    from fastsoftmax._kernels._sgd import SCHEDULE_CONSTANT
    from fastsoftmax._kernels._sparse import _sparse_sgd_epoch

    X, y, _, W0, b0 = _problem(np.float64, m=40)
    c = as_csr(X)
    order = np.random.default_rng(4).permutation(40)
    k = W0.shape[1]
    W1, b1 = W0.copy(), b0.copy()
    for _ in range(2):
        _sparse.sgd_epoch(c, y, None, W1, b1, order, batch_size=5, eta0=0.2, alpha=0.1)
    _sparse.sgd_epoch(c, y, None, W1, b1, order, batch_size=5, eta0=0.2, alpha=0.1,
                      momentum=0.5, VW=np.zeros_like(W1))

    W2, b2 = W0.copy(), b0.copy()
    wscale = np.ones(1)
    VW = np.zeros_like(W2)
    for momentum in (0.0, 0.0, 0.5):
        steps = _sparse_sgd_epoch(
            c.data, c.indices, c.indptr, y.astype(np.int64), np.empty((0, k)), np.empty(0),
            False, False, order, 5, 1.0, W2, wscale, b2, True, 0.1,
            VW if momentum else np.empty((0, k)), np.zeros(k), momentum, False, 0.2,
            SCHEDULE_CONSTANT, 0.5, 0, 8, np.empty((5, k)), np.empty(k), np.empty(1))
        assert steps == 8
        if not momentum:
            assert wscale[0] < 1
    assert wscale[0] == 1.0
    np.testing.assert_allclose(W2, W1, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(b2, b1, rtol=1e-12, atol=1e-14)


def test_non_contiguous_and_integer_small_arrays_are_coerced():
    X, y, sw, W, b = _problem(np.float64, weighted=True)
    c = as_csr(X)
    want = _sparse.loss_and_grad(c, y, sw, W, b, 0.1)
    Wf = np.asfortranarray(W)
    got = _sparse.loss_and_grad(c, list(y), list(sw), Wf, b[::-1][::-1], 0.1)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(_sparse.logits(c, Wf, b), _sparse.logits(c, W, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_reading_w_and_e_ahead_match_scipy(dtype):
    """Where W (and E, V) hold PREFETCH_MIN_BYTES or more, the row passes
    ask for the rows of W their rows ahead will gather (the column pass:
    rows of E; the SGD epoch: also the rows' entries and starts): the
    results must be those of SciPy's products, with repeated indices and
    empty rows, to the end of every chunk and of the epoch's order. The
    other tests' W are small and never take that path."""
    from fastsoftmax._kernels._sparse import PREFETCH_MIN_BYTES

    rng = np.random.default_rng(11)
    k = 8
    m = n = -(-PREFETCH_MIN_BYTES // (k * np.dtype(dtype).itemsize)) + 999
    lengths = rng.integers(0, 5, m)
    lengths[::7] = 0
    indptr = np.concatenate(([0], np.cumsum(lengths)))
    indices = rng.integers(0, n, int(indptr[-1]))
    indices[1::9] = indices[::9][:indices[1::9].size]  # repeats within a row
    X = sp.csr_matrix((rng.standard_normal(indices.size).astype(dtype), indices, indptr),
                      shape=(m, n))
    y = rng.integers(0, k, m)
    W = (0.3 * rng.standard_normal((n, k))).astype(dtype)
    b = rng.standard_normal(k).astype(dtype)
    assert W.nbytes >= PREFETCH_MIN_BYTES and m * k * W.itemsize >= PREFETCH_MIN_BYTES
    c = as_csr(X)
    Z = X.astype(np.float64) @ W.astype(np.float64) + b
    np.testing.assert_allclose(_sparse.logits(c, W, b), Z, **TOL[dtype])
    np.testing.assert_array_equal(_sparse.predict_labels(c, W, b), np.argmax(
        _sparse.logits(c, W, b), axis=1))
    P0 = reference.softmax(Z)
    E = (P0 - reference.one_hot(y, k)) / m
    want_gW = X.T.astype(np.float64) @ E + 0.1 * W
    V = rng.standard_normal((n, k)).astype(dtype)
    cv = rng.standard_normal(k).astype(dtype)
    for XT in (None, _sparse.transpose(c)):
        P = np.empty((m, k), dtype)
        _, gW, gb = _sparse.loss_and_grad(c, y, None, W, b, 0.1, P=P, XT=XT)
        np.testing.assert_allclose(gW, want_gW, **TOL[dtype])
        # Each intercept entry sums m = 131,000-262,000 terms, in float32
        # in a float32 problem: to 1e-4.
        sums = TOL[dtype] if dtype == np.float64 else dict(rtol=2e-3, atol=1e-4)
        np.testing.assert_allclose(gb, E.sum(axis=0), **sums)
        HV, Hc = _sparse.hessp(c, P, None, V, cv, alpha=0.1, XT=XT)
        U = X.astype(np.float64) @ V.astype(np.float64) + cv
        S = (P * U - P * np.sum(P * U, axis=1, keepdims=True)) / m
        np.testing.assert_allclose(HV, X.T.astype(np.float64) @ S + 0.1 * V, **TOL[dtype])
        np.testing.assert_allclose(Hc, S.sum(axis=0), **sums)
    # SGD over 40 rows of X, in batches of 1 and 6, with and without momentum.
    order = rng.permutation(m)[:40]
    for batch_size, momentum in [(1, 0.0), (6, 0.0), (6, 0.9)]:
        W_ref, b_ref = W.copy(), b.copy()
        reference.sgd_epoch(X, y, W_ref, b_ref, order, batch_size=batch_size, eta=0.1,
                            alpha=0.01, momentum=momentum, VW=np.zeros_like(W),
                            Vb=np.zeros_like(b))
        W1, b1 = W.copy(), b.copy()
        steps, _ = _sparse.sgd_epoch(c, y, None, W1, b1, order, batch_size=batch_size,
                                     eta0=0.1, alpha=0.01, momentum=momentum,
                                     VW=np.zeros_like(W) if momentum else None)
        assert steps == -(-order.size // batch_size)
        np.testing.assert_allclose(W1, W_ref, **TOL[dtype])
        np.testing.assert_allclose(b1, b_ref, **TOL[dtype])
