"""The Objective and its Hessian (fastsoftmax._objective): the settings it is
built with, kept when it moves to another point, and rejected arguments.
Its numbers are checked per engine: test_dense.py, test_sparse.py."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from _helpers import PublicObjective, make_problem, product

from fastsoftmax import reference as ref


def test_objective_rejects_unknown_strategy():
    with pytest.raises(ValueError, match="strategy must be 'rows' or 'gemm'"):
        PublicObjective(np.zeros((2, 2)), np.zeros(2, dtype=np.int64), 2, strategy="blas")


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


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("engine", ["rows", "gemm", "sparse"])
def test_matvec_scale_and_out_give_the_product_along_the_scaled_direction(engine, dt, rng):
    """matvec(V, c, scale=s, out=buf) is matvec(s V, s c), written into buf (what
    Newton's conjugate gradients use: unit directions never formed)."""
    import scipy.sparse as sp
    from _helpers import dataset

    from fastsoftmax._objective import Objective
    from fastsoftmax._sparse import as_csr

    X, y, W, b, _ = make_problem(rng, 40, 30, 4, dt)
    if engine == "sparse":
        X[np.abs(X) < 0.8] = 0
        X = as_csr(sp.csr_matrix(X))
    obj = Objective(dataset(X, y, 4), strategy=None if engine == "sparse" else engine)
    H = obj.hessian(np.ascontiguousarray(W.T), b, 0.3)
    V = rng.standard_normal((4, 30)).astype(dt)
    c = rng.standard_normal(4).astype(dt)
    want = H.matvec(np.float32(0.125) * V if dt == np.float32 else 0.125 * V, 0.125 * c)
    # out in the layout the engine works in: the transpose of (n, k) or (k, n) itself
    out = np.empty((30, 4), dt).T if engine != "rows" else np.empty((4, 30), dt)
    got = H.matvec(V, c, scale=0.125, out=out)
    assert got[0] is out
    tol = dict(rtol=2e-6, atol=2e-6) if dt == np.float32 else dict(rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(got[0], want[0], **tol)
    np.testing.assert_allclose(got[1], want[1], **tol)


@pytest.mark.parametrize("strategy, order", [("rows", "C"), ("gemm", "F"), ("sparse", "F")])
def test_lbfgs_keeps_coef_in_the_engines_order(strategy, order, rng):
    """L-BFGS's flat vector holds coef in the engine's memory order
    (Objective.coef_order): the engine gets coef and hands back its gradient
    in that order, no transposing copy either way; the fit reaches the
    optimum it reaches with coef held C-ordered, and returns a C-contiguous
    coef."""
    from fastsoftmax._solvers.lbfgs import lbfgs

    X, y, W, b, _ = make_problem(rng, 400, 30, 5, np.float64)
    if strategy == "sparse":
        X[np.abs(X) < 1] = 0
        X, strategy = sp.csr_matrix(X), None
    objective = PublicObjective(X, y, 5, strategy=strategy).objective
    assert objective.coef_order == order
    seen = []
    gradient = objective.engine.gradient

    def spy(coef, *args, **kwargs):
        seen.append(coef.flags.f_contiguous if order == "F" else coef.flags.c_contiguous)
        out = gradient(coef, *args, **kwargs)
        seen.append(out[1].flags.f_contiguous if order == "F" else out[1].flags.c_contiguous)
        return out

    objective.engine.gradient = spy
    coef0, b0 = np.zeros((5, 30)), np.zeros(5)
    got = lbfgs(objective, coef0, b0, 0.1, max_iter=500, tol=1e-10)
    assert seen and all(seen)
    assert got.coef.flags.c_contiguous and got.converged

    class COrdered:  # the same objective without its order: coef held C-ordered
        def __init__(self, inner):
            self.inner, self.dtype = inner, inner.dtype

        def loss_grad(self, *args):
            return self.inner.loss_grad(*args)

    want = lbfgs(COrdered(objective), coef0, b0, 0.1, max_iter=500, tol=1e-10)
    np.testing.assert_allclose(got.coef, want.coef, rtol=0, atol=1e-7)
    np.testing.assert_allclose(got.intercept, want.intercept, rtol=0, atol=1e-7)
    # Batch gradient descent keeps its coef in that order too: the same steps.
    from fastsoftmax._solvers.bgd import bgd

    seen.clear()
    settings = dict(max_iter=20, tol=0.0, n_iter_no_change=100, eta0=0.5,
                    learning_rate="constant", momentum=0.9, nesterov=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the iteration limit, on purpose
        got = bgd(objective, coef0, b0, 0.1, **settings)
        want = bgd(COrdered(objective), coef0, b0, 0.1, **settings)
    assert len(seen) == 2 * 21 * 2 and all(seen[:42])
    np.testing.assert_allclose(got.coef, want.coef, rtol=0, atol=1e-12)
