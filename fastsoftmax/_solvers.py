"""Solvers: L-BFGS, batch gradient descent and mini-batch SGD.

Each solver takes a :class:`~fastsoftmax._objective.SoftmaxObjective` (data
already validated) and starting weights, and returns a :class:`FitResult`.
They never return non-finite weights: when the loss, the logits or the
weights themselves stop being finite (a learning rate too large for the
data), training stops, the last finite weights are kept and a
:class:`DivergenceWarning` names the learning rate.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
from sklearn.exceptions import ConvergenceWarning

from ._kernels._sgd import SCHEDULE_CONSTANT, SCHEDULE_INVSCALING, _sgd_epoch
from ._objective import SoftmaxObjective
from ._threads import numba_threads

LEARNING_RATES = ("constant", "invscaling", "adaptive")


class DivergenceWarning(ConvergenceWarning):
    """Training stopped because the loss, the logits or the weights became non-finite."""


@dataclass
class FitResult:
    """What a solver returns. W is (n, k); b is (k,) or None."""

    W: np.ndarray
    b: np.ndarray | None
    n_iter: int
    loss_curve: list[float] = field(default_factory=list)
    validation_loss_curve: list[float] = field(default_factory=list)
    converged: bool = False
    diverged: bool = False
    t: int = 0  # SGD updates made so far (drives the invscaling schedule)


Callback = Callable[[int, float], None]


def _diverged(solver: str, eta: float, it: int) -> None:
    warnings.warn(
        f"{solver}: the loss or the weights became non-finite at iteration {it + 1} "
        f"with learning rate eta={eta:g}; training stopped and the last finite "
        "weights were kept. "
        "Lower eta0 (or standardise the features).",
        DivergenceWarning,
        stacklevel=4,
    )


def _rose(solver: str, curve: list[float], eta: float) -> bool:
    """At a stall, warn if the loss ended above where it started.

    That means the learning rate is too large even if nothing overflowed.
    """
    if len(curve) > 1 and curve[-1] > curve[0]:
        warnings.warn(
            f"{solver}: the loss rose from {curve[0]:.4g} to {curve[-1]:.4g} with learning "
            f"rate eta={eta:g}; lower eta0 (or standardise the features).",
            DivergenceWarning,
            stacklevel=4,
        )
        return True
    return False


class _Stopper:
    """No-improvement counter.

    It says stop (or shrink the step) when the monitored loss has failed to
    improve on its best by ``tol`` for ``patience`` consecutive iterations.
    """

    def __init__(self, tol: float, patience: int):
        self.tol = tol
        self.patience = patience
        self.best = np.inf
        self.count = 0

    def update(self, value: float) -> bool:
        """Record a value; True when patience has run out."""
        if value < self.best - self.tol:
            self.count = 0
        else:
            self.count += 1
        self.best = min(self.best, value)
        return self.count >= self.patience

    def reset(self) -> None:
        self.count = 0


class _Monitor:
    """What the stopping rule watches.

    That is the training loss, or with a validation objective the held-out
    loss, keeping the best weights.
    """

    def __init__(self, tol: float, patience: int, validation: SoftmaxObjective | None,
                 alpha: float):
        self.stopper = _Stopper(tol, patience)
        self.validation = validation
        self.alpha = alpha
        self.curve: list[float] = []
        self.best: tuple | None = None

    def update(self, W: np.ndarray, b: np.ndarray | None, train_loss: float) -> bool:
        """Record one iterate; True when the stopping rule fires."""
        value = train_loss
        if self.validation is not None:
            value = self.validation(W, b, self.alpha)[0]
            self.curve.append(float(value))
            if value <= self.stopper.best:
                self.best = (W.copy(), None if b is None else b.copy())
        return self.stopper.update(value)


def lbfgs(objective: SoftmaxObjective, W0: np.ndarray, b0: np.ndarray | None,
          alpha: float, *, max_iter: int, tol: float,
          validation: SoftmaxObjective | None = None, n_iter_no_change: int = 5,
          callback: Callback | None = None) -> FitResult:
    """Minimise J with scipy's L-BFGS-B on the fused loss and gradient.

    Parameters are flattened into one float64 vector for scipy; every
    evaluation converts them to the objective's dtype, so float32 data is
    trained with float32 kernels. Stops when the projected gradient's
    largest entry is below ``tol`` or after ``max_iter`` iterations; with
    ``validation``, also when the held-out loss has not improved for
    ``n_iter_no_change`` iterations (the best held-out weights are kept).
    """
    n, k = W0.shape
    dt = objective.dtype
    fit_b = b0 is not None
    size_W = n * k
    curve: list[float] = []
    failure: list[ValueError] = []

    def unpack(theta):
        W = theta[:size_W].reshape(n, k).astype(dt)
        b = theta[size_W:].astype(dt) if fit_b else None
        return W, b

    def fun(theta):
        W, b = unpack(theta)
        try:
            loss, gW, gb = objective(W, b, alpha)
        except ValueError as exc:  # logits overflowed at this trial point
            failure.append(exc)
            return np.inf, np.zeros_like(theta)
        grad = gW.ravel().astype(np.float64)
        if fit_b:
            grad = np.concatenate([grad, gb.astype(np.float64)])
        return loss, grad

    monitor = _Monitor(0.0, n_iter_no_change, validation, alpha)

    def on_iter(intermediate_result):
        curve.append(float(intermediate_result.fun))
        if callback is not None:
            callback(len(curve), curve[-1])
        if validation is not None and monitor.update(*unpack(intermediate_result.x),
                                                     curve[-1]):
            raise StopIteration

    theta0 = W0.ravel().astype(np.float64)
    if b0 is not None:
        theta0 = np.concatenate([theta0, b0.astype(np.float64)])
    # ftol at float64's epsilon whatever the data's dtype, as scikit-learn
    # does. The loss is summed in float64 even for float32 data, so it keeps
    # improving well below float32's epsilon; with ftol = 64 eps(float32)
    # (7.6e-6 relative per iteration) a float32 fit on MNIST-like data
    # stopped after 28 iterations, 7e-4 above the optimum that scikit-learn
    # reached on the same float32 data (BENCHMARKS.md, target 7). Where
    # float32 noise does end the progress, the line search fails and scipy
    # stops at its best point.
    res = scipy.optimize.minimize(
        fun, theta0, jac=True, method="L-BFGS-B", callback=on_iter,
        options={"maxiter": max_iter, "gtol": tol, "ftol": 64 * np.finfo(np.float64).eps,
                 "maxls": 50},
    )
    theta = res.x if np.all(np.isfinite(res.x)) else theta0
    W, b = unpack(theta)
    if monitor.best is not None:
        W, b = monitor.best
    if not curve:
        curve.append(float(res.fun))
    converged = bool(res.success) or res.status == 99  # 99: stopped by the monitor
    if res.status == 1 and validation is None:  # iteration limit
        warnings.warn(
            f"lbfgs did not converge in max_iter={max_iter} iterations "
            f"(largest gradient entry {np.abs(res.jac).max():.2e} > tol={tol:g}); "
            "increase max_iter or standardise the features.",
            ConvergenceWarning,
            stacklevel=3,
        )
    return FitResult(W=W, b=b, n_iter=int(res.nit), loss_curve=curve,
                     validation_loss_curve=monitor.curve, converged=converged)


def bgd(objective: SoftmaxObjective, W0: np.ndarray, b0: np.ndarray | None,
        alpha: float, *, max_iter: int, tol: float, n_iter_no_change: int,
        eta0: float, learning_rate: str, momentum: float, nesterov: bool,
        power_t: float = 0.5, validation: SoftmaxObjective | None = None,
        callback: Callback | None = None) -> FitResult:
    """Full-batch gradient descent, W <- W - eta * grad J, with momentum.

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
    W = W0.copy()
    b = None if b0 is None else b0.copy()
    vW = np.zeros_like(W)
    vb = None if b is None else np.zeros_like(b)
    loss, gW, gb = objective(W, b, alpha)
    curve = [loss]
    monitor = _Monitor(tol, n_iter_no_change, validation, alpha)
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
            vW_new = mu * vW - e * gW
            W_new = W + (mu * vW_new - e * gW if nesterov else vW_new)
            if b is not None:
                vb_new = mu * vb - e * gb
                b_new = b + (mu * vb_new - e * gb if nesterov else vb_new)
            else:
                vb_new = b_new = None
            finite = bool(np.isfinite(W_new).all()) and (
                b_new is None or bool(np.isfinite(b_new).all()))
            # new (loss, gW, gb) stays None when the weights or the loss are not finite
            new = None
            if finite:
                try:
                    new = objective(W_new, b_new, alpha)
                except ValueError:  # the logits overflowed
                    new = None
                if new is not None and not np.isfinite(new[0]):
                    new = None
        if learning_rate == "adaptive" and (new is None or new[0] > loss):
            eta /= 2
            vW[:] = 0
            if vb is not None:
                vb[:] = 0
            if eta < 1e-12:
                converged = not _rose("bgd", curve, eta)
                break
            continue
        if new is None:
            _diverged("bgd", step, it)
            if monitor.best is not None:
                W, b = monitor.best
            return FitResult(W=W, b=b, n_iter=it, loss_curve=curve,
                             validation_loss_curve=monitor.curve, diverged=True)
        W, b, vW, vb = W_new, b_new, vW_new, vb_new
        loss, gW, gb = new
        curve.append(loss)
        if learning_rate == "adaptive":
            eta *= 1.05
        if callback is not None:
            callback(it + 1, loss)
        if monitor.update(W, b, loss):
            converged = not _rose("bgd", curve, step)
            break
    else:
        warnings.warn(
            f"bgd did not converge in max_iter={max_iter} iterations; "
            "increase max_iter or eta0.",
            ConvergenceWarning,
            stacklevel=3,
        )
    if monitor.best is not None:
        W, b = monitor.best
    return FitResult(W=W, b=b, n_iter=it + 1, loss_curve=curve,
                     validation_loss_curve=monitor.curve, converged=converged)


