"""The estimator's parameters, checked once per fit into one frozen record.

:func:`check_params` reads a :class:`~fastsoftmax.SoftmaxRegression`'s
constructor parameters, rejects bad values with an error naming the
parameter (before anything is computed or changed), and returns a
:class:`SolverParams` that the solvers read.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import numpy as np

from ._threads import check_n_threads

# "auto" is resolved per data set by fastsoftmax._solvers.choose_solver.
SOLVERS = ("auto", "newton", "lbfgs", "sgd", "bgd")
LEARNING_RATES = ("adaptive", "constant", "invscaling")
_FLAGS = ("fit_intercept", "nesterov", "early_stopping", "shuffle", "warm_start")


@dataclasses.dataclass(frozen=True)
class SolverParams:
    """Checked hyper-parameters of one fit, as the solvers read them."""

    solver: str
    alpha: float
    max_iter: int
    tol: float
    n_iter_no_change: int
    batch_size: int
    learning_rate: str
    eta0: float
    power_t: float
    momentum: float
    nesterov: bool
    shuffle: bool
    n_threads: int | None


def check_number(name: str, value: Any, *, low: float | None = None,
                 high: float | None = None, integer: bool = False, low_open: bool = False,
                 high_open: bool = False) -> None:
    """Raise TypeError / ValueError unless ``value`` is a finite number in range."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if integer else "a real number"
        raise TypeError(f"{name} must be {what}, got {value!r}")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if low is not None and (v < low or (low_open and v == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value!r}")


def check_params(est: Any) -> SolverParams:
    """Check every constructor parameter of ``est``; return what the solvers need."""
    if est.solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {est.solver!r}")
    if est.learning_rate not in LEARNING_RATES:
        raise ValueError(
            f"learning_rate must be one of {LEARNING_RATES}, got {est.learning_rate!r}")
    check_number("alpha", est.alpha, low=0)
    check_number("max_iter", est.max_iter, low=1, integer=True)
    check_number("tol", est.tol, low=0)
    check_number("n_iter_no_change", est.n_iter_no_change, low=1, integer=True)
    check_number("batch_size", est.batch_size, low=1, integer=True)
    check_number("eta0", est.eta0, low=0, low_open=True)
    check_number("power_t", est.power_t, low=0)
    check_number("momentum", est.momentum, low=0, high=1, high_open=True)
    check_number("validation_fraction", est.validation_fraction, low=0, high=1,
                 low_open=True, high_open=True)
    check_number("verbose", est.verbose, low=0, integer=True)
    for name in _FLAGS:
        if not isinstance(getattr(est, name), (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {getattr(est, name)!r}")
    cw = est.class_weight
    if not (cw is None or (isinstance(cw, str) and cw == "balanced") or isinstance(cw, dict)):
        raise ValueError(f"class_weight must be None, 'balanced' or a dict, got {cw!r}")
    return SolverParams(
        solver=est.solver, alpha=float(est.alpha), max_iter=int(est.max_iter),
        tol=float(est.tol), n_iter_no_change=int(est.n_iter_no_change),
        batch_size=int(est.batch_size), learning_rate=est.learning_rate,
        eta0=float(est.eta0), power_t=float(est.power_t), momentum=float(est.momentum),
        nesterov=bool(est.nesterov), shuffle=bool(est.shuffle),
        n_threads=check_n_threads(est.n_threads))
