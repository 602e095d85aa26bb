"""Solvers, and the one dispatch that runs them: :func:`solve`.

``solve`` takes the data (an in-memory :class:`~fastsoftmax._data.Dataset`
or the Dask layer's distributed data: both give an objective and an SGD
epoch runner), starting weights and the checked estimator parameters
(:class:`~fastsoftmax._params.SolverParams`), and returns a
:class:`~fastsoftmax._solvers._common.FitResult`. The estimator calls it
for in-memory and for Dask input alike.

* :mod:`.newton` -- truncated Newton on fused Hessian-vector products.
* :mod:`.lbfgs` -- scipy's L-BFGS-B on the fused loss and gradient.
* :mod:`.bgd` -- full-batch gradient descent with momentum.
* :mod:`.sgd` -- mini-batch SGD: its state, epochs and outer loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._threads import thread_policy
from ._common import Callback, FitResult
from .bgd import bgd
from .lbfgs import lbfgs
from .newton import newton
from .sgd import SGDState, sgd

__all__ = ["FitResult", "SGDState", "choose_solver", "solve"]


def choose_solver(data: Any) -> str:
    """Return the solver "auto" stands for: truncated Newton, for every full-batch fit.

    Measured side by side (BENCHMARKS.md, "Time to the optimum"), Newton
    reached the optimum before fastsoftmax's L-BFGS on every data set of
    the benchmark, dense and sparse, float32 and float64, from 54 to
    130,107 features and 7 to 20 classes: its few iterations (7-12) beat
    L-BFGS's hundreds on ill-conditioned pixel data and win or tie on
    well-conditioned data. ``data`` is what
    :func:`solve` receives (in memory or on Dask); the rule does not need
    to look at it today.
    """
    del data
    return "newton"


def solve(params: Any, data: Any, coef0: np.ndarray, intercept0: np.ndarray | None, *,
          rng: np.random.Generator, validation: Any = None, state: SGDState | None = None,
          epochs: int | None = None, callback: Callback | None = None) -> FitResult:
    """Fit with ``params.solver`` from (coef0, intercept0) (copied, never modified).

    ``validation`` is held-out data (a Dataset) for early stopping.
    ``epochs`` runs exactly that many SGD epochs with no stopping rule
    (``partial_fit``), continuing from ``state`` when given. Everything
    runs under the package's thread policy for ``params.n_threads``.
    """
    with thread_policy(params.n_threads):
        held_out = None if validation is None else validation.objective(params.n_threads)
        solver = "sgd" if epochs is not None else params.solver
        if solver == "auto":
            solver = choose_solver(data)
        if solver == "sgd":
            if state is None:
                state = SGDState.start(coef0, intercept0)
            return sgd(data.sgd_runner(params.n_threads), state, params, rng=rng, epochs=epochs,
                       validation=held_out, callback=callback)
        common = dict(max_iter=params.max_iter, tol=params.tol, validation=held_out,
                      n_iter_no_change=params.n_iter_no_change, callback=callback)
        objective = data.objective(params.n_threads, newton=solver == "newton")
        if solver == "newton":
            return newton(objective, coef0, intercept0, params.alpha, **common)
        if solver == "lbfgs":
            return lbfgs(objective, coef0, intercept0, params.alpha, **common)
        if solver == "bgd":
            return bgd(objective, coef0, intercept0, params.alpha, eta0=params.eta0,
                       learning_rate=params.learning_rate, momentum=params.momentum,
                       nesterov=params.nesterov, power_t=params.power_t, **common)
        raise ValueError(f"unknown solver {solver!r}")
