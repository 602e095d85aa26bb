"""Hessian-vector products (Objective.hessian, fastsoftmax.hessp, the
kernels of fastsoftmax._kernels._hessp) against ``reference.hessp``, finite
differences of the gradient, PyTorch's double backward, and the algebra
(symmetry, positive semi-definiteness).

Tolerances. The truth is ``reference.hessp`` in float64 on the same numbers.
Errors are measured against the magnitude of the terms summed, not of the
result (H V can be small through cancellation): for the products
``M = |X|ᵀ |S| + alpha |V|`` with S the reference's per-row s_i (the column
sums of |S| for the intercept). float64 must agree to ``5e-14 * max M``,
float32 to ``5e-6 * max M`` (u_i is a dot product of n = 45 terms and each
chunk sums ~100 rows in the input dtype; worst seen over these shapes, 3
seeds: 8e-16 and 4.4e-7).
"""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import FLOAT_DTYPES, PublicObjective, dataset, dtype_id
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fastsoftmax as fs
from fastsoftmax import _dense
from fastsoftmax import reference as ref
from fastsoftmax._dense import PROBA_BUDGET, choose_mode
from fastsoftmax._objective import Objective
from fastsoftmax._threads import thread_policy

STRATEGIES = ("rows", "gemm")
MODES = ("cached", "recompute")
TOL = {np.dtype(np.float32): 5e-6, np.dtype(np.float64): 5e-14}
VARIANTS = ("plain", "weights", "soft", "no-b", "all")


def make_problem(rng, m, n, k, dt, *, intercept=True, weights=False, soft=False):
    X = rng.standard_normal((m, n)).astype(dt)
    W = (0.5 * rng.standard_normal((n, k))).astype(dt)
    b = (0.5 * rng.standard_normal(k)).astype(dt) if intercept else None
    y = (rng.dirichlet(np.full(k, 0.5), size=m).astype(dt) if soft
         else rng.integers(0, k, size=m))
    sw = rng.uniform(0.0, 3.0, size=m).astype(dt) if weights else None
    return X, y, W, b, sw


class product:  # noqa: N801 (reads as the function it stands for)
    """Objective.hessian at (W, b), public layout in, run on ``n_threads`` threads."""

    def __init__(self, X, y, W, b, sw, alpha, *, n_threads=None, strategy=None, mode=None):
        self.objective = Objective(dataset(X, y, W.shape[1], sw), strategy=strategy, mode=mode)
        self.strategy, self.mode = self.objective.strategy, self.objective.engine.mode
        self.alpha, self.n_threads = alpha, n_threads
        with thread_policy(n_threads):
            self.H = self.objective.hessian(np.ascontiguousarray(W.T), b, alpha)
        self.loss, self.grad_coef, self.grad_intercept = (
            self.H.loss, self.H.grad_coef, self.H.grad_intercept)
        self.P = self.H._P

    def matvec(self, V, c=None):
        with thread_policy(self.n_threads):
            return self.H.matvec(V, c)



def f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


def ref_hessp64(X, y, W, b, V, c, alpha, sw):
    """reference.hessp in float64, and the magnitudes of its summed terms."""
    X, W, b, V, c, sw = map(f64, (X, W, b, V, c, sw))
    HV, Hc = ref.hessp(X, y, W, b, V, c, alpha=alpha, sample_weight=sw)
    # the per-row s_i again, for the magnitudes
    m = X.shape[0]
    d = (np.ones(m) if sw is None else sw) / (m if sw is None else sw.sum())
    P = ref.softmax(X @ W + (0 if b is None else b))
    U = X @ V + (0 if c is None else c)
    S = d[:, None] * (P * U - P * np.sum(P * U, axis=1, keepdims=True))
    mag = np.abs(X).T @ np.abs(S) + alpha * np.abs(V)
    return HV, Hc, mag, np.abs(S).sum(axis=0)


def assert_hessp_close(H, X, y, W, b, V, c, alpha, sw):
    HV, Hc = H.matvec(V.T, c)
    HV_r, Hc_r, mag, mag_c = ref_hessp64(X, y, W, b, V, c, alpha, sw)
    tol = TOL[X.dtype]
    assert HV.dtype == X.dtype and HV.shape == W.T.shape
    np.testing.assert_allclose(HV.T, HV_r, rtol=0, atol=tol * mag.max())
    if b is None:
        assert Hc is None
    else:
        assert Hc.dtype == X.dtype and Hc.shape == b.shape
        np.testing.assert_allclose(Hc, Hc_r, rtol=0, atol=tol * mag_c.max())


