"""The objective over one validated data set, and the one L2 penalty.

    J(coef, b) = Σ_i w_i CE_i / Σ w  +  α/2 ‖coef‖²

:class:`Objective` evaluates J and its gradient on a
:class:`~fastsoftmax._data.Dataset` with one fused kernel pass over X.
Parameters are in scikit-learn's layout, ``coef`` (k, n) and ``intercept``
(k,) or None, the layout of the estimator and of the small-k kernels; the
GEMM kernels take W = coefᵀ, transposed here (O(n k), next to the m n k of
the pass). Solvers build one objective per fit and call it every
iteration: validation has already happened and per-chunk buffers are
reused. Thread counts are not touched here: the caller runs inside
:func:`fastsoftmax._threads.thread_policy`.
"""

from __future__ import annotations

import numpy as np

from . import _calibration
from ._data import Dataset
from ._kernels._fused import (
    _loss_grad_gemm,
    _loss_grad_gemm_serial,
    _loss_grad_rows,
    _loss_grad_rows_serial,
)
from ._launch import SERIAL_WORK, first_bad, n_chunks

# Row-block size of the GEMM strategy: large enough to amortise adding each
# block's Xᵀ E into the chunk's accumulator (n*k work per block), small
# enough that the block of X stays in L2 between the two products.
_L2_BYTES = 1 << 18


def gemm_block_rows(n: int, itemsize: int) -> int:
    """Rows per GEMM block for X with ``n`` features of ``itemsize`` bytes."""
    return int(min(1024, max(64, _L2_BYTES // max(1, n * itemsize))))


def l2_penalty(coef: np.ndarray, alpha: float) -> float:
    """α/2 ‖coef‖², summed in float64 (the one place the penalty is computed).

    Overflow to inf is returned as inf, not warned about: callers treat a
    non-finite objective as divergence.
    """
    if not alpha:
        return 0.0
    w64 = coef.ravel().astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return 0.5 * alpha * float(np.dot(w64, w64))


def penalize(loss: float, grad_coef: np.ndarray, coef: np.ndarray,
             alpha: float) -> float:
    """Add the L2 term to a data loss and, in place, to its coef gradient."""
    if alpha:
        grad_coef += grad_coef.dtype.type(alpha) * coef
    return loss + l2_penalty(coef, alpha)


def logits_error(row: int, dtype: np.dtype) -> ValueError:
    """Return the error for logits that overflowed at ``row``."""
    return ValueError(
        f"the logits X @ W + b are not finite at row {row}: the features or weights "
        f"are too large for {dtype.name} (rescale X or lower the learning rate)")


class Objective:
    """J and its gradient on one :class:`~fastsoftmax._data.Dataset`.

    Parameters
    ----------
    data : Dataset
        Validated data; its ``total_weight`` normalises the loss (a Dask
        block carries the total of the whole data set, so that block
        results simply add up).
    strategy : {"rows", "gemm"} or None
        Kernel strategy; None picks this host's best for the shape
        (:func:`fastsoftmax._calibration.strategy`).
    """

    def __init__(self, data: Dataset, strategy: str | None = None):
        self.data = data
        self.dtype = data.dtype
        self.n_features = data.n_features
        self.n_classes = data.n_classes
        self.total_weight = data.total_weight
        if strategy is None:
            strategy = _calibration.strategy(self.n_features, self.n_classes, self.dtype,
                                             work=data.n_rows * self.n_features * self.n_classes)
        if strategy not in ("rows", "gemm"):
            raise ValueError(f"strategy must be 'rows' or 'gemm', got {strategy!r}")
        self.strategy = strategy
        self._scale = self.dtype.type(1.0 / data.total_weight)
        self._buffers: dict[int, tuple[np.ndarray, ...]] = {}

    def _scratch(self, chunks: int) -> tuple[np.ndarray, ...]:
        """Per-chunk OUT and SCRATCH arrays, made once per chunk count and reused."""
        buf = self._buffers.get(chunks)
        if buf is None:
            m, n = self.data.X.shape
            k, dt = self.n_classes, self.dtype
            common = (np.empty((chunks, k), dtype=dt),          # gb
                      np.empty(chunks, dtype=np.float64),       # loss
                      np.empty(chunks, dtype=np.int64))         # bad_row
            if self.strategy == "rows":
                buf = (np.empty((chunks, k, n), dtype=dt), *common,
                       np.empty((chunks, 5, k), dtype=dt))
            else:
                R = min(gemm_block_rows(n, dt.itemsize), m)
                buf = (np.empty((chunks, n, k), dtype=dt), *common,
                       np.empty((chunks, R + 1, k), dtype=dt),
                       np.empty((chunks, n, k), dtype=dt))
            self._buffers[chunks] = buf
        return buf

    def loss_grad(self, coef: np.ndarray, intercept: np.ndarray | None,
                  alpha: float = 0.0) -> tuple[float, np.ndarray, np.ndarray | None]:
        """J and its gradient at (coef, intercept).

        ``coef`` (k, n) and ``intercept`` (k,) or None, of the data's dtype
        and C-contiguous. Returns ``(loss, grad_coef, grad_intercept)``,
        grad_intercept None when intercept is None. Raises ValueError if the
        logits overflow to a non-finite value.
        """
        data = self.data
        m, n = data.X.shape
        k, dt = self.n_classes, self.dtype
        bias = intercept if intercept is not None else np.zeros(k, dtype=dt)
        serial = m * n * k < SERIAL_WORK
        chunks = 1 if serial else n_chunks(m)
        g, gb, loss, bad_row, *scratch = self._scratch(chunks)
        args = (data.X, *data.kernel_targets(), self._scale)
        if self.strategy == "rows":
            kernel = _loss_grad_rows_serial if serial else _loss_grad_rows
            kernel(*args, coef, bias, g, gb, loss, bad_row, *scratch)
        else:
            kernel = _loss_grad_gemm_serial if serial else _loss_grad_gemm
            kernel(*args, np.ascontiguousarray(coef.T), bias, g, gb, loss, bad_row, *scratch)
        row = first_bad(bad_row)
        if row >= 0:
            raise logits_error(row, dt)
        # Serial reduction of the per-chunk partial sums.
        grad = g.sum(axis=0)
        grad_coef = grad if self.strategy == "rows" else np.ascontiguousarray(grad.T)
        value = penalize(float(loss.sum()) / self.total_weight, grad_coef, coef, alpha)
        grad_intercept = gb.sum(axis=0) if intercept is not None else None
        return value, grad_coef, grad_intercept
