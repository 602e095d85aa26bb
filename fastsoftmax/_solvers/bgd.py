"""Batch gradient descent with (Nesterov) momentum and a backtracking step."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import (
    Callback,
    FitResult,
    Monitor,
    coef_order,
    rose,
    warn_diverged,
    warn_not_converged,
)


def bgd(objective: Any, coef0: np.ndarray, intercept0: np.ndarray | None, alpha: float, *,
        max_iter: int, tol: float, n_iter_no_change: int, eta0: float, learning_rate: str,
        momentum: float, nesterov: bool, power_t: float = 0.5, validation: Any = None,
        callback: Callback | None = None) -> FitResult:
    """Full-batch gradient descent, coef <- coef - eta * grad J, with momentum.

    ``learning_rate``: "constant" keeps eta0; "invscaling" uses
    eta0 / (1 + t) ** power_t at iteration t = 0, 1, ...; "adaptive" is a
    backtracking rule -- a step that raises the loss is undone, eta halves
    and the momentum is reset, and each accepted step lets eta grow by 5%.
    Stops when the monitored loss (training, or held-out with
    ``validation``, whose best weights are then kept) has not improved by
    ``tol`` for ``n_iter_no_change`` iterations, or after ``max_iter``
    iterations.
    """
    dt = objective.dtype
    # coef in the engine's memory order (``Objective.coef_order``), as its
    # gradients come: the steps' arithmetic then runs on contiguous arrays
    # of one order, and the engine takes coef without a transposing copy.
    params = [coef0.copy(order=coef_order(objective))]
    if intercept0 is not None:
        params.append(intercept0.copy())
    velocity = [np.zeros_like(p) for p in params]
    loss, grads = _split(objective.loss_grad(*_pair(params), alpha))
    curve = [loss]
    monitor = Monitor(tol, n_iter_no_change, validation, alpha)
    eta = float(eta0)
    mu = dt.type(momentum)
    converged = False
    it = 0
    for it in range(max_iter):
        step = eta if learning_rate != "invscaling" else eta0 / (1.0 + it) ** power_t
        # A step that is far too large overflows here (eta0 beyond float32's
        # range already in this cast); that is detected below as non-finite
        # weights or loss, not reported as a floating-point warning.
        with np.errstate(over="ignore", invalid="ignore"):
            e = dt.type(step)
            new_velocity = [mu * v - e * g for v, g in zip(velocity, grads, strict=True)]
            new_params = [p + (mu * v - e * g if nesterov else v) for p, v, g in
                          zip(params, new_velocity, grads, strict=True)]
            new = None  # (loss, grad_coef, grad_intercept) while finite
            if all(np.isfinite(p).all() for p in new_params):
                try:
                    new = objective.loss_grad(*_pair(new_params), alpha)
                except ValueError:  # the logits overflowed
                    new = None
                if new is not None and not np.isfinite(new[0]):
                    new = None
        if learning_rate == "adaptive" and (new is None or new[0] > loss):
            eta /= 2
            for v in velocity:
                v[:] = 0
            if eta < 1e-12:
                converged = not rose("bgd", curve, eta)
                break
            continue
        if new is None:
            warn_diverged("bgd", step, it)
            return monitor.result(*_pair(params), n_iter=it, loss_curve=curve, diverged=True)
        params, velocity = new_params, new_velocity
        loss, grads = _split(new)
        curve.append(loss)
        if learning_rate == "adaptive":
            eta *= 1.05
        if callback is not None:
            callback(it + 1, loss)
        if monitor.update(*_pair(params), loss):
            converged = not rose("bgd", curve, step)
            break
    else:
        warn_not_converged("bgd", max_iter, "iterations", "increase max_iter or eta0.")
    return monitor.result(*_pair(params), n_iter=it + 1, loss_curve=curve, converged=converged)


def _pair(params: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
    """(coef, intercept or None) from the list of parameter arrays."""
    return params[0], (params[1] if len(params) > 1 else None)


def _split(result: tuple) -> tuple[float, list[np.ndarray]]:
    """(loss, [grad_coef] or [grad_coef, grad_intercept]) from an objective's result."""
    loss, g_coef, g_int = result
    return loss, [g_coef] + ([] if g_int is None else [g_int])
