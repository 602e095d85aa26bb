"""The fused objective over fixed, already validated data.

:class:`SoftmaxObjective` holds the data of one problem (X, the targets, the
sample weights) after the edge has checked it, and evaluates the loss and
its gradient for any weights with one fused kernel pass. Solvers build one
and call it every iteration, so validation happens once per fit, not once
per gradient.
"""

from __future__ import annotations

import numpy as np

from ._kernels._fused import (
    _loss_grad_gemm,
    _loss_grad_gemm_serial,
    _loss_grad_rows,
    _loss_grad_rows_serial,
)
from ._threads import numba_threads, single_threaded_blas

# Strategy choice, from side-by-side measurements on a 2-core Zen 3 (AVX2)
# with OpenBLAS (BENCHMARKS.md, "strategy crossover"): the 4 x 3
# register-blocked row kernel beats GEMM on row blocks up to k ~ 48 when
# there are enough features; GEMM wins above that, and at any k when the
# feature loop is only a few vectors long (n below ~40: the row kernel's
# per-row overhead -- max, exp, error -- is not amortised by the dot
# products).
SMALL_K = 48
SMALL_N = 40

# Below this many flops (4 m n k, ~67 M: about 1.3 ms on one core) one call
# runs without a parallel region. A Numba parallel launch costs ~0.1 ms
# back to back, but ~5.5 ms when the workers have been idle for a while
# (thread wake-up on this KVM guest, measured: 1000 x 784 x 2 took 0.22 ms
# in a loop and 5.9 ms after a 0.2 s pause; serial 0.26 / 0.61 ms), and
# milliseconds when the other core is busy.
SERIAL_FLOPS = 1 << 26

# Row-block size of the GEMM strategy: large enough to amortise adding each
# block's Xᵀ E into the chunk's accumulator (n*k work per block), small
# enough that the block of X stays in L2 between the two products.
_L2_BYTES = 1 << 18


def _gemm_block_rows(n: int, itemsize: int) -> int:
    return int(min(1024, max(64, _L2_BYTES // max(1, n * itemsize))))


def choose_strategy(n_features: int, n_classes: int) -> str:
    """Pick the kernel strategy for X with ``n_features`` columns and k classes."""
    if n_classes <= SMALL_K and n_features >= SMALL_N:
        return "rows"
    return "gemm"


class SoftmaxObjective:
    """J(W, b) = weighted mean cross-entropy + alpha/2 ||W||² on fixed data.

    Parameters
    ----------
    X : ndarray of shape (m, n), C-contiguous float32 or float64, finite.
    labels : ndarray of shape (m,), int64 in 0..k-1, or None.
    targets : ndarray of shape (m, k) of X's dtype, rows probability vectors,
        or None. Exactly one of ``labels`` and ``targets`` is given.
    sample_weight : ndarray of shape (m,) of X's dtype, or None.
    n_classes : int
        k, the number of columns of W.
    n_threads : int or None
        Numba threads for each evaluation; None keeps the current setting.
    strategy : {"rows", "gemm"} or None
        Kernel strategy; None picks by the shape (:func:`choose_strategy`).

    Nothing is checked here: the edge (:mod:`fastsoftmax._validation`) has
    done it.
    """

    def __init__(self, X, labels, targets, sample_weight, n_classes,
                 n_threads=None, strategy=None):
        self.X = X
        self.dtype = X.dtype
        self.n_classes = int(n_classes)
        m = X.shape[0]
        self.soft = targets is not None
        self.labels = labels if labels is not None else np.empty(0, dtype=np.int64)
        self.targets = (targets if targets is not None
                        else np.empty((0, self.n_classes), dtype=X.dtype))
        self.weighted = sample_weight is not None
        self.sample_weight = (sample_weight if sample_weight is not None
                              else np.empty(0, dtype=X.dtype))
        total = float(sample_weight.sum(dtype=np.float64)) if self.weighted else float(m)
        self.total_weight = total
        self.scale = X.dtype.type(1.0 / total)
        self.n_threads = n_threads
        if strategy is None:
            strategy = choose_strategy(X.shape[1], self.n_classes)
        if strategy not in ("rows", "gemm"):
            raise ValueError(f"strategy must be 'rows' or 'gemm', got {strategy!r}")
        self.strategy = strategy
        # The kernels' "do not store the probabilities" argument (see _fused).
        self._no_proba = np.empty((0, self.n_classes), dtype=X.dtype)

    def __call__(self, W, b, alpha=0.0):
        """Loss and gradients at (W, b).

        W is (n, k) and b (k,) or None, both of X's dtype and C-contiguous.
        Returns ``(loss, grad_W, grad_b)`` with grad_b None when b is None.
        Raises ValueError if the logits overflow to a non-finite value.
        """
        X = self.X
        m, n = X.shape
        k = self.n_classes
        dt = self.dtype
        bias = b if b is not None else np.zeros(k, dtype=dt)
        serial = 4 * m * n * k < SERIAL_FLOPS
        with numba_threads(self.n_threads) as n_threads:
            n_chunks = 1 if serial else max(1, min(m, n_threads))
            gb = np.empty((n_chunks, k), dtype=dt)
            loss = np.empty(n_chunks, dtype=np.float64)
            bad_row = np.empty(n_chunks, dtype=np.int64)
            args = (X, self.labels, self.targets, self.sample_weight, self.soft,
                    self.weighted, self.scale)
            if self.strategy == "rows":
                Wt = np.ascontiguousarray(W.T)
                g = np.empty((n_chunks, k, n), dtype=dt)
                scratch = np.empty((n_chunks, 5, k), dtype=dt)
                kernel = _loss_grad_rows_serial if serial else _loss_grad_rows
                kernel(*args, Wt, bias, g, gb, loss, bad_row, scratch, self._no_proba)
            else:
                R = _gemm_block_rows(n, dt.itemsize)
                g = np.empty((n_chunks, n, k), dtype=dt)
                scratch = np.empty((n_chunks, min(R, m) + 1, k), dtype=dt)
                tmp = np.empty((n_chunks, n, k), dtype=dt)
                if serial:
                    _loss_grad_gemm_serial(*args, W, bias, g, gb, loss, bad_row, scratch,
                                           tmp, self._no_proba)
                else:
                    with single_threaded_blas():
                        _loss_grad_gemm(*args, W, bias, g, gb, loss, bad_row, scratch,
                                        tmp, self._no_proba)
        hits = bad_row[bad_row >= 0]
        if hits.size:
            raise ValueError(
                f"the logits X @ W + b are not finite at row {int(hits.min())}: "
                "the features or weights are too large for "
                f"{dt.name} (rescale X or lower the learning rate)"
            )
        # Serial reduction of the per-chunk partial sums.
        grad = g.sum(axis=0)
        grad_W = np.ascontiguousarray(grad.T) if self.strategy == "rows" else grad
        value = float(loss.sum()) / self.total_weight
        if alpha:
            w64 = W.ravel().astype(np.float64)
            value += 0.5 * alpha * float(np.dot(w64, w64))
            grad_W += dt.type(alpha) * W
        grad_b = gb.sum(axis=0) if b is not None else None
        return value, grad_W, grad_b
