"""_kernels._backward: the gradient's accumulation tiles written in LLVM IR.

Each tile against NumPy on every feature count around the vector width
(the masked last step), every class count (the blocking into 5-, 4-, 3-,
2- and 1-class tiles), rows in any order (the SGD epochs' shuffled rows)
and errors from a C-ordered or a transposed array; G accumulates onto
what it holds, and its entries beyond n (the rows' padding) are never
written. The kernels that use the tiles are tested against the reference
in test_dense.py, test_hessp.py and test_solvers_sgd.py. The tiles that
prefetch rows ahead give the same sums and emit the prefetches.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from fastsoftmax._kernels._backward import (
    accumulate4,
    accumulate4_ahead,
    accumulate4_cols,
    accumulate4_gather_ahead,
)

DTYPES = [np.float32, np.float64]
IDS = ["float32", "float64"]


@njit(error_model="numpy")
def _accumulate(X, i0, i1, i2, i3, Z, zr, G):
    accumulate4(X, i0, i1, i2, i3, Z, zr, G)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 33, 100, 784])
def test_tiles_match_numpy(dt, n):
    rng = np.random.default_rng(n)
    m = 12
    pad = -(-n // 16) * 16 + 16
    for k in (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 16):
        X = rng.standard_normal((m, n)).astype(dt)
        rows = (7, 2, 11, 2)  # any order, a row twice
        E = rng.standard_normal((4, k)).astype(dt)
        G0 = np.full((k, pad), -7.0, dt)
        G0[:, :n] = rng.standard_normal((k, n))
        want = G0[:, :n].astype(np.float64) + E.T.astype(np.float64) @ X[list(rows)]
        tol = (2e-6 if dt == np.float32 else 1e-14) * 10
        # Errors in rows 3 ... 6 of a C-ordered array, and of a transposed view.
        Z = np.full((9, k), np.nan, dt)
        Z[3:7] = E
        G = G0.copy()
        _accumulate(X, *rows, Z, 3, G)
        np.testing.assert_allclose(G[:, :n], want, rtol=tol, atol=tol)
        assert np.all(G[:, n:] == -7.0)
        ZT = np.full((k, 9), np.nan, dt)
        ZT[:, 2:6] = E.T
        GT = G0.copy()
        _accumulate(X, *rows, ZT.T, 2, GT)
        np.testing.assert_array_equal(GT, G)


@njit(error_model="numpy")
def _accumulate_cols(X, i0, i1, i2, i3, Z, zr, G, f0, f1):
    accumulate4_cols(X, i0, i1, i2, i3, Z, zr, G, f0, f1)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [1, 17, 100, 784])
def test_tiles_over_a_feature_range_touch_only_it(dt, n):
    """The SGD epochs' batches split by features: G[:, f0:f1] only; an
    empty range that starts past its end (f0 > f1) adds nothing."""
    rng = np.random.default_rng(n + 3)
    X = rng.standard_normal((8, n)).astype(dt)
    for k in (2, 5, 7, 10):
        E = rng.standard_normal((4, k)).astype(dt)
        for f0, f1 in ((0, n), (0, n // 2), (min(16, n), n), (16, min(n, 1))):
            G = np.full((k, n + 16), -7.0, dt)
            _accumulate_cols(X, 1, 6, 3, 0, E, 0, G, f0, f1)
            want = np.full_like(G, -7.0)
            want[:, f0:f1] += E.T @ X[[1, 6, 3, 0], f0:f1]
            tol = 1e-5 if dt == np.float32 else 1e-13
            np.testing.assert_allclose(G, want, rtol=tol, atol=tol)


def test_tiles_fit_the_hosts_registers():
    """Every class in exactly one tile, none wider than the host's
    registers hold (4 x 5 with AVX-512's 32, 4 x 3 with AVX2's 16), and
    the vectors those registers' width."""
    from fastsoftmax._kernels._ahead import _next_tile
    from fastsoftmax._kernels._backward import _tile_classes
    from fastsoftmax._kernels._config import TILE_CLASSES, VECTOR_BYTES, WIDE_REGISTERS

    assert (TILE_CLASSES, VECTOR_BYTES) == ((5, 64) if WIDE_REGISTERS else (3, 32))
    for k in range(1, 40):
        for split in (lambda j, k=k: _tile_classes.py_func(k - j),
                      lambda j, k=k: _next_tile.py_func(k, j, 4)):
            j, sizes = 0, []
            while j < k:
                sizes.append(split(j))
                j += sizes[-1]
            assert j == k and 1 <= max(sizes) <= TILE_CLASSES, (k, sizes)


@njit(error_model="numpy")
def _accumulate_ahead(X, i0, i1, i2, i3, Z, zr, G, f0, f1, first, rows):
    accumulate4_ahead(X, i0, i1, i2, i3, Z, zr, G, f0, f1, first, rows)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [1, 17, 100, 784])
def test_tiles_that_prefetch_give_the_same_sums(dt, n):
    """Prefetching rows [first, first + rows) (every split of them over
    the tiles, up to X's last row) changes nothing in G, bit for bit."""
    rng = np.random.default_rng(n + 5)
    m = 40
    X = rng.standard_normal((m, n)).astype(dt)
    for k in (1, 3, 6, 10, 23):
        E = rng.standard_normal((4, k)).astype(dt)
        G0 = np.full((k, n + 16), -7.0, dt)
        G0[:, :n] = rng.standard_normal((k, n))
        want = G0.copy()
        _accumulate_cols(X, 1, 6, 3, 0, E, 0, want, 0, n)
        for first, rows in ((8, 0), (8, 1), (8, 4), (30, 10), (m - 1, 1)):
            G = G0.copy()
            _accumulate_ahead(X, 1, 6, 3, 0, E, 0, G, 0, n, first, rows)
            np.testing.assert_array_equal(G, want)


def test_tiles_that_prefetch_emit_prefetcht1():
    X = np.ones((16, 40), np.float32)
    G = np.zeros((5, 48), np.float32)
    _accumulate_ahead(X, 0, 1, 2, 3, np.ones((4, 5), np.float32), 0, G, 0, 40, 8, 4)
    sig = _accumulate_ahead.signatures[0]
    assert "prefetcht1" in _accumulate_ahead.inspect_asm(sig)


@njit(error_model="numpy")
def _accumulate_gather(X, i0, i1, i2, i3, Z, zr, G, f0, f1, a0, a1, a2, a3):
    accumulate4_gather_ahead(X, i0, i1, i2, i3, Z, zr, G, f0, f1, a0, a1, a2, a3)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [1, 17, 100, 784])
def test_tiles_that_prefetch_gathered_rows_give_the_same_sums(dt, n):
    """The SGD epochs' tiles asking for four rows in any order (some
    absent: -1), over a feature range: G as without the prefetches."""
    rng = np.random.default_rng(n + 7)
    m = 40
    X = rng.standard_normal((m, n)).astype(dt)
    for k in (1, 3, 6, 10, 23):
        E = rng.standard_normal((4, k)).astype(dt)
        for f0, f1 in ((0, n), (n // 2, n)):
            G0 = np.full((k, n + 16), -7.0, dt)
            G0[:, f0:f1] = rng.standard_normal((k, f1 - f0))
            want = G0.copy()
            _accumulate_cols(X, 1, 6, 3, 0, E, 0, want, f0, f1)
            for ahead in ((39, 12, 5, 20), (30, -1, -1, -1), (-1, -1, -1, -1)):
                G = G0.copy()
                _accumulate_gather(X, 1, 6, 3, 0, E, 0, G, f0, f1, *ahead)
                np.testing.assert_array_equal(G, want)
