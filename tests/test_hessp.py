"""fastsoftmax.hessp, the public Hessian-vector product (fastsoftmax._functions),
against ``reference.hessp`` and its rejected inputs. The engines' products,
every strategy and mode, finite differences, PyTorch and the algebra are in
test_dense.py (and test_sparse.py for CSR).

Tolerances: _helpers.HESSP_TOL, relative to the magnitude of the terms summed
(see _helpers.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import FLOAT_DTYPES, HESSP_TOL, HESSP_VARIANTS, dtype_id, make_problem, ref_hessp64

import fastsoftmax as fs


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("variant", HESSP_VARIANTS)
@pytest.mark.parametrize("k", [3, 60])  # the rows and the GEMM strategy
def test_public_hessp_matches_reference(dt, variant, k, rng):
    X, y, W, b, sw = make_problem(rng, 157, 45, k, dt, intercept=variant not in ("no-b", "all"),
                                  weights=variant in ("weights", "all"),
                                  soft=variant in ("soft", "all"))
    V = rng.standard_normal(W.shape).astype(dt)
    c = None if b is None else rng.standard_normal(k).astype(dt)
    frozen = [a.copy() for a in (X, W, V)]
    HV, Hc = fs.hessp(X, y, W, b, V, c, alpha=0.3, sample_weight=sw, n_threads=2)
    HV_r, Hc_r, mag, mag_c = ref_hessp64(X, y, W, b, V, c, 0.3, sw)
    assert HV.dtype == dt and HV.shape == W.shape and HV.flags.c_contiguous
    np.testing.assert_allclose(HV, HV_r, rtol=0, atol=HESSP_TOL[np.dtype(dt)] * mag.max())
    if b is None:
        assert Hc is None
    else:
        np.testing.assert_allclose(Hc, Hc_r, rtol=0, atol=HESSP_TOL[np.dtype(dt)] * mag_c.max())
    for a, before in zip((X, W, V), frozen, strict=True):
        np.testing.assert_array_equal(a, before)


def test_public_hessp_rejects_bad_input(rng):
    X, y, W, b, _ = make_problem(rng, 20, 4, 3, np.float64)
    V = np.ones_like(W)
    with pytest.raises(ValueError, match=r"V has 5 rows but X has 4 features"):
        fs.hessp(X, y, W, b, np.ones((5, 3)))
    with pytest.raises(ValueError, match=r"V must have W's shape \(4, 3\)"):
        fs.hessp(X, y, W, b, np.ones((4, 2)))
    with pytest.raises(ValueError, match="c has 2 entries but V has 3 columns"):
        fs.hessp(X, y, W, b, V, np.ones(2))
    with pytest.raises(ValueError, match="b is None"):
        fs.hessp(X, y, W, None, V, np.ones(3))
    with pytest.raises(ValueError, match="V contains NaN at row 1, column 2"):
        Vn = V.copy()
        Vn[1, 2] = np.nan
        fs.hessp(X, y, W, b, Vn)
    Xn = X.copy()
    Xn[7, 1] = np.inf
    with np.errstate(all="ignore"), pytest.raises(ValueError, match="X contains inf at row 7"):
        fs.hessp(Xn, y, W, b, V)
    with pytest.raises(ValueError, match=r"y\[0\] = 5 is not a class index"):
        fs.hessp(X, np.r_[5, y[1:]], W, b, V)
