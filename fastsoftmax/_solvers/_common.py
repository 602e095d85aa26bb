"""What every solver shares: the result, the stopping rule, the warnings.

Solvers never return non-finite weights: when the loss, the logits or the
weights stop being finite (a learning rate too large for the data),
training stops, the last finite weights are kept and a
:class:`~fastsoftmax.exceptions.DivergenceWarning` names the learning rate.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Callback = Callable[[int, float], None]

# stacklevel of the solvers' warnings: they point at the user's call of fit
# (warn <- solver <- solve <- SoftmaxModel._solve <- fit <- user). The warning
# classes are imported when a warning is raised: DivergenceWarning is
# scikit-learn's ConvergenceWarning, and a run that warns of nothing (the
# command line's) never imports scikit-learn.
STACKLEVEL = 6


@dataclass
class FitResult:
    """What a solver returns: coef (k, n), intercept (k,) or None."""

    coef: np.ndarray
    intercept: np.ndarray | None
    n_iter: int
    loss_curve: list[float] = field(default_factory=list)
    validation_loss_curve: list[float] = field(default_factory=list)
    converged: bool = False
    diverged: bool = False
    state: Any = None  # the SGD state to continue from (partial_fit), else None


def coef_order(objective: Any) -> Literal["C", "F"]:
    """Return the memory order of coef (k, n) that ``objective``'s engine takes and returns.

    ``Objective.coef_order``; "C" for an objective that does not say (the
    Dask objective's sums are C-ordered).
    """
    return "F" if getattr(objective, "coef_order", "C") == "F" else "C"


def warn_diverged(solver: str, eta: float, it: int) -> None:
    """DivergenceWarning: non-finite loss or weights at iteration ``it`` (0-based)."""
    from ..exceptions import DivergenceWarning

    warnings.warn(
        f"{solver}: the loss or the weights became non-finite at iteration {it + 1} "
        f"with learning rate eta={eta:g}; training stopped and the last finite "
        "weights were kept. Lower eta0 (or standardise the features).",
        DivergenceWarning,
        stacklevel=STACKLEVEL,
    )


def warn_not_converged(solver: str, max_iter: int, what: str, advice: str) -> None:
    """ConvergenceWarning: the iteration limit was reached."""
    from sklearn.exceptions import ConvergenceWarning

    warnings.warn(
        f"{solver} did not converge in max_iter={max_iter} {what}; {advice}",
        ConvergenceWarning,
        stacklevel=STACKLEVEL,
    )


def rose(solver: str, curve: list[float], eta: float) -> bool:
    """At a stall, warn if the loss ended above where it started.

    That means the learning rate is too large even if nothing overflowed.
    """
    if len(curve) > 1 and curve[-1] > curve[0]:
        from ..exceptions import DivergenceWarning

        warnings.warn(
            f"{solver}: the loss rose from {curve[0]:.4g} to {curve[-1]:.4g} with learning "
            f"rate eta={eta:g}; lower eta0 (or standardise the features).",
            DivergenceWarning,
            stacklevel=STACKLEVEL,
        )
        return True
    return False


class Stopper:
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


class Monitor:
    """What the stopping rule watches.

    That is the training loss, or with a validation objective the held-out
    loss, keeping the weights with the best held-out loss.
    """

    def __init__(self, tol: float, patience: int, validation: Any, alpha: float):
        self.stopper = Stopper(tol, patience)
        self.validation = validation
        self.alpha = alpha
        self.curve: list[float] = []
        self.best: tuple[np.ndarray, np.ndarray | None] | None = None

    def update(self, coef: np.ndarray, intercept: np.ndarray | None, train_loss: float) -> bool:
        """Record one iterate; True when the stopping rule fires."""
        value = train_loss
        if self.validation is not None:
            value = self.validation.loss_grad(coef, intercept, self.alpha)[0]
            self.curve.append(float(value))
            if value <= self.stopper.best:
                self.best = (coef.copy(), None if intercept is None else intercept.copy())
        return self.stopper.update(value)

    def result(self, coef: np.ndarray, intercept: np.ndarray | None, **fields: Any) -> FitResult:
        """Return a FitResult with the best held-out weights if any, else (coef, intercept)."""
        if self.best is not None:
            coef, intercept = self.best
        return FitResult(coef=coef, intercept=intercept,
                         validation_loss_curve=self.curve, **fields)
