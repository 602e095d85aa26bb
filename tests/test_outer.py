"""The outer-product tiles of fastsoftmax._kernels._outer against NumPy.

The block products of the GEMM strategy's tiles gradient (``gemm_tiles``;
the whole kernels are tested in test_dense.py): Z = Xb Wp and G += Xbᵀ E,
in both dtypes, for every mix of 8-row (8-feature; AVX-512 hosts), 4-row
and 1-row tiles and of 3-, 2- and 1-vector class tiles, and the contract
on the memory past a block: the forward product writes within the block's
spare rows only, and what the backward product reads there lands in G's
padded columns only.
"""

import numpy as np
import pytest
from _helpers import FLOAT_DTYPES, dtype_id
from numba import njit

from fastsoftmax._kernels._config import VECTOR_BYTES, WIDE_REGISTERS
from fastsoftmax._kernels._outer import (
    ALIAS_BYTES,
    FORWARD_PANEL_BYTES,
    _panel_features,
    backward_block,
    forward_block,
    pack_block,
    pack_buffer,
    padded_classes,
    padded_width,
    spare_rows,
    spare_rows_for,
)


@njit
def _products(X, r0, rows, Wp, Z, E, G, first):
    forward_block(X, r0, rows, Wp, Z)
    backward_block(X, r0, rows, E, G, first)


@njit
def _sizes(X, k):
    return padded_classes(X, k), spare_rows(X, k)


def _tol(dt):
    return (1e-5, 1e-5) if dt == np.float32 else (1e-13, 1e-13)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("k", [1, 3, 7, 8, 9, 16, 17, 30, 33, 100, 1500])
@pytest.mark.parametrize("n,rows", [(1, 1), (5, 7), (6, 6), (13, 13), (21, 21), (50, 48)])
@pytest.mark.parametrize("first", [False, True])
def test_block_products_match_numpy(dt, k, n, rows, first, rng):
    """Z[:rows] = X[r0:r0 + rows] W and G[:, :k] += X[r0:r0 + rows]ᵀ E
    (E the block's rows; a chunk's first block: G[:, :k] = that product),
    from a block that does not start at row 0; the memory past Z's spare
    rows untouched, and whatever lies in E's spare rows (NaN here) only in
    G's padded columns. k = 1500: the backward product in several panels
    of classes."""
    itemsize = np.dtype(dt).itemsize
    r0 = 5
    X = rng.standard_normal((r0 + rows + 3, n)).astype(dt)
    W = rng.standard_normal((n, k)).astype(dt)
    kp, spare = padded_width(k, itemsize), spare_rows_for(k, itemsize)
    assert (kp, spare) == _sizes(X, k)
    lanes = VECTOR_BYTES // itemsize
    assert kp % lanes == 0 and k <= kp < k + lanes and spare * k >= lanes
    Wp = np.zeros((n, kp), dt)
    Wp[:, :k] = W
    # Z: the block, its spare rows, then a guard row that must stay NaN.
    buf = np.full((rows + spare + 1, k), np.nan, dt)
    Z = buf[:rows + spare]
    E = np.full((rows + spare, k), np.nan, dt)
    E[:rows] = rng.standard_normal((rows, k))
    G0 = rng.standard_normal((n, kp)).astype(dt)
    G = G0.copy()
    _products(X, r0, rows, Wp, Z, E, G, first)
    Xb = X[r0:r0 + rows].astype(np.float64)
    rtol, atol = _tol(dt)
    np.testing.assert_allclose(Z[:rows], Xb @ W.astype(np.float64), rtol=rtol, atol=atol * n)
    assert np.isnan(buf[-1]).all(), "the forward product wrote past the spare rows"
    want = (0 if first else G0[:, :k].astype(np.float64)) + Xb.T @ E[:rows].astype(np.float64)
    np.testing.assert_allclose(G[:, :k], want, rtol=rtol, atol=atol * rows)