@pytest.fixture(params=["serial", "parallel"])
def launch(request, monkeypatch):
    """One chunk without a parallel region, or the prange kernels."""
    monkeypatch.setattr(_dense, "SERIAL_WORK", 1 << 40 if request.param == "serial" else 0)
    return request.param


# ----------------------------------------------------------- vs the reference

@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [2, 10])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("variant", VARIANTS)
def test_matvec_matches_reference(strategy, mode, k, dt, variant, launch, rng):
    weights = variant in ("weights", "all")
    soft = variant in ("soft", "all")
    alpha = 0.3 if variant == "all" else 0.0
    # 203 rows: two chunks of 101/102 rows leave 1-3 rows after the 4-row
    # blocks; 45 features; k = 2 and 10 run the 4 x 2 and 4 x 3 tiles.
    X, y, W, b, sw = make_problem(rng, 203, 45, k, dt, intercept=variant != "no-b",
                                  weights=weights, soft=soft)
    H = product(X, y, W, b, sw, alpha, n_threads=2, strategy=strategy, mode=mode)
    assert (H.strategy, H.mode) == (strategy, mode)
    for _ in range(2):  # the same point serves several products
        V = rng.standard_normal(W.shape).astype(dt)
        c = rng.standard_normal(k).astype(dt) if b is not None else None
        assert_hessp_close(H, X, y, W, b, V, c, alpha, sw)
    # the intercept direction defaults to 0
    if b is not None:
        HV, Hc = H.matvec(V.T)
        HV0, Hc0 = H.matvec(V.T, np.zeros(k, dt))
        np.testing.assert_array_equal(HV, HV0)
        np.testing.assert_array_equal(Hc, Hc0)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_gradient_pass_stores_the_probabilities(strategy, dt, launch, rng):
    """The P-storing gradient pass: the same loss and gradient as the plain
    one (Objective.loss_grad, same chunks: to the bit but for the penalty's
    float64 sum, taken in another order), P = softmax(X W + b)."""
    X, y, W, b, sw = make_problem(rng, 203, 45, 7, dt, weights=True)
    cached = product(X, y, W, b, sw, 0.2, n_threads=2, strategy=strategy, mode="cached")
    plain = product(X, y, W, b, sw, 0.2, n_threads=2, strategy=strategy, mode="recompute")
    assert cached.P.shape == (203, 7) and plain.P.shape == (0, 7)
    obj = PublicObjective(X, y, 7, sw, n_threads=2, strategy=strategy)
    loss, gW, gb = obj(W, b, 0.2)
    for H in (cached, plain):
        assert H.loss == pytest.approx(loss, rel=1e-15)  # penalty summed in another order
        np.testing.assert_array_equal(H.grad_coef, gW.T)
        np.testing.assert_array_equal(H.grad_intercept, gb)
    eps = np.finfo(dt).eps
    P64 = ref.softmax(f64(X) @ f64(W) + f64(b))
    np.testing.assert_allclose(cached.P, P64, rtol=0, atol=(64 if dt == np.float32 else 8) * eps)
    # and the reference's loss and gradient
    r = ref.loss_and_grad(f64(X), y, f64(W), f64(b), alpha=0.2, sample_weight=f64(sw))
    assert cached.loss == pytest.approx(r[0], rel=2e-5 if dt == np.float32 else 1e-12)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_thread_counts_agree(strategy, mode, dt, monkeypatch, rng):
    monkeypatch.setattr(_dense, "SERIAL_WORK", 0)
    X, y, W, b, sw = make_problem(rng, 1001, 45, 10, dt, weights=True)
    V = rng.standard_normal(W.shape).astype(dt)
    c = rng.standard_normal(10).astype(dt)
    out = {}
    for nt in (1, 2):
        H = product(X, y, W, b, sw, 0.1, n_threads=nt, strategy=strategy, mode=mode)
        out[nt] = H.matvec(V.T, c)
        assert_hessp_close(H, X, y, W, b, V, c, 0.1, sw)
    hv1, hc1 = out[1]
    hv2, hc2 = out[2]
    # only the order of the partial sums differs
    eps = float(np.finfo(dt).eps)
    scale = 1e3 * eps
    np.testing.assert_allclose(hv2, hv1, rtol=0, atol=scale * np.abs(hv1).max())
    np.testing.assert_allclose(hc2, hc1, rtol=0, atol=scale * np.abs(hc1).max())


# ------------------------------------------------------------ the whole matrix

