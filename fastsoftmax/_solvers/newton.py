"""Truncated Newton: conjugate gradients on fused Hessian-vector products.

Each outer iteration solves H d = -g approximately by conjugate gradients,
where every product H v is one fused pass over X
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

Measured choices (BENCHMARKS.md, "Newton"): a line search rather than a
trust region (TRON's), because the unit step is accepted almost every time
and both need the same number of products; no Jacobi preconditioner,
because on pixel data it took more products, not fewer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._kernels._vector import _cg_direction, _cg_update, _dot_scaled
from .._launch import n_chunks
from ._common import Callback, FitResult, Monitor, coef_order, warn_not_converged

# Armijo sufficient-decrease constant and the backtracking factor.
ARMIJO = 1e-4
BACKTRACK = 0.5
MAX_BACKTRACKS = 40
# CG steps per Newton iteration at most (scikit-learn's maxinner).
MAX_CG = 200
# A Newton step whose predicted decrease is below this many epsilons of the
# data's dtype, relative to the loss, cannot lower it: the loss is at its
# rounding floor. (float32 data computes each row's loss in float32, so its
# loss is only known to about float32's epsilon.)
DECREASE_FLOOR_EPS = 4
# Curvature along a unit direction below this counts as none.
CURVATURE_FLOOR = 16 * np.finfo(np.float64).eps
# The conjugate-gradient vectors are updated by the fused kernels of
# :mod:`fastsoftmax._kernels._vector` from this many entries (n k + k), by
# NumPy below it: there its passes over vectors that fit in L2 cost
# microseconds beside a Hessian product's pass over X (Newton fits at
# 7,850 and 60,020 weights took 0.97-0.99x the time), and a first fit of
# such a model does not compile the three kernels (a first default fit on
# an empty cache, float64, 20.7-21.5 s instead of 26.6-27.0 s on a slow
# 2-core host; BENCHMARKS.md, "Thirty-fifth session").
FUSED_VECTOR_SIZE = 1 << 16


class _Packing:
    """(coef (k, n), intercept (k,) or None) <-> one float64 vector.

    The vector holds coef in the memory order the engine works in: coef
    itself (k, n), or with ``transposed`` its transpose W (n, k), the layout
    of the sparse kernels and of the dense GEMM strategy, whose gradients
    and Hessian products come out as transposed views. Packing them, and
    handing them unpacked directions, then copies memory in order instead
    of transposing 8 n k bytes (on the 20-newsgroups shape, 2.6 million
    weights, the transposes took a third of a Newton fit).
    """

    def __init__(self, coef0: np.ndarray, intercept0: np.ndarray | None, dtype: np.dtype,
                 transposed: bool = False):
        self.shape = coef0.shape
        self.size = coef0.size
        self.fit_b = intercept0 is not None
        self.dtype = dtype
        self.transposed = transposed

    def _coef_part(self, x: np.ndarray) -> np.ndarray:
        """Return the (k, n) view of x's coef part."""
        k, n = self.shape
        return x[:self.size].reshape(n, k).T if self.transposed else x[:self.size].reshape(k, n)

    def pack(self, coef: np.ndarray, intercept: np.ndarray | None,
             out: np.ndarray | None = None) -> np.ndarray:
        """Return the vector of (coef, intercept), written into ``out`` when given."""
        if out is None:
            out = np.empty(self.size + (self.shape[0] if self.fit_b else 0))
        self._coef_part(out)[...] = coef
        if self.fit_b:
            out[self.size:] = intercept
        return out

    def unpack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Return views of x in float64 (x is never written after it is unpacked), else copies."""
        coef = self._coef_part(x).astype(self.dtype, copy=False)
        return coef, (x[self.size:].astype(self.dtype, copy=False) if self.fit_b else None)

    def direction(self, x: np.ndarray, scale: float
                  ) -> tuple[np.ndarray, np.ndarray | None, float]:
        """Return (coef, intercept, rest): the direction scale x is rest (coef, intercept).

        float64 data: views of x and rest = scale, which the product applies
        as it reads them (no pass over x here). float32 data: scale x cast
        to float32 (one pass, scaled in float64 first so that a direction
        beyond float32's range fits) and rest = 1.
        """
        if self.dtype == np.float64:
            return (*self.unpack(x), scale)
        coef = np.empty(self.shape, self.dtype, order="F" if self.transposed else "C")
        np.multiply(self._coef_part(x), scale, out=coef, casting="unsafe")
        intercept = (np.multiply(x[self.size:], scale).astype(self.dtype) if self.fit_b
                     else None)
        return coef, intercept, 1.0

    def coef_part(self, x: np.ndarray) -> np.ndarray | None:
        """Return the (k, n) view of x's coef part where products can be written, else None."""
        return self._coef_part(x) if self.dtype == np.float64 else None


def _numpy_cg_update(d, r, p, Hu, step, step_r, parts):
    """``_vector._cg_update`` in NumPy, its sums in parts[0] (parts (1, 2))."""
    d += step * p
    r -= step_r * Hu
    parts[0, 0] = r @ r
    parts[0, 1] = np.abs(r).sum()


def _numpy_cg_direction(p, r, beta, parts):
    """``_vector._cg_direction`` in NumPy, p . p in parts[0, 0] (parts (1, 2))."""
    p *= beta
    p += r
    parts[0, 0] = p @ p


def _numpy_dot_scaled(a, b, s, parts):
    """``_vector._dot_scaled`` in NumPy, into parts[0, 0] (parts (1, 2))."""
    parts[0, 0] = (s * a) @ b


def _conjugate_gradient(hessp, g: np.ndarray, tol: float) -> tuple[np.ndarray, int]:
    """Approximately solve H d = -g; return (d, products used).

    ``hessp(v, scale)`` returns H (scale v).

    Stops when |r|_1 <= tol, after MAX_CG steps, or at (numerically)
    non-positive curvature: the Hessian of this objective is positive
    semi-definite, and with alpha = 0 a direction along its null space
    (a constant added to every class) has zero curvature. Each product is
    taken along the unit direction p / |p| and scaled back, so that badly
    scaled features (|x| ~ 1e150: gradients that large, curvatures of
    their square) do not overflow the product.
    """
    # The vector updates are two fused passes per step
    # (:mod:`fastsoftmax._kernels._vector`): on wide models (millions of
    # weights) NumPy's one pass per operation cost as much time as the
    # Hessian products themselves. Below FUSED_VECTOR_SIZE, NumPy's.
    if g.shape[0] >= FUSED_VECTOR_SIZE:
        cg_update, cg_direction, dot_scaled = _cg_update, _cg_direction, _dot_scaled
        parts = np.empty((n_chunks(g.shape[0]), 2))
    else:
        cg_update, cg_direction = _numpy_cg_update, _numpy_cg_direction
        dot_scaled = _numpy_dot_scaled
        parts = np.empty((1, 2))
    d = np.zeros_like(g)
    r = np.negative(g)  # residual of H d = -g at d = 0
    p = r.copy()
    rr = float(r @ r)
    r1 = float(np.abs(r).sum())
    pp = rr
    for i in range(MAX_CG):
        if r1 <= tol:
            return d, i
        norm = np.sqrt(pp)
        with np.errstate(over="ignore", invalid="ignore"):
            # The product along the unit direction p / |p|, which it forms
            # as it reads p (no pass over p here).
            Hu = hessp(p, 1.0 / norm)
            dot_scaled(p, Hu, 1.0 / norm, parts)
            curv = float(parts[:, 0].sum())  # curvature along the unit direction
        if not (np.isfinite(curv) and curv > CURVATURE_FLOOR):
            # No usable curvature: on the first step fall back to steepest
            # descent (the line search scales it), later keep what CG has.
            return (p if i == 0 else d), i + 1
        step = rr / norm / norm / curv
        cg_update(d, r, p, Hu, step, step * norm, parts)
        rr_new = float(parts[:, 0].sum())
        r1 = float(parts[:, 1].sum())
        cg_direction(p, r, rr_new / rr, parts)
        pp = float(parts[:, 0].sum())
        rr = rr_new
    return d, MAX_CG


def newton(objective: Any, coef0: np.ndarray, intercept0: np.ndarray | None, alpha: float, *,
           max_iter: int, tol: float, validation: Any = None, n_iter_no_change: int = 5,
           callback: Callback | None = None) -> FitResult:
    """Minimise J by truncated Newton (module docstring).

    With ``validation``, also stops when the held-out loss has not
    improved for ``n_iter_no_change`` iterations (the best held-out weights
    are kept).
    """
    # On an empty cache the Hessian products' kernel compiles in a second
    # process meanwhile, where a core is spare (fastsoftmax._side_compile).
    objective.compile_hessp_aside()
    packing = _Packing(coef0, intercept0, objective.dtype,
                       transposed=coef_order(objective) == "F")
    x = packing.pack(coef0, intercept0)
    # From the first point on, coef in the engine's memory order.
    H = objective.hessian(*packing.unpack(x), alpha)
    product = np.empty_like(x)  # the Hessian products' vector, reused
    curve: list[float] = []
    monitor = Monitor(0.0, n_iter_no_change, validation, alpha)
    converged = False
    steps = 0
    floor = DECREASE_FLOOR_EPS * float(np.finfo(objective.dtype).eps)
    while steps < max_iter:
        g = packing.pack(H.grad_coef, H.grad_intercept)
        if np.abs(g).max() <= tol:
            converged = True
            break
        g1 = np.abs(g).sum()

        def hessp(v, scale, H=H):
            coef, intercept, rest = packing.direction(v, scale)
            target = packing.coef_part(product)
            HV, Hc = H.matvec(coef, intercept, scale=rest, out=target)
            if target is None:
                return packing.pack(HV, Hc, out=product)
            if Hc is not None:
                product[packing.size:] = Hc
            return product

        d, _ = _conjugate_gradient(hessp, g, min(0.5, np.sqrt(g1)) * g1)
        slope = float(g @ d)
        # The step's predicted decrease (-slope / 2 for a Newton step) below
        # the rounding of the loss itself: no step can lower it any more
        # (float32 data reaches this floor before the gradient test).
        if not slope < -floor * abs(H.loss):
            converged = True
            break
        accepted = _line_search(objective, packing, x, d, H.loss, slope, alpha)
        if accepted is None:
            converged = True
            break
        previous = H.loss
        x, H = accepted
        steps += 1
        curve.append(float(H.loss))
        if callback is not None:
            callback(steps, curve[-1])
        if not H.loss < previous:
            # Armijo accepts an unchanged loss when the slope is at rounding
            # level: the loss has stopped moving, which is the optimum in
            # this precision.
            converged = True
            break
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
