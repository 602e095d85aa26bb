"""_kernels._ahead: the forward tiles written in LLVM IR, with prefetches.

Each tile against the NumPy product on every feature count around the
vector width (the masked last step), every class count (the blocking into
5-, 3-, 2- and 1-class tiles), both row blocks, into a C-ordered and a
transposed output (the same values bit for bit: they are stored
differently), with and without prefetching (rows at X's end, rows
beyond it); a NaN or inf of X must reach the logits (masked lanes must not
hide it, lanes beyond n must not add one); the prefetch instructions and
the 512-bit legality must be in the compiled code. The kernels that use the
tiles are tested against the reference in test_dense.py
(``test_rows_kernels_reading_ahead`` and the rest). The tiles of rows by
index over a range of features (``logits4_cols``, the SGD epochs') the
same way, with rows in any order.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from numba import njit

from fastsoftmax._kernels._ahead import _logits_ahead, logits4_cols
from fastsoftmax._kernels._config import WIDE_REGISTERS

DTYPES = [np.float32, np.float64]
IDS = ["float32", "float64"]


@njit(error_model="numpy")
def _logits(X, i, nb, Wt, b, z, zr, ahead, stop):
    _logits_ahead(X, i, nb, Wt, b, z, zr, ahead, stop)


def _problem(rng, dt, m, n, k):
    X = rng.standard_normal((m, n)).astype(dt)
    # Padded weight rows, as the kernels get them; NaN in the padding: a
    # lane beyond n that read it would poison the sum.
    Wt = np.full((k, -(-n // 16) * 16), np.nan, dt)
    Wt[:, :n] = rng.standard_normal((k, n))
    b = rng.standard_normal(k).astype(dt)
    return X, Wt, b


def _close(got, want, dt, n):
    tol = (2e-5 if dt == np.float32 else 1e-13) * max(1.0, np.sqrt(n))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 33, 100, 784])
@pytest.mark.parametrize("nb", [4, 8])
def test_tiles_match_numpy(dt, n, nb):
    rng = np.random.default_rng(n)
    m = 40
    for k in (1, 2, 3, 4, 5, 6, 7, 10, 11, 16):
        X, Wt, b = _problem(rng, dt, m, n, k)
        want = X[3:3 + nb] @ Wt[:, :n].T + b
        z = np.full((12, k), -7.0, dt)
        _logits(X, 3, nb, Wt, b, z, 2, 16, m)
        _close(z[2:2 + nb], want, dt, n)
        assert np.all(z[:2] == -7.0) and np.all(z[2 + nb:] == -7.0)
        ZT = np.full((k, 12), -7.0, dt)
        _logits(X, 3, nb, Wt, b, ZT.T, 1, 0, m)
        _close(ZT.T[1:1 + nb], want, dt, n)
        assert np.all(ZT[:, 0] == -7.0) and np.all(ZT[:, 1 + nb:] == -7.0)
        # A transposed z takes a class's logits as one vector store, any
        # other z lane by lane: the same sums either way.
        np.testing.assert_array_equal(ZT.T[1:1 + nb], z[2:2 + nb])


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("ahead", [0, 4, 30, 1000])
def test_prefetching_at_x_end_changes_nothing(dt, ahead):
    """Rows ahead partly or wholly beyond X (prefetch is a hint: no fault,
    no effect on the values)."""
    rng = np.random.default_rng(5)
    m, n, k = 37, 50, 7
    X, Wt, b = _problem(rng, dt, m, n, k)
    for i, nb in ((29, 8), (33, 4), (0, 8)):
        z = np.zeros((8, k), dt)
        _logits(X, i, nb, Wt, b, z, 0, ahead, m)
        _close(z[:nb], X[i:i + nb] @ Wt[:, :n].T + b, dt, n)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("col", [0, 15, 16, 48, 49])
def test_a_nonfinite_x_reaches_its_logits(dt, bad, col):
    """In a whole step or in the masked last one (n = 50: 48 features in
    whole 64-byte steps in float32, 48 in float64 too), with weights of
    zero (x * 0 is NaN for x = inf): the row's logits are not finite, the
    other rows' are."""
    rng = np.random.default_rng(2)
    m, n, k = 16, 50, 5
    X, Wt, b = _problem(rng, dt, m, n, k)
    Wt[:, :n] = 0
    X[6, col] = bad
    z = np.zeros((8, k), dt)
    _logits(X, 4, 8, Wt, b, z, 0, 8, m)
    assert not np.isfinite(z[2]).any()
    assert np.isfinite(np.delete(z, 2, axis=0)).all()


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_compiled_code_prefetches_and_takes_512_bits(dt):
    """A function using the tiles: llvm.prefetch with locality 2 (into L2)
    in its IR, prefetcht1 and the host's widest registers in its code, and not the
    vectoriser's 512-bit preference (the caller's own loops keep their
    width). The legality attribute the tiles add need not survive: LLVM
    drops it from a function into which it inlines one without it (Numba's
    integer min and max are such functions)."""

    @njit(error_model="numpy", cache=False)
    def f(X, Wt, b, z):
        _logits_ahead(X, 0, 4, Wt, b, z, 0, 4, X.shape[0])

    rng = np.random.default_rng(0)
    X, Wt, b = _problem(rng, dt, 8, 40, 3)
    f(X, Wt, b, np.zeros((4, 3), dt))
    ir = f.inspect_llvm(f.signatures[0])
    assert re.search(r"call void @llvm\.prefetch\.p0\([^)]*i32 0, i32 2, i32 1\)", ir)
    asm = f.inspect_asm(f.signatures[0])
    assert "prefetcht1" in asm
    assert '"prefer-vector-width"="512"' not in ir
    assert re.search(r"vfmadd\w*\s+[^\n]*%" + ("zmm" if WIDE_REGISTERS else "ymm"), asm)