@njit
def _packed_products(X, r0, rows, Wp, Z, E, G, first):
    buf = pack_buffer(X, rows)
    Xb, rb = pack_block(X, r0, rows, buf)
    forward_block(Xb, rb, rows, Wp, Z)
    backward_block(Xb, rb, rows, E, G, first)
    return buf.shape


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n_lines", [0, 1])
def test_packed_block_products(dt, n_lines, rng):
    """A block of rows a whole multiple of ALIAS_BYTES long copied into
    rows a cache line longer (on AVX2 hosts; elsewhere, and for rows of
    other lengths, the block is read in place): the products over X's n
    features alone (Wp's and G's rows), as on X itself; X untouched."""
    itemsize = np.dtype(dt).itemsize
    n = ALIAS_BYTES // itemsize - n_lines * (64 // itemsize)
    k, rows, r0 = 10, 21, 3
    X = rng.standard_normal((r0 + rows + 2, n)).astype(dt)
    X0 = X.copy()
    kp, spare = padded_width(k, itemsize), spare_rows_for(k, itemsize)
    Wp = np.zeros((n, kp), dt)
    Wp[:, :k] = rng.standard_normal((n, k))
    E = np.zeros((rows + spare, k), dt)
    E[:rows] = rng.standard_normal((rows, k))
    Z = np.zeros((rows + spare, k), dt)
    G = np.zeros((n, kp), dt)
    shape = _packed_products(X, r0, rows, Wp, Z, E, G, True)
    packs = n_lines == 0 and not WIDE_REGISTERS
    assert shape == ((rows, n + 64 // itemsize) if packs else (0, 0))
    Xb = X[r0:r0 + rows].astype(np.float64)
    rtol, atol = _tol(dt)
    np.testing.assert_allclose(Z[:rows], Xb @ Wp[:, :k].astype(np.float64), rtol=rtol,
                               atol=atol * n)
    np.testing.assert_allclose(G[:, :k], Xb.T @ E[:rows].astype(np.float64), rtol=rtol,
                               atol=atol * rows)
    np.testing.assert_array_equal(X, X0)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_spare_rows_hold_the_padded_logits(dt, rng):
    """What the forward product writes past a block's last row: the padded
    classes' logits of that row (zeros, Wp's zero columns), no more."""
    k, n, rows = 3, 10, 7
    itemsize = np.dtype(dt).itemsize
    kp, spare = padded_width(k, itemsize), spare_rows_for(k, itemsize)
    X = rng.standard_normal((rows, n)).astype(dt)
    Wp = np.zeros((n, kp), dt)
    Wp[:, :k] = rng.standard_normal((n, k))
    Z = np.full((rows + spare, k), np.nan, dt)
    _products(X, 0, rows, Wp, Z, np.zeros_like(Z), np.zeros((n, kp), dt), False)
    past = Z[rows:].ravel()
    written = kp - k  # the last row's vector runs on by the padded classes
    assert (past[:written] == 0).all() and np.isnan(past[written:]).all()


@njit
def _panel(X, rows):
    return _panel_features(X, rows, X.shape[1])


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("k", [7, 33, 100])
def test_forward_panels_of_features(dt, k, rng):
    """A block whose rows of X and a strip of Wp outgrow
    FORWARD_PANEL_BYTES: the forward product in the fewest equal panels of
    features (the last a little shorter), each adding into the logits the
    one before stored, Z as NumPy's and nothing written past the spare
    rows; a non-finite entry of X in a later panel leaves the rows before
    its own finite (what a row's last vector adds into the next row's
    first entries is that row's padded lanes)."""
    itemsize = np.dtype(dt).itemsize
    rows = 24
    most = FORWARD_PANEL_BYTES // (rows * itemsize + 3 * VECTOR_BYTES)
    assert _panel(np.zeros((1, most), dt), rows) == most  # one panel
    n = 2 * most + 37  # three panels
    X = rng.standard_normal((rows, n)).astype(dt)
    panel = _panel(X, rows)
    assert panel == -(-n // 3) <= most and 0 < n - 2 * panel <= panel
    kp, spare = padded_width(k, itemsize), spare_rows_for(k, itemsize)
    W = rng.standard_normal((n, k)).astype(dt)
    Wp = np.zeros((n, kp), dt)
    Wp[:, :k] = W
    buf = np.full((rows + spare + 1, k), np.nan, dt)
    Z = buf[:rows + spare]
    forward_block(X, 0, rows, Wp, Z)
    rtol, atol = _tol(dt)
    np.testing.assert_allclose(Z[:rows], X.astype(np.float64) @ W.astype(np.float64),
                               rtol=rtol, atol=atol * n)
    assert np.isnan(buf[-1]).all(), "the forward product wrote past the spare rows"
    X[5, n - 3] = np.inf
    forward_block(X, 0, rows, Wp, Z)
    assert np.isfinite(Z[:5]).all() and not np.isfinite(Z[5]).any()


def test_chunk_partials_set_zeroes_only_empty_chunks():
    """The GEMM passes' chunk start (_common._chunk_partials_set): a chunk
    with rows leaves its partial sum G[c] to its first block's product (not
    read, not zeroed), a chunk without rows gets G[c] = 0 (nothing else sets
    it); the intercept's sums g[c] are zeroed either way."""
    from fastsoftmax._kernels._common import _chunk_partials_set

    G = np.full((3, 4, 5), np.nan)
    g = np.full((3, 6), np.nan)
    # 2 rows over 3 chunks: chunks 0 and 1 hold one row each, chunk 2 none
    for c, (start, stop) in enumerate([(0, 1), (1, 2), (2, 2)]):
        assert _chunk_partials_set(c, 2, G, g)[:2] == (start, stop)
    assert np.isnan(G[:2]).all() and (G[2] == 0).all() and (g == 0).all()
