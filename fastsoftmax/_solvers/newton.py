"""Truncated Newton: conjugate gradients on fused Hessian-vector products.

Each outer iteration solves H d = -g approximately by (preconditioned)
conjugate gradients, where every product H v is one fused pass over X
(:mod:`fastsoftmax._kernels._hessp`), then takes an Armijo backtracking
step along d. The objective's ``hessian(coef, intercept, alpha)`` evaluates
the loss and gradient at a point *and* keeps what the products there need
(the probabilities P), so the evaluation that accepts a step also prepares
the next iteration's products: one gradient pass plus one pass per CG step
per iteration.

The inner tolerance is scikit-learn's newton-cg forcing sequence (residual
below min(0.5, sqrt(|g|_1)) |g|_1), which gives superlinear convergence
near the optimum; the outer loop stops when the largest gradient entry is
below ``tol`` (as lbfgs does), when a step cannot decrease the loss any
more (float32 data reaches its rounding floor), or after ``max_iter``
iterations. The parameters are float64 vectors here whatever the data's
dtype; every evaluation runs in the data's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import Callback, FitResult, Monitor, warn_not_converged

# Armijo sufficient-decrease constant and the backtracking factor.
ARMIJO = 1e-4
BACKTRACK = 0.5
MAX_BACKTRACKS = 40
# CG steps per Newton iteration at most (scikit-learn's maxinner).
MAX_CG = 200


class _Packing:
    """(coef (k, n), intercept (k,) or None) <-> one float64 vector."""

    def __init__(self, coef0: np.ndarray, intercept0: np.ndarray | None, dtype: np.dtype):
        self.shape = coef0.shape
        self.size = coef0.size
        self.fit_b = intercept0 is not None
        self.dtype = dtype

    def pack(self, coef: np.ndarray, intercept: np.ndarray | None) -> np.ndarray:
        out = np.empty(self.size + (self.shape[0] if self.fit_b else 0))
        out[:self.size] = coef.ravel()
        if self.fit_b:
            out[self.size:] = intercept
        return out

    def unpack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        coef = x[:self.size].reshape(self.shape).astype(self.dtype)
        return coef, (x[self.size:].astype(self.dtype) if self.fit_b else None)


def _conjugate_gradient(hessp, g: np.ndarray, precond: np.ndarray | None,
                        tol: float) -> tuple[np.ndarray, int]:
    """Approximately solve H d = -g; return (d, products used).

    Stops when |r|_1 <= tol, after MAX_CG steps, or at (numerically)
    non-positive curvature: the Hessian of this objective is positive
    semi-definite, and with alpha = 0 a direction along its null space
    (a constant added to every class) has zero curvature.
    """
    d = np.zeros_like(g)
    r = -g.copy()  # residual of H d = -g at d = 0
    z = r if precond is None else r / precond
    p = z.copy()
    rz = float(r @ z)
    eps = 16 * np.finfo(np.float64).eps
    for i in range(MAX_CG):
        if np.abs(r).sum() <= tol:
            return d, i
        Hp = hessp(p)
        curv = float(p @ Hp)
        if curv <= eps * float(p @ p):
            # First step: fall back to the (preconditioned) steepest descent.
            return (p if i == 0 else d), i + 1
        step = rz / curv
        d += step * p
        r -= step * Hp
        z = r if precond is None else r / precond
        rz_new = float(r @ z)
        p = z + (rz_new / rz) * p
        rz = rz_new
    return d, MAX_CG


def newton(objective: Any, coef0: np.ndarray, intercept0: np.ndarray | None, alpha: float, *,
           max_iter: int, tol: float, validation: Any = None, n_iter_no_change: int = 5,
           callback: Callback | None = None) -> FitResult:
    """Minimise J by truncated Newton (module docstring).

    With ``validation``, also stops when the held-out loss has not
    improved for ``n_iter_no_change`` iterations (the best held-out weights
    are kept).
    """
    packing = _Packing(coef0, intercept0, objective.dtype)
    x = packing.pack(coef0, intercept0)
    H = objective.hessian(coef0, intercept0, alpha)
    curve: list[float] = []
    monitor = Monitor(0.0, n_iter_no_change, validation, alpha)
    converged = False
    steps = 0
    while steps < max_iter:
        g = packing.pack(H.grad_coef, H.grad_intercept)
        if np.abs(g).max() <= tol:
            converged = True
            break
        g1 = np.abs(g).sum()
        precond = packing.pack(*H.diagonal())

        def hessp(v, H=H):
            return packing.pack(*H.matvec(*packing.unpack(v)))

        d, _ = _conjugate_gradient(hessp, g, precond, min(0.5, np.sqrt(g1)) * g1)
        slope = float(g @ d)
        accepted = (_line_search(objective, packing, x, d, H.loss, slope, alpha)
                    if slope < 0 else None)
        if accepted is None:
            # No step decreases the loss at this precision (float32 data
            # reaches its rounding floor before the gradient test).
            converged = True
            break
        x, H = accepted
        steps += 1
        curve.append(float(H.loss))
        if callback is not None:
            callback(steps, curve[-1])
        if validation is not None and monitor.update(*packing.unpack(x), curve[-1]):
            converged = True
            break
    else:
        g = packing.pack(H.grad_coef, H.grad_intercept)
        converged = bool(np.abs(g).max() <= tol)
        if not converged and validation is None:
            warn_not_converged("newton", max_iter, "iterations",
                               f"largest gradient entry {np.abs(g).max():.2e} > tol={tol:g}; "
                               "increase max_iter.")
    if not curve:
        curve.append(float(H.loss))
    return monitor.result(*packing.unpack(x), n_iter=steps, loss_curve=curve,
                          converged=converged)


def _line_search(objective: Any, packing: _Packing, x: np.ndarray, d: np.ndarray,
                 loss: float, slope: float, alpha: float):
    """Armijo backtracking from the full Newton step; (x_new, hessian) or None."""
    step = 1.0
    for _ in range(MAX_BACKTRACKS):
        x_new = x + step * d
        try:
            H = objective.hessian(*packing.unpack(x_new), alpha)
        except ValueError:  # the logits overflowed at this trial point
            H = None
        if H is not None and np.isfinite(H.loss) and H.loss <= loss + ARMIJO * step * slope:
            return x_new, H
        step *= BACKTRACK
    return None