def test_kernel_markers_follow_the_dtype():
    """The markers that keep paths out of a dtype's compiled rows kernels.

    Each only ever drops code that dtype or host does not run: blocks of
    float32 rows (``rows_blocks``), and in the Hessian products Numba's
    own tiles where the IR tiles run, or the other way round
    (``HESSP_MICRO``); either value computes the same products.
    """
    from fastsoftmax._kernels._ahead import HESSP_MICRO
    from fastsoftmax._kernels._fused import rows_blocks

    assert rows_blocks(np.float32) is True
    assert rows_blocks(np.float64) is None
    assert HESSP_MICRO is (None if WIDE_REGISTERS else True)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_prefetch_row_reads_nothing_and_prefetches_each_line(dt):
    """``prefetch_row`` and ``prefetch`` (the SGD epochs' and the sparse
    kernels' reads ahead): they leave X as it was, work on strided views
    and any feature range (the last line included, however the range falls
    on lines), and each call is an L2 prefetch in the compiled code, not a
    load. An index must have one entry per dimension."""
    from numba.core.errors import TypingError

    from fastsoftmax._kernels._ahead import prefetch, prefetch_row

    @njit(error_model="numpy", cache=False)
    def ask(X, rows, f0, f1):
        for i in rows:
            prefetch_row(X, i, f0, f1)
        return X.shape[0]

    rng = np.random.default_rng(1)
    X = rng.standard_normal((9, 100)).astype(dt)
    before = X.copy()
    rows = np.array([8, 0, 3, 8])
    for f0, f1 in [(0, 100), (1, 2), (17, 99), (99, 100)]:
        assert ask(X, rows, f0, f1) == 9
        assert ask(X[::2, ::3], rows[:2] // 2, 0, 33) == 5
        assert ask(X.T, rows, f0 // 12, f1 // 12 + 1) == 100
    np.testing.assert_array_equal(X, before)
    ir = ask.inspect_llvm(ask.signatures[0])
    assert re.search(r"call void @llvm\.prefetch\.p0\([^)]*i32 0, i32 2, i32 1\)", ir)
    assert "prefetcht1" in ask.inspect_asm(ask.signatures[0])

    @njit(cache=False)
    def one(v, p):
        prefetch(v, p)
        prefetch(v, (p,))
        return v[p]

    assert one(X[0], 99) == X[0, 99]

    @njit(cache=False)
    def two_for_one(v):
        prefetch(v, (0, 0))

    @njit(cache=False)
    def one_for_two(v):
        prefetch(v, 0)

    with pytest.raises(TypingError):
        two_for_one(np.zeros(3, dt))
    with pytest.raises(TypingError):
        one_for_two(np.zeros((3, 3), dt))


@njit(error_model="numpy")
def _logits_cols(X, i0, i1, i2, i3, Wt, b, z, zr, f0, f1):
    logits4_cols(X, i0, i1, i2, i3, Wt, b, z, zr, f0, f1)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [1, 9, 16, 17, 100, 784])
def test_row_tiles_over_a_feature_range_match_numpy(dt, n):
    """Rows by index (any order, one twice) and the features [f0, f1): the
    SGD epochs' tiles, into a C-ordered and a transposed output."""
    rng = np.random.default_rng(n + 1)
    rows = (5, 0, 9, 0)
    for k in (1, 2, 3, 5, 6, 7, 10, 11):
        X, Wt, b = _problem(rng, dt, 12, n, k)
        # (An empty range of a split batch can start past its end: nothing.)
        for f0, f1 in ((0, n), (0, n // 2), (min(16, n), n), (n, n), (16, min(n, 1))):
            want = X[list(rows), f0:f1] @ Wt[:, f0:f1].T + b
            z = np.full((9, k), -7.0, dt)
            _logits_cols(X, *rows, Wt, b, z, 3, f0, f1)
            _close(z[3:7], want, dt, n)
            assert np.all(z[:3] == -7.0) and np.all(z[7:] == -7.0)
            ZT = np.full((k, 9), -7.0, dt)
            _logits_cols(X, *rows, Wt, b, ZT.T, 2, f0, f1)
            np.testing.assert_array_equal(ZT.T[2:6], z[3:7])
