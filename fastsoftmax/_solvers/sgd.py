"""Mini-batch SGD: the state, one epoch over a Dataset, and the outer loop.

The outer loop (:func:`sgd`) is written once. It asks an *epoch runner*
for one pass over the data: :class:`EpochRunner` runs the compiled epoch
kernel over an in-memory :class:`~fastsoftmax._data.Dataset`; the Dask
layer's runner chains the same :func:`run_epoch` over the row blocks on the
workers. Both update an :class:`SGDState` and report an
:class:`EpochResult`; divergence is reported as data (``ok`` False), never
as an exception.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import _sparse
from .._kernels._sgd import (
    SCHEDULE_CONSTANT,
    SCHEDULE_INVSCALING,
    _feature_split_epoch,
    _per_sample_kernel,
    _sgd_epoch,
    feature_split_parts,
    sgd_hyper,
)
from .._launch import ALIGN, aligned_empty, aligned_row, n_chunks
from .._penalty import l2_penalty
from ._common import (
    Callback,
    FitResult,
    Monitor,
    rose,
    warn_diverged,
    warn_not_converged,
)

# "adaptive" divides eta by this factor at each stall, and stops once eta
# has fallen below MIN_ETA_FACTOR * eta0.
ADAPTIVE_DIVISOR = 5.0
MIN_ETA_FACTOR = 1e-6


@dataclasses.dataclass
class SGDState:
    """Everything SGD carries from one epoch (or ``partial_fit`` call) to the next.

    ``coef`` (k, n) and ``intercept`` (k,) are updated in place by the
    epoch kernel, in the estimator's layout; the intercept stays 0 when
    ``fit_intercept`` is False. ``t`` counts the updates made (the
    "invscaling" schedule decays with it) and ``eta_factor`` is what
    "adaptive" has divided eta0 by so far: the step is always
    ``eta0 * eta_factor`` with the current eta0, so that a later
    ``set_params(eta0=...)`` takes effect.
    """

    coef: np.ndarray
    intercept: np.ndarray
    velocity_coef: np.ndarray
    velocity_intercept: np.ndarray
    fit_intercept: bool
    t: int = 0
    eta_factor: float = 1.0

    @classmethod
    def start(cls, coef: np.ndarray, intercept: np.ndarray | None) -> SGDState:
        """Return a fresh state (zero velocity) at a copy of the given weights.

        The weights and their velocity start on a cache line
        (``_launch.aligned_empty``): the feature-split epoch's threads
        own ranges of columns that start on line boundaries, so that where
        the rows do too, no two threads write the same line.
        """
        src = np.asarray(coef)
        coef = aligned_empty(src.shape, src.dtype)
        coef[...] = src
        velocity = aligned_empty(src.shape, src.dtype)
        velocity[...] = 0
        b = np.zeros(coef.shape[0], coef.dtype) if intercept is None else np.array(intercept)
        return cls(coef, b, velocity, np.zeros_like(b), intercept is not None)

    def copy(self) -> SGDState:
        return dataclasses.replace(
            self, coef=self.coef.copy(), intercept=self.intercept.copy(),
            velocity_coef=self.velocity_coef.copy(),
            velocity_intercept=self.velocity_intercept.copy())

    def restore(self, other: SGDState) -> None:
        """Become ``other`` again (after a diverged epoch), arrays in place."""
        for name in ("coef", "intercept", "velocity_coef", "velocity_intercept"):
            getattr(self, name)[...] = getattr(other, name)
        self.t, self.eta_factor = other.t, other.eta_factor

    def finite(self) -> bool:
        return bool(np.isfinite(self.coef).all() and np.isfinite(self.intercept).all())

    @property
    def intercept_or_none(self) -> np.ndarray | None:
        return self.intercept if self.fit_intercept else None


@dataclasses.dataclass(frozen=True)
class EpochResult:
    """One epoch: Σ w_i CE_i over its rows (not normalised), updates made, success."""

    loss_sum: float
    steps: int
    ok: bool


def run_epoch(data: Any, state: SGDState, order: np.ndarray, params: Any, *,
              steps_per_epoch: int) -> EpochResult:
    """One epoch over ``data`` (a Dataset) in the row order ``order``; ``state`` in place.

    ``steps_per_epoch`` is the number of mini-batches in an epoch of the
    whole data set (a Dask block is part of one), which the "invscaling"
    schedule divides the update count by.
    """
    if data.sparse:
        return _run_sparse_epoch(data, state, order, params, steps_per_epoch=steps_per_epoch)
    m, n = data.X.shape
    k = data.n_classes
    hyper = sgd_hyper(
        alpha=params.alpha, momentum=params.momentum, eta0=params.eta0 * state.eta_factor,
        power_t=params.power_t, t0=state.t, steps_per_epoch=steps_per_epoch,
        schedule=SCHEDULE_INVSCALING if params.learning_rate == "invscaling"
        else SCHEDULE_CONSTANT,
        nesterov=params.nesterov, fit_intercept=state.fit_intercept)
    batch_size = min(params.batch_size, m)
    chunks = n_chunks(m)
    parts = feature_split_parts(batch_size, n, k, chunks)
    loss_out = np.zeros(1, dtype=np.float64)
    rows = (data.X, *data.kernel_targets(), order)
    step_args = (1.0 / data.mean_weight, hyper, state.coef, state.intercept,
                 state.velocity_coef, state.velocity_intercept)
    args = (*rows, batch_size, *step_args)
    if batch_size == 1:
        steps = _per_sample_kernel(*rows, *step_args, np.empty(k, dtype=data.dtype), loss_out)
    elif parts > 1:
        # Each batch split by features: one partial gradient per range.
        steps = _feature_split_epoch(*args, np.empty((parts, k, n), dtype=data.dtype),
                                     np.empty(k, dtype=data.dtype), loss_out)
    else:
        # The parts' intercept gradients a cache line apart (each is written
        # at every block of four rows by a thread of its own).
        gb = aligned_empty((chunks, aligned_row(k, data.dtype.itemsize, ALIGN)), data.dtype)
        steps = _sgd_epoch(*args, np.empty((chunks, k, n), dtype=data.dtype), gb, loss_out)
    ok = steps >= 0
    steps = steps if ok else -steps - 1
    state.t += steps
    return EpochResult(float(loss_out[0]), steps, ok)


def _run_sparse_epoch(data: Any, state: SGDState, order: np.ndarray, params: Any, *,
                      steps_per_epoch: int) -> EpochResult:
    """:func:`run_epoch` on CSR data: the sparse epoch kernel, in W layout (n, k).

    The state's coef (k, n) is transposed in and out once per epoch, O(n k)
    next to the epoch's O(nnz k); with momentum 0 an update costs O(nnz of
    the batch x k) (:func:`fastsoftmax._sparse.sgd_epoch`).
    """
    W = np.ascontiguousarray(state.coef.T)
    VW = np.ascontiguousarray(state.velocity_coef.T) if params.momentum else None
    steps, loss_sum = _sparse.sgd_epoch(
        data.X, data.targets if data.soft else data.labels, data.sample_weight, W,
        state.intercept, order, batch_size=min(params.batch_size, data.n_rows),
        eta0=params.eta0 * state.eta_factor, alpha=params.alpha,
        fit_intercept=state.fit_intercept, momentum=params.momentum,
        nesterov=params.nesterov, VW=VW, Vb=state.velocity_intercept,
        learning_rate="invscaling" if params.learning_rate == "invscaling" else "constant",
        power_t=params.power_t, t0=state.t, steps_per_epoch=steps_per_epoch,
        mean_weight=data.mean_weight)
    state.coef[...] = W.T
    if VW is not None:
        state.velocity_coef[...] = VW.T
    ok = steps >= 0
    steps = steps if ok else -steps - 1
    state.t += steps
    return EpochResult(loss_sum if ok else float("nan"), steps, ok)


def epoch_order(m: int, shuffle: bool, seed: int) -> np.ndarray:
    """Return the rows of one epoch in visiting order: a permutation drawn from ``seed``."""
    return np.random.default_rng(seed).permutation(m) if shuffle else np.arange(m)


class EpochRunner:
    """Runs epochs over an in-memory Dataset."""

    def __init__(self, data: Any):
        self.data = data
        self.total_weight = data.total_weight

    def epoch(self, state: SGDState, params: Any, seed: int) -> EpochResult:
        m = self.data.n_rows
        steps = -(-m // min(params.batch_size, m))
        return run_epoch(self.data, state, epoch_order(m, params.shuffle, seed), params,
                         steps_per_epoch=steps)


def sgd(runner: Any, state: SGDState, params: Any, *, rng: np.random.Generator,
        epochs: int | None = None, validation: Any = None,
        callback: Callback | None = None) -> FitResult:
    """Mini-batch SGD for up to ``params.max_iter`` epochs (exactly ``epochs`` if given).

    The monitored loss is the mean training loss over the epoch plus the
    penalty at the epoch's final weights, or with ``validation`` the
    held-out loss (the weights with the best held-out loss are returned).
    "adaptive" divides eta by 5 each time the monitored loss stalls for
    ``n_iter_no_change`` epochs and stops once eta falls below 1e-6 * eta0;
    the other schedules stop at the first stall. With ``epochs`` given
    (``partial_fit``) no stopping rule applies.
    """
    stop_early = epochs is None
    max_epochs = params.max_iter if epochs is None else epochs
    monitor = Monitor(params.tol, params.n_iter_no_change, validation, params.alpha)
    curve: list[float] = []
    converged = diverged = False
    done = 0
    for epoch in range(max_epochs):
        snapshot = state.copy()
        seed = int(rng.integers(np.iinfo(np.int64).max))
        result = runner.epoch(state, params, seed)
        train_loss = result.loss_sum / runner.total_weight + l2_penalty(state.coef, params.alpha)
        # The weights themselves are part of the test: with alpha = 0 the
        # last update of an epoch can overflow them while every logit the
        # epoch used (and so its loss) was finite.
        if not (result.ok and state.finite() and np.isfinite(train_loss)):
            state.restore(snapshot)
            diverged = True
            warn_diverged("sgd", params.eta0 * state.eta_factor, epoch)
            break
        done = epoch + 1
        curve.append(float(train_loss))
        if callback is not None:
            callback(done, float(train_loss))
        if stop_early and monitor.update(state.coef, state.intercept_or_none, train_loss):
            if (params.learning_rate == "adaptive"
                    and state.eta_factor / ADAPTIVE_DIVISOR >= MIN_ETA_FACTOR):
                state.eta_factor /= ADAPTIVE_DIVISOR
                monitor.stopper.reset()
                continue
            converged = not rose("sgd", curve, params.eta0 * state.eta_factor)
            break
    else:
        if stop_early:
            warn_not_converged("sgd", params.max_iter, "epochs", "increase max_iter.")
    return monitor.result(state.coef.copy(), None if not state.fit_intercept
                          else state.intercept.copy(), n_iter=done, loss_curve=curve,
                          converged=converged, diverged=diverged, state=state)
