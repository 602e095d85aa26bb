"""solver="newton" (the default through "auto"): truncated Newton on fused
Hessian-vector products. Optimality against scikit-learn, dtypes, weights,
warm start, warnings, divergence safety, early stopping."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from fastsoftmax import SoftmaxRegression, loss_and_grad


def standardised(loader):
    X, y = loader(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def objective(est, X, y, alpha, sample_weight=None):
    return loss_and_grad(X.astype(np.float64), y, est.coef_.T.astype(np.float64),
                         est.intercept_.astype(np.float64), alpha=alpha,
                         sample_weight=sample_weight)[0]


@pytest.mark.parametrize("loader", [load_digits, load_wine], ids=["digits", "wine"])
def test_reaches_scikit_learns_optimum(loader):
    X, y = standardised(loader)
    alpha = 1.0 / len(y)
    sk = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000, solver="newton-cg").fit(X, y)
    J_sk = loss_and_grad(X, y, sk.coef_.T.copy(), sk.intercept_.copy(), alpha=alpha)[0]
    est = SoftmaxRegression("newton", alpha=alpha, tol=1e-10, max_iter=100).fit(X, y)
    assert abs(objective(est, X, y, alpha) - J_sk) <= 1e-8 * J_sk
    assert est.n_iter_ <= 30  # Newton's handful of iterations, not L-BFGS's hundreds
    np.testing.assert_array_equal(est.predict(X), sk.predict(X))
    # the loss curve: one entry per iteration, decreasing, ending at the optimum
    curve = np.asarray(est.loss_curve_)
    assert len(curve) == est.n_iter_ and np.all(np.diff(curve) <= 0)
    assert curve[-1] == pytest.approx(objective(est, X, y, alpha), rel=1e-12)


def test_auto_is_newton():
    X, y = standardised(load_wine)
    a = SoftmaxRegression(tol=1e-8).fit(X, y)
    b = SoftmaxRegression("newton", tol=1e-8).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.solver == "auto"  # the parameter is left as given (scikit-learn's rule)


def test_float32_trains_in_float32_to_its_precision():
    X, y = standardised(load_digits)
    alpha = 1.0 / len(y)
    est64 = SoftmaxRegression("newton", alpha=alpha, tol=1e-10).fit(X, y)
    est32 = SoftmaxRegression("newton", alpha=alpha, tol=1e-10).fit(X.astype(np.float32), y)
    assert est32.coef_.dtype == np.float32 and est32.intercept_.dtype == np.float32
    J64, J32 = objective(est64, X, y, alpha), objective(est32, X, y, alpha)
    # float32 stops at its rounding floor (no step lowers the loss), without a warning
    assert abs(J32 - J64) <= 1e-6 * J64


def test_weights_no_intercept_and_lbfgs_agree():
    X, y = standardised(load_wine)
    sw = np.random.default_rng(0).uniform(0.2, 3.0, len(y))
    params = dict(alpha=0.01, tol=1e-10, max_iter=1000, fit_intercept=False,
                  class_weight={0: 2.0, 2: 0.5})
    newton = SoftmaxRegression("newton", **params).fit(X, y, sample_weight=sw)
    lbfgs = SoftmaxRegression("lbfgs", **params).fit(X, y, sample_weight=sw)
    assert np.all(newton.intercept_ == 0)
    np.testing.assert_allclose(newton.coef_, lbfgs.coef_, rtol=1e-5, atol=1e-7)


def test_warm_start_continues_from_the_solution():
    X, y = standardised(load_digits)
    est = SoftmaxRegression("newton", tol=1e-8, warm_start=True).fit(X, y)
    first = est.n_iter_
    est.fit(X, y)
    assert first > 3 and est.n_iter_ <= 1


def test_iteration_limit_warns_and_keeps_a_finite_model():
    X, y = standardised(load_digits)
    with pytest.warns(ConvergenceWarning, match="newton did not converge in max_iter=2"):
        est = SoftmaxRegression("newton", tol=1e-12, max_iter=2).fit(X, y)
    assert est.n_iter_ == 2 and np.all(np.isfinite(est.coef_))


def test_huge_features_never_give_non_finite_weights():
    """A full Newton step from a point of tiny curvature overflows the logits:
    the line search backs off instead of accepting non-finite weights."""
    X, y = standardised(load_wine)
    X = X * 1e150
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = SoftmaxRegression("newton", alpha=0.0, max_iter=20).fit(X, y)
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    assert np.all(np.isfinite(est.loss_curve_))
    assert est.score(X, y) > 0.9


@pytest.mark.parametrize("size", [5, 300])
def test_conjugate_gradient_numpy_and_fused_vectors_agree(monkeypatch, size):
    """Below FUSED_VECTOR_SIZE the CG vectors are NumPy's, from it the fused
    kernels': the same solution of H d = -g (an SPD H) in the same steps."""
    import importlib

    # The module (the package exports the solver function under its name).
    newton = importlib.import_module("fastsoftmax._solvers.newton")
    rng = np.random.default_rng(size)
    A = rng.standard_normal((size, size))
    H = A @ A.T / size + 0.1 * np.eye(size)
    g = rng.standard_normal(size)
    solves = []
    for bound in (size + 1, size):  # NumPy, then the kernels
        monkeypatch.setattr(newton, "FUSED_VECTOR_SIZE", bound)
        solves.append(newton._conjugate_gradient(lambda v, scale: H @ (scale * v), g.copy(),
                                                 1e-10))
    (d_np, steps_np), (d_fused, steps_fused) = solves
    assert steps_np == steps_fused
    np.testing.assert_allclose(d_np, d_fused, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(H @ d_np, -g, atol=1e-8)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("size", [1, 7, 10_001])
def test_cg_vector_kernels_match_numpy(threads, size):
    """The fused CG updates (fastsoftmax._kernels._vector) against NumPy's operations."""
    import numba

    from fastsoftmax._kernels._vector import _cg_direction, _cg_update, _dot_scaled

    rng = np.random.default_rng(size)
    d, r, p, Hu = (rng.standard_normal(size) for _ in range(4))
    step, step_r, beta = 0.37, 1.9, 0.61
    want_d, want_r = d + step * p, r - step_r * Hu
    want_p = want_r + beta * p
    saved = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        parts = np.empty((min(size, threads), 2))
        _cg_update(d, r, p, Hu, step, step_r, parts)
        np.testing.assert_allclose(d, want_d, rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(r, want_r, rtol=1e-15, atol=1e-15)
        assert parts[:, 0].sum() == pytest.approx(want_r @ want_r, rel=1e-13)
        assert parts[:, 1].sum() == pytest.approx(np.abs(want_r).sum(), rel=1e-13)
        _cg_direction(p, r, beta, parts)
        np.testing.assert_allclose(p, want_p, rtol=1e-15, atol=1e-15)
        assert parts[:, 0].sum() == pytest.approx(want_p @ want_p, rel=1e-13)
        _dot_scaled(p, Hu, 0.25, parts)
        assert parts[:, 0].sum() == pytest.approx(0.25 * (p @ Hu), rel=1e-12, abs=1e-14)
        # A direction far beyond float64's range times its product: the
        # scale meets each entry first, so the dot stays finite.
        _dot_scaled(p * 1e300, Hu * 1e300, 1e-300, parts)
        assert parts[:, 0].sum() == pytest.approx(1e300 * (p @ Hu), rel=1e-12)
    finally:
        numba.set_num_threads(saved)