def full_hessian(hv, n, k, intercept):
    """Columns hv(e_j) for every unit direction e_j of (V (n, k), c (k,))."""
    size = n * k + (k if intercept else 0)
    Hm = np.empty((size, size))
    for col in range(size):
        e = np.zeros(size)
        e[col] = 1.0
        V = e[:n * k].reshape(n, k)
        c = e[n * k:] if intercept else None
        HV, Hc = hv(V, c)
        Hm[:, col] = np.concatenate([np.ravel(HV), [] if Hc is None else Hc])
    return Hm


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_full_hessian_matches_reference(strategy, mode, rng):
    """Every column of the kernel's Hessian, intercept rows included."""
    X, y, W, b, sw = make_problem(rng, 11, 5, 4, np.float64, weights=True, soft=True)
    n, k = W.shape
    want = full_hessian(lambda V, c: ref.hessp(X, y, W, b, V, c, alpha=0.1,
                                               sample_weight=sw), n, k, True)
    H = product(X, y, W, b, sw, 0.1, n_threads=2, strategy=strategy, mode=mode)

    def hv(V, c):
        HV, Hc = H.matvec(np.ascontiguousarray(V.T), c)
        return HV.T, Hc

    got = full_hessian(hv, n, k, True)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


# --------------------------------------------- finite differences, PyTorch

@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", ["plain", "all", "no-b"])
def test_matvec_matches_central_differences_of_the_gradient(strategy, mode, variant, rng):
    """H v ≈ (g(w + h v) - g(w - h v)) / 2h in float64: truncation O(h²)
    (~1e-10 here) plus rounding eps/h (~1e-11), against |Hv| ~ 0.1-1."""
    weights = variant == "all"
    soft = variant == "all"
    alpha = 0.2 if variant == "all" else 0.0
    X, y, W, b, sw = make_problem(rng, 57, 45, 6, np.float64, intercept=variant != "no-b",
                                  weights=weights, soft=soft)
    H = product(X, y, W, b, sw, alpha, n_threads=2, strategy=strategy, mode=mode)
    h = 1e-5
    for _ in range(3):
        V = rng.standard_normal(W.shape)
        c = rng.standard_normal(6) if b is not None else None
        HV, Hc = H.matvec(V.T, c)
        bp = None if b is None else b + h * c
        bm = None if b is None else b - h * c
        _, gWp, gbp = fs.loss_and_grad(X, y, W + h * V, bp, alpha=alpha, sample_weight=sw)
        _, gWm, gbm = fs.loss_and_grad(X, y, W - h * V, bm, alpha=alpha, sample_weight=sw)
        scale = np.abs(HV).max()
        np.testing.assert_allclose(HV.T, (gWp - gWm) / (2 * h), rtol=0, atol=1e-7 * scale)
        if b is not None:
            np.testing.assert_allclose(Hc, (gbp - gbm) / (2 * h), rtol=0, atol=1e-7 * scale)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("mode", MODES)
def test_matvec_matches_torch_double_backward(strategy, mode, rng):
    torch = pytest.importorskip("torch")
    X, y, W, b, sw = make_problem(rng, 57, 45, 6, np.float64, weights=True, soft=True)
    alpha = 0.15
    V = rng.standard_normal(W.shape)
    c = rng.standard_normal(6)
    tX, tY, tsw = torch.from_numpy(X), torch.from_numpy(y), torch.from_numpy(sw)
    tW = torch.from_numpy(W.copy()).requires_grad_(True)
    tb = torch.from_numpy(b.copy()).requires_grad_(True)
    Z = tX @ tW + tb
    ce = torch.logsumexp(Z, dim=1) - (tY * Z).sum(dim=1)
    J = (tsw * ce).sum() / tsw.sum() + 0.5 * alpha * (tW * tW).sum()
    gW, gb = torch.autograd.grad(J, (tW, tb), create_graph=True)
    inner = (gW * torch.from_numpy(V)).sum() + (gb * torch.from_numpy(c)).sum()
    hW, hb = torch.autograd.grad(inner, (tW, tb))
    H = product(X, y, W, b, sw, alpha, n_threads=2, strategy=strategy, mode=mode)
    HV, Hc = H.matvec(V.T, c)
    scale = float(hW.abs().max())
    np.testing.assert_allclose(HV.T, hW.numpy(), rtol=0, atol=1e-13 * max(scale, 1.0))
    np.testing.assert_allclose(Hc, hb.numpy(), rtol=0, atol=1e-13 * max(scale, 1.0))


# ------------------------------------------------------ algebra (hypothesis)

