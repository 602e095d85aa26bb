"""_kernels._rowvec: the many-class kernels' row passes in explicit vectors.

Each pass against NumPy on every row length around the vector width (the
masked last step, and rows of whole vectors, which skip it): the exp
within 2 ulp over the whole range of arguments and exactly 0 below the
normal range, the bias added and the maximum wherever it sits, every
non-finite entry reported wherever it sits, the scaling with its sum into a longer array
whose entries past the row are never written, the two passes of a
row's Hessian product, and two rows' whole error in one pass. The kernels that use the
passes are tested against the reference in test_dense.py,
test_loss_and_grad.py and test_hessp.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastsoftmax._kernels._common import _EXP_LO32, _EXP_LO64
from fastsoftmax._kernels._rowvec import (
    bias_dot_row,
    bias_max_finite_row,
    exp_row,
    hvp_update_row,
    scale_add_row,
    scale_row,
)

DTYPES = [np.float32, np.float64]
IDS = ["float32", "float64"]
LENGTHS = [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 64, 100, 1000]


def _ulps(got, truth, dt):
    return np.abs(got - truth) / np.spacing(truth.astype(dt))


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_exp_row_over_the_whole_range(dt):
    lo = _EXP_LO32 if dt == np.float32 else _EXP_LO64
    x = np.concatenate([[0.0, -np.inf, lo * 1.01, -1e30, lo],
                        -np.logspace(-9, np.log10(-lo), 5001)]).astype(dt)
    z = x.copy()
    total = exp_row(z, dt(0), z)
    truth = np.exp(x.astype(np.float64))
    normal = x >= lo
    assert _ulps(z[normal], truth[normal], dt).max() <= 2
    assert np.all(z[~normal] == 0)
    assert z[0] == 1
    # A sum of 5,006 terms in the row's dtype, in some order of vector lanes.
    assert total == pytest.approx(truth.sum(), rel=100 * float(np.finfo(dt).eps))


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", LENGTHS)
def test_exp_row_every_length_with_a_shift(dt, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 5).astype(dt)
    mx = x.max()
    z = x.copy()
    total = exp_row(z, mx, z)
    # (the shift rounds in the row's dtype, as in the kernels)
    truth = np.exp((x - mx).astype(np.float64))
    assert _ulps(z, truth, dt).max() <= 2
    assert total == pytest.approx(truth.sum(), rel=10 * float(np.finfo(dt).eps))


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_exp_row_writes_only_the_row(dt):
    """A row that is a slice of a longer buffer: the entries after it stay."""
    buf = np.full(40, 7.0, dt)
    buf[:21] = -np.arange(21, dtype=dt)
    total = exp_row(buf[:21], dt(0), buf[:21])
    assert np.all(buf[21:] == 7)
    assert total == pytest.approx(np.exp(-np.arange(21.0)).sum(), rel=1e-6)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", LENGTHS)
def test_bias_max_finite_row_every_length_and_position(dt, n):
    """The bias added in place (entries past the row untouched), then the
    maximum wherever it sits, and every non-finite entry reported wherever
    it sits, the bias's own included."""
    rng = np.random.default_rng(n)
    base = (rng.standard_normal(n) - 10).astype(dt)
    bias = rng.standard_normal(n + 5).astype(dt)
    zero = np.zeros(n, dt)
    buf = np.full(n + 5, 9.0, dt)
    buf[:n] = base
    mx, fin = bias_max_finite_row(buf[:n], bias)
    np.testing.assert_array_equal(buf[:n], base + bias[:n])
    assert np.all(buf[n:] == 9)
    # All negative sums: the masked lanes must not count as zeros.
    assert fin and mx == (base + bias[:n]).max()
    for pos in {0, n // 2, n - 1}:
        z = base.copy()
        z[pos] = 3
        mx, fin = bias_max_finite_row(z, zero)
        assert fin and mx == 3
        for bad in (np.nan, np.inf, -np.inf):
            z = base.copy()
            z[pos] = bad
            assert not bias_max_finite_row(z, zero)[1]
            b = zero.copy()
            b[pos] = bad
            assert not bias_max_finite_row(base.copy(), b)[1]


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", LENGTHS)
def test_scale_add_row(dt, n):
    rng = np.random.default_rng(n)
    z0 = rng.standard_normal(n).astype(dt)
    g0 = rng.standard_normal(n + 20).astype(dt)
    z, g = z0.copy(), g0.copy()
    f = dt(0.37)
    scale_add_row(z, f, g)
    np.testing.assert_array_equal(z, z0 * f)
    np.testing.assert_array_equal(g[:n], g0[:n] + z0 * f)
    np.testing.assert_array_equal(g[n:], g0[n:])


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", LENGTHS)
def test_scale_row(dt, n):
    rng = np.random.default_rng(n)
    buf = rng.standard_normal(n + 20).astype(dt)
    z0 = buf.copy()
    scale_row(buf[:n], dt(-1.5))
    np.testing.assert_array_equal(buf[:n], z0[:n] * dt(-1.5))
    np.testing.assert_array_equal(buf[n:], z0[n:])


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", LENGTHS)
def test_hessian_row_passes(dt, n):
    """u += cv and <p, u>; then u = d p (u - <p, u>) added into g: against
    NumPy, g's entries past the row untouched."""
    rng = np.random.default_rng(n)
    p = rng.dirichlet(np.ones(n)).astype(dt)
    u0 = rng.standard_normal(n).astype(dt)
    cv = rng.standard_normal(n).astype(dt)
    g0 = rng.standard_normal(n + 20).astype(dt)
    u, g = u0.copy(), g0.copy()
    pu = bias_dot_row(u, cv, p)
    np.testing.assert_array_equal(u, u0 + cv)
    truth = float(np.dot(p.astype(np.float64), (u0 + cv).astype(np.float64)))
    tol = 8 * float(np.finfo(dt).eps) * float(np.abs(p * (u0 + cv)).sum())
    assert abs(pu - truth) <= tol
    d = dt(0.25)
    hvp_update_row(u, p, pu, d, g)
    s = d * p * ((u0 + cv) - pu)
    np.testing.assert_allclose(u, s, rtol=4 * float(np.finfo(dt).eps), atol=0)
    np.testing.assert_allclose(g[:n], g0[:n] + s, rtol=4 * float(np.finfo(dt).eps),
                               atol=4 * float(np.finfo(dt).eps))
    np.testing.assert_array_equal(g[n:], g0[n:])


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("k", [1, 7, 16, 17, 33, 40, 63, 64, 100, 128])
@pytest.mark.parametrize("store_p", [False, True])
def test_error_pair_matches_numpy(dt, k, store_p):
    """Two rows' error in one pass (any row of up to 8 vectors): t = z +
    bias, the maxima, the sums, z = exp(t - M) fw / S, gb += both rows, P =
    softmax(t) where asked (else p untouched), against NumPy in float64;
    the same numbers with P stored and without."""
    from fastsoftmax._kernels._config import VECTOR_BYTES
    from fastsoftmax._kernels._rowvec import ERROR_PAIR_VECTORS, error_pair

    lanes = VECTOR_BYTES // np.dtype(dt).itemsize
    if -(-k // lanes) > ERROR_PAIR_VECTORS:
        pytest.skip("more vectors than a pair takes on this width")
    rng = np.random.default_rng(k)
    Z = (3 * rng.standard_normal((2, k))).astype(dt)
    bias = rng.standard_normal(k).astype(dt)
    fw = (0.3, 0.7)
    gb0 = rng.standard_normal(k + 5).astype(dt)
    z, gb, P = Z.copy(), gb0.copy(), np.full((2, k), -7.0, dt)
    out = error_pair(z[0], z[1], bias, gb, P[0], P[1], fw[0], fw[1], store_p)
    t = Z.astype(np.float64) + bias
    M = t.max(axis=1)
    e = np.exp(t - M[:, None])
    S = e.sum(axis=1)
    err = e * (np.array(fw) / S)[:, None]
    tol = 8 * float(np.finfo(dt).eps)
    np.testing.assert_allclose(out[0::3], M, rtol=tol)
    np.testing.assert_allclose(out[1::3], S, rtol=tol)
    assert out[2] == out[5] == 1
    np.testing.assert_allclose(z, err, rtol=tol, atol=tol * 1e-3)
    np.testing.assert_allclose(gb[:k], gb0[:k] + err.sum(axis=0), rtol=tol, atol=tol)
    assert np.array_equal(gb[k:], gb0[k:]), "gb written past the row"
    if store_p:
        np.testing.assert_allclose(P, e / S[:, None], rtol=tol, atol=tol * 1e-3)
    else:
        assert np.all(P == -7.0)
    # the same numbers with the other store_p
    z2, gb2, P2 = Z.copy(), gb0.copy(), np.zeros((2, k), dt)
    out2 = error_pair(z2[0], z2[1], bias, gb2, P2[0], P2[1], fw[0], fw[1], not store_p)
    assert out2 == out and np.array_equal(z2, z) and np.array_equal(gb2, gb)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [0, 16, 38])
def test_error_pair_reports_non_finite_rows_and_odd_rows(dt, bad, where):
    """A non-finite entry anywhere flags its row only; the same row twice
    with the second weight 0 (an odd last row) gives that row's error once."""
    from fastsoftmax._kernels._config import VECTOR_BYTES
    from fastsoftmax._kernels._rowvec import ERROR_PAIR_VECTORS, error_pair

    k = 39
    if -(-k // (VECTOR_BYTES // np.dtype(dt).itemsize)) > ERROR_PAIR_VECTORS:
        pytest.skip("more vectors than a pair takes on this width")
    rng = np.random.default_rng(where)
    Z = rng.standard_normal((2, k)).astype(dt)
    Z[1, where] = bad
    bias = np.zeros(k, dt)
    gb = np.zeros(k, dt)
    out = error_pair(Z[0], Z[1], bias, gb, Z[0], Z[1], 1.0, 1.0, False)
    assert out[2] == 1 and out[5] == 0
    z = Z[0].copy()
    gb = np.zeros(k, dt)
    out = error_pair(z, z, bias, gb, z, z, 0.5, 0.0, False)
    e = np.exp(Z[0].astype(np.float64) - Z[0].max())
    tol = 8 * float(np.finfo(dt).eps)
    np.testing.assert_allclose(z, 0.5 * e / e.sum(), rtol=tol, atol=tol * 1e-3)
    np.testing.assert_allclose(gb, z, rtol=tol, atol=tol * 1e-3)