def sgd_epochs(objective: SoftmaxObjective, W0: np.ndarray, b0: np.ndarray | None,
               alpha: float, *, max_iter: int, tol: float, n_iter_no_change: int,
               eta0: float, learning_rate: str, power_t: float, momentum: float,
               nesterov: bool, batch_size: int, shuffle: bool,
               rng: np.random.Generator, state: dict | None = None,
               validation: SoftmaxObjective | None = None,
               stop_early: bool = True,
               callback: Callback | None = None) -> FitResult:
    """Mini-batch SGD for up to ``max_iter`` epochs, each one kernel call.

    ``state`` carries the velocity, the update counter and the current
    learning rate between calls (``partial_fit``); it is updated in place.
    With ``validation`` the monitored loss is the held-out loss and the
    weights with the best held-out loss are returned; otherwise it is the
    mean training loss over the epoch. "adaptive" divides eta by 5 each time
    the monitored loss stalls for ``n_iter_no_change`` epochs and stops
    once eta falls below 1e-6 * eta0; the other schedules stop at the first
    stall. ``stop_early`` False runs exactly ``max_iter`` epochs.
    """
    X = objective.X
    m, n = X.shape
    k = objective.n_classes
    dt = objective.dtype
    fit_b = b0 is not None
    Wt = np.ascontiguousarray(W0.T)
    b = b0.copy() if b0 is not None else np.zeros(k, dtype=dt)
    state = {} if state is None else state
    VWt = state.get("VWt")
    if VWt is None or VWt.shape != Wt.shape:
        VWt = np.zeros_like(Wt)
        state["Vb"] = np.zeros(k, dtype=dt)
    Vb = state["Vb"]
    t = int(state.get("t", 0))
    eta = float(state.get("eta", eta0))
    schedule = SCHEDULE_INVSCALING if learning_rate == "invscaling" else SCHEDULE_CONSTANT
    batch_size = int(min(batch_size, m))
    steps_per_epoch = max(1, -(-m // batch_size))
    scale = m / objective.total_weight
    monitor = _Monitor(tol, n_iter_no_change, validation, alpha)
    curve: list[float] = []
    converged = False
    diverged = False
    epoch = 0
    with numba_threads(objective.n_threads) as n_threads:
        n_chunks = max(1, n_threads)
        gWt = np.empty((n_chunks, k, n), dtype=dt)
        gb = np.empty((n_chunks, k), dtype=dt)
        z = np.empty((n_chunks, k), dtype=dt)
        loss_out = np.zeros(1, dtype=np.float64)
        for epoch in range(max_iter):
            order = rng.permutation(m) if shuffle else np.arange(m)
            snapshot = (Wt.copy(), b.copy(), VWt.copy(), Vb.copy())
            steps = _sgd_epoch(
                X, objective.labels, objective.targets, objective.sample_weight,
                objective.soft, objective.weighted, order, batch_size, scale,
                Wt, b, fit_b, alpha, VWt, Vb, momentum, nesterov,
                eta, schedule, power_t, t, steps_per_epoch, 32,
                gWt, gb, z, loss_out,
            )
            train_loss = loss_out[0] / objective.total_weight
            if alpha:
                # Checked with the penalty: float64 weights beyond ~1e154 keep
                # finite logits on small features but overflow ||W||², and
                # must count as divergence, not enter loss_curve_ as inf.
                w64 = Wt.ravel().astype(np.float64)
                with np.errstate(over="ignore", invalid="ignore"):
                    train_loss += 0.5 * alpha * float(np.dot(w64, w64))
            # The weights themselves are part of the test: with alpha = 0 the
            # last update of an epoch can overflow W or b while every logit
            # the epoch used (and so its loss) was finite.
            finite_weights = bool(np.isfinite(Wt).all()) and bool(np.isfinite(b).all())
            if steps < 0 or not finite_weights or not np.isfinite(train_loss):
                Wt[:], b[:], VWt[:], Vb[:] = snapshot
                diverged = True
                _diverged("sgd", eta, epoch)
                break
            t += steps
            curve.append(float(train_loss))
            if callback is not None:
                callback(epoch + 1, float(train_loss))
            if stop_early and monitor.update(np.ascontiguousarray(Wt.T), b if fit_b else None,
                                             train_loss):
                if learning_rate == "adaptive" and eta / 5 >= 1e-6 * eta0:
                    eta /= 5
                    monitor.stopper.reset()
                    continue
                converged = not _rose("sgd", curve, eta)
                break
        else:
            if stop_early:
                warnings.warn(
                    f"sgd did not converge in max_iter={max_iter} epochs; "
                    "increase max_iter.",
                    ConvergenceWarning,
                    stacklevel=3,
                )
    state.update(VWt=VWt, Vb=Vb, t=t, eta=eta)
    W = np.ascontiguousarray(Wt.T)
    b_out = b if fit_b else None
    if monitor.best is not None:
        W, b_out = monitor.best
    return FitResult(
        W=W, b=b_out, n_iter=epoch + 1 if not diverged else epoch, loss_curve=curve,
        validation_loss_curve=monitor.curve, converged=converged, diverged=diverged, t=t,
    )