@st.composite
def problems(draw):
    m = draw(st.integers(1, 30))
    n = draw(st.integers(1, 9))
    k = draw(st.integers(2, 7))
    elements = st.floats(-4, 4, allow_nan=False, allow_infinity=False, width=64)
    X = draw(hnp.arrays(np.float64, (m, n), elements=elements))
    W = draw(hnp.arrays(np.float64, (n, k), elements=elements))
    b = draw(hnp.arrays(np.float64, k, elements=elements))
    U = draw(hnp.arrays(np.float64, (n + 1, k), elements=elements))
    V = draw(hnp.arrays(np.float64, (n + 1, k), elements=elements))
    weighted = draw(st.booleans())
    sw = (draw(hnp.arrays(np.float64, m, elements=st.floats(0, 3, width=64)))
          if weighted else None)
    alpha = draw(st.sampled_from([0.0, 0.01, 1.0]))
    return X, W, b, U, V, sw, alpha


@given(problems())
def test_symmetric_and_positive_semidefinite(problem):
    """<U, H V> = <H U, V> and <V, H V> >= alpha ||V_W||² for every strategy
    and mode; the intercept is the last row of U and V."""
    X, W, b, U, V, sw, alpha = problem
    assume(sw is None or sw.sum() > 1e-3)
    m, n = X.shape
    y = np.zeros(m, dtype=np.int64)  # the Hessian does not depend on the targets
    for strategy in STRATEGIES:
        for mode in MODES:
            H = product(X, y, W, b, sw, alpha, n_threads=2, strategy=strategy, mode=mode)
            HU = H.matvec(U[:n].T, U[n])
            HV = H.matvec(V[:n].T, V[n])

            def dot(A, hA):
                return float(np.sum(A[:n].T * hA[0]) + A[n] @ hA[1])

            uhv, hu_v, vhv = dot(U, HV), dot(V, HU), dot(V, HV)
            # each product is a sum of terms of size <= |X|² |P| |U| |V|
            bound = 1e-12 * (1 + np.abs(X).max() ** 2) * (
                np.abs(U).sum() * np.abs(V).sum() + np.abs(V).sum() ** 2)
            assert abs(uhv - hu_v) <= bound, (strategy, mode)
            assert vhv >= alpha * float(np.sum(V[:n] ** 2)) - bound, (strategy, mode)


# ------------------------------------------------------------- the driver

def test_mode_follows_the_memory_budget():
    X = np.empty((1000, 20))
    assert choose_mode(X, 20) == "cached"              # P no larger than X
    assert choose_mode(X, 21, budget=0) == "recompute"
    assert choose_mode(X, 21) == "cached"              # under the floor
    assert choose_mode(X, 10 ** 5, budget=8 * 10 ** 8) == "cached"
    assert choose_mode(X, 10 ** 5 + 1, budget=8 * 10 ** 8) == "recompute"
    assert PROBA_BUDGET >= 1 << 20


def test_moves_keep_the_settings_and_reject_bad_arguments(rng):
    X, y, W, b, _ = make_problem(rng, 30, 45, 3, np.float64)
    H = product(X, y, W, b, None, 0.5, n_threads=1, strategy="gemm", mode="recompute")
    H2 = product(X, y, 2 * W, b, None, 0.5, n_threads=1, strategy="gemm", mode="recompute")
    assert (H2.strategy, H2.mode, H2.alpha, H2.n_threads) == ("gemm", "recompute", 0.5, 1)
    r = ref.loss_and_grad(X, y, 2 * W, b, alpha=0.5)
    assert H2.loss == pytest.approx(r[0], rel=1e-13)
    np.testing.assert_allclose(H2.grad_coef, r[1].T, rtol=0, atol=1e-13)
    np.testing.assert_allclose(H2.grad_intercept, r[2], rtol=0, atol=1e-13)
    assert H.loss != H2.loss
    with pytest.raises(ValueError, match="strategy"):
        product(X, y, W, b, None, 0.0, strategy="blas")
    with pytest.raises(ValueError, match="mode"):
        product(X, y, W, b, None, 0.0, mode="lazy")
    H0 = product(X, y, W, None, None, 0.0, strategy="rows")
    with pytest.raises(ValueError, match="without intercept"):
        H0.matvec(W.T, np.ones(3))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_nonfinite_logits_are_reported(strategy):
    X = np.array([[1e200, 1.0]] * 5)
    W = np.full((2, 3), 1e200)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match="not finite at row 0"):
        product(X, np.zeros(5, dtype=np.int64), W, None, None, 0.0, strategy=strategy)


# ------------------------------------------------------- the public function

@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("variant", VARIANTS)
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
    np.testing.assert_allclose(HV, HV_r, rtol=0, atol=TOL[np.dtype(dt)] * mag.max())
    if b is None:
        assert Hc is None
    else:
        np.testing.assert_allclose(Hc, Hc_r, rtol=0, atol=TOL[np.dtype(dt)] * mag_c.max())
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
