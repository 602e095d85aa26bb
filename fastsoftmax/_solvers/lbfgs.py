"""L-BFGS: scipy's L-BFGS-B on the fused loss and gradient."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import Callback, FitResult, Monitor, coef_order, warn_not_converged


def lbfgs(objective: Any, coef0: np.ndarray, intercept0: np.ndarray | None, alpha: float, *,
          max_iter: int, tol: float, validation: Any = None, n_iter_no_change: int = 5,
          callback: Callback | None = None) -> FitResult:
    """Minimise J with L-BFGS-B.

    Parameters are flattened into one float64 vector for scipy; every
    evaluation converts them to the objective's dtype, so float32 data is
    trained with float32 kernels. Stops when the projected gradient's
    largest entry is below ``tol`` or after ``max_iter`` iterations; with
    ``validation``, also when the held-out loss has not improved for
    ``n_iter_no_change`` iterations (the best held-out weights are kept).
    """
    k, n = coef0.shape
    dt = objective.dtype
    fit_b = intercept0 is not None
    size = k * n
    curve: list[float] = []
    # The flat vector holds coef in the engine's memory order (F for the
    # dense GEMM strategy and the sparse kernels: W (n, k) row by row, as
    # Newton's), so that neither the engine's weights nor its gradient is a
    # transposing copy: two passes of n k strided entries on every
    # evaluation (BENCHMARKS.md, "Sixty-second session").
    order = coef_order(objective)

    def unpack(theta):
        flat = theta[:size]
        coef = (flat.reshape(n, k).T if order == "F" else flat.reshape(k, n)).astype(dt)
        intercept = theta[size:].astype(dt) if fit_b else None
        return coef, intercept

    def fun(theta):
        try:
            loss, g_coef, g_int = objective.loss_grad(*unpack(theta), alpha)
        except ValueError:  # the logits overflowed at this trial point
            return np.inf, np.zeros_like(theta)
        grad = np.empty_like(theta)
        grad[:size] = g_coef.ravel(order)
        if fit_b:
            grad[size:] = g_int
        return loss, grad

    monitor = Monitor(0.0, n_iter_no_change, validation, alpha)

    def on_iter(intermediate_result):
        curve.append(float(intermediate_result.fun))
        if callback is not None:
            callback(len(curve), curve[-1])
        if validation is not None and monitor.update(*unpack(intermediate_result.x), curve[-1]):
            raise StopIteration

    theta0 = np.concatenate([coef0.ravel(order), intercept0 if fit_b else []]).astype(np.float64)
    # ftol at float64's epsilon whatever the data's dtype, as scikit-learn
    # does: the loss is summed in float64 even for float32 data, so it keeps
    # improving well below float32's epsilon, and ftol = 64 eps(float32)
    # stopped float32 fits far above the optimum (BENCHMARKS.md, target 7).
    # Where float32 noise does end the progress, the line search fails and
    # scipy stops at its best point.
    import scipy.optimize  # here: 0.3-0.5 s to import, and only lbfgs needs it

    res = scipy.optimize.minimize(
        fun, theta0, jac=True, method="L-BFGS-B", callback=on_iter,
        options={"maxiter": max_iter, "gtol": tol, "ftol": 64 * np.finfo(np.float64).eps,
                 "maxls": 50},
    )
    theta = res.x if np.all(np.isfinite(res.x)) else theta0
    if not curve:
        curve.append(float(res.fun))
    if res.status == 1 and validation is None:  # iteration limit
        warn_not_converged("lbfgs", max_iter, "iterations",
                           f"largest gradient entry {np.abs(res.jac).max():.2e} > tol={tol:g}; "
                           "increase max_iter or standardise the features.")
    converged = bool(res.success) or res.status == 99  # 99: stopped by the monitor
    coef, intercept = unpack(theta)
    return monitor.result(np.ascontiguousarray(coef), intercept, n_iter=int(res.nit),
                          loss_curve=curve, converged=converged)
