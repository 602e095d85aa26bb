"""Hessian-vector products at one point, for truncated-Newton solvers.

:class:`HessianProduct` fixes the data (already validated) and one point
(coef, intercept). Building it runs the fused gradient pass once, which
gives ``loss``, ``grad_coef`` and ``grad_intercept`` and, in "cached" mode,
stores the probabilities P = softmax(X W + b) (m, k) on the way. Then
``matvec`` applies the Hessian to directions (one pass over X each) and
``diagonal`` gives its diagonal (for a Jacobi preconditioner). Parameters
and directions are in scikit-learn's layout, coef (k, n); the GEMM kernels
take W = coefᵀ, transposed here (O(n k) next to the pass's O(m n k)).

A line search or trust-region test evaluates trial points through
:meth:`HessianProduct.at`: each trial is one gradient pass that also stores
P, so the accepted point needs no further pass before its first product.
"""

from __future__ import annotations

import numpy as np

from ._kernels._fused import (
    _loss_grad_gemm,
    _loss_grad_gemm_serial,
    _loss_grad_rows,
    _loss_grad_rows_serial,
)
from ._kernels._hessp import (
    _hess_diag_gemm,
    _hess_diag_gemm_chunk,
    _hess_diag_rows,
    _hess_diag_rows_chunk,
    _hessp_gemm,
    _hessp_gemm_chunk,
    _hessp_rows,
    _hessp_rows_chunk,
)
from ._objective import SERIAL_FLOPS, _gemm_block_rows, choose_strategy
from ._threads import numba_threads, single_threaded_blas

# P is cached when its m k entries take at most this many bytes, or no more
# than X itself. Measured (benchmarks/newton_study.py --products, 2-core
# AVX-512 host, k = 10): a cached product costs 0.46-0.74 of a recomputing
# one (digits 1347 x 64: 0.18 / 0.37 ms; 4000 x 784: 1.8-2.3 / 2.7-3.2 ms;
# 60000 x 784: 34-38 / 47-52 ms): the recompute adds the X W product and
# m k exps to the X V and Sᵀ X products, while reading P adds m k numbers
# to the m n of X that every product reads. Products are nearly all of a
# Newton fit's time, so the cache is worth having wherever memory allows.
# Up to the size of X it at most doubles what the fit already holds (k <=
# n: always); the floor lets small-n, large-k problems cache where it
# cannot matter to any machine that runs them (256 MiB is 3.4 M rows of 10
# float64 probabilities). Above both, e.g. 10^6 rows x 10^4 classes over
# 100 features (80 GB of P for 0.8 GB of X), the products recompute.
PROBA_BUDGET = 256 << 20

MODES = ("cached", "recompute")


def choose_mode(X: np.ndarray, n_classes: int, budget: int = PROBA_BUDGET) -> str:
    """Return "cached" when P (m, k) fits ``budget`` bytes or is no larger than X."""
    p_bytes = X.shape[0] * n_classes * X.dtype.itemsize
    return "cached" if p_bytes <= max(budget, X.nbytes) else "recompute"


class HessianProduct:
    """Loss, gradient, Hessian-vector products and Hessian diagonal at one point.

    J(coef, b) = Σ_i w_i CE_i / Σw + alpha/2 ‖coef‖², intercept unpenalised.

    Parameters
    ----------
    X : ndarray (m, n), C-contiguous float32 or float64, finite.
    labels : ndarray (m,) int64 in 0..k-1, or None.
    targets : ndarray (m, k) of X's dtype (rows sum to 1), or None; exactly
        one of ``labels`` and ``targets`` is given.
    sample_weight : ndarray (m,) of X's dtype, or None.
    total_weight : float
        Σ w_i (m without weights).
    n_classes : int
    coef : ndarray (k, n), intercept : ndarray (k,) or None
        The point; no intercept means b = 0 and no intercept rows in H.
    alpha : float
    n_threads : int or None (Numba's current count).
    strategy : {"rows", "gemm"} or None (by the shape, as the gradient).
    mode : {"cached", "recompute"} or None (by :func:`choose_mode`).

    Raises ValueError if the logits at the point are not finite.
    """

    def __init__(self, X, labels, targets, sample_weight, total_weight, n_classes,
                 coef, intercept, alpha=0.0, *, n_threads=None, strategy=None, mode=None):
        self._data = (X, labels, targets, sample_weight, total_weight, n_classes)
        m, n = X.shape
        k = int(n_classes)
        dt = X.dtype
        self.X = X
        self.n_classes = k
        self.alpha = float(alpha)
        self.n_threads = n_threads
        self.strategy = choose_strategy(n, k) if strategy is None else strategy
        self.mode = choose_mode(X, k) if mode is None else mode
        if self.strategy not in ("rows", "gemm"):
            raise ValueError(f"strategy must be 'rows' or 'gemm', got {self.strategy!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be 'cached' or 'recompute', got {self.mode!r}")
        self._soft = targets is not None
        self._labels = labels if labels is not None else np.empty(0, dtype=np.int64)
        self._targets = targets if targets is not None else np.empty((0, k), dtype=dt)
        self._weighted = sample_weight is not None
        self._sw = sample_weight if sample_weight is not None else np.empty(0, dtype=dt)
        self.total_weight = float(total_weight)
        self._scale = dt.type(1.0 / self.total_weight)
        # Below SERIAL_FLOPS (4 m n k) every call runs one chunk without a
        # parallel region, as the gradient does; a recomputing product does
        # 6 m n k, the same order.
        self._serial = 4 * m * n * k < SERIAL_FLOPS

        self.coef = np.ascontiguousarray(coef, dtype=dt)
        self.intercept = None if intercept is None else np.ascontiguousarray(intercept, dtype=dt)
        self._b = self.intercept if intercept is not None else np.zeros(k, dtype=dt)
        # The kernels' weights: coef itself (rows) or W = coefᵀ (gemm).
        self._w = self.coef if self.strategy == "rows" else np.ascontiguousarray(self.coef.T)
        cached = self.mode == "cached"
        self.P = np.empty((m, k) if cached else (0, k), dtype=dt)
        self.loss, self.grad_coef, self.grad_intercept = self._gradient_pass()
        self._diag = None

    def at(self, coef, intercept):
        """Return a :class:`HessianProduct` on the same data at another point."""
        return HessianProduct(*self._data, coef, intercept, self.alpha,
                              n_threads=self.n_threads, strategy=self.strategy,
                              mode=self.mode)

    def _n_chunks(self, n_threads):
        return 1 if self._serial else max(1, min(self.X.shape[0], n_threads))

    def _gemm_rows(self):
        X = self.X
        return min(_gemm_block_rows(X.shape[1], X.dtype.itemsize), X.shape[0])

    def _gradient_pass(self):
        """One fused pass: loss, gradients and (cached mode) P."""
        X = self.X
        m, n = X.shape
        k = self.n_classes
        dt = X.dtype
        args = (X, self._labels, self._targets, self._sw, self._soft, self._weighted,
                self._scale, self._w, self._b)
        with numba_threads(self.n_threads) as n_threads:
            nc = self._n_chunks(n_threads)
            gb = np.empty((nc, k), dtype=dt)
            loss = np.empty(nc, dtype=np.float64)
            bad_row = np.empty(nc, dtype=np.int64)
            if self.strategy == "rows":
                g = np.empty((nc, k, n), dtype=dt)
                scratch = np.empty((nc, 5, k), dtype=dt)
                kernel = _loss_grad_rows_serial if self._serial else _loss_grad_rows
                kernel(*args, g, gb, loss, bad_row, scratch, self.P)
            else:
                g = np.empty((nc, n, k), dtype=dt)
                scratch = np.empty((nc, self._gemm_rows() + 1, k), dtype=dt)
                tmp = np.empty((nc, n, k), dtype=dt)
                if self._serial:
                    _loss_grad_gemm_serial(*args, g, gb, loss, bad_row, scratch, tmp, self.P)
                else:
                    with single_threaded_blas():
                        _loss_grad_gemm(*args, g, gb, loss, bad_row, scratch, tmp, self.P)
        hits = bad_row[bad_row >= 0]
        if hits.size:
            raise ValueError(f"the logits X @ W + b are not finite at row {int(hits.min())}")
        grad = g.sum(axis=0)
        grad_coef = grad if self.strategy == "rows" else np.ascontiguousarray(grad.T)
        value = float(loss.sum()) / self.total_weight
        if self.alpha:
            c64 = self.coef.ravel().astype(np.float64)
            value += 0.5 * self.alpha * float(np.dot(c64, c64))
            grad_coef += dt.type(self.alpha) * self.coef
        grad_b = gb.sum(axis=0) if self.intercept is not None else None
        return value, grad_coef, grad_b

    def matvec(self, V, c=None):
        """H (V, c) in coef layout: returns (HV (k, n), Hc (k,) or None).

        ``c`` is the intercept part of the direction (None: 0); Hc is None
        when the model has no intercept (and then c must be None).
        """
        X = self.X
        m, n = X.shape
        k = self.n_classes
        dt = X.dtype
        if c is not None and self.intercept is None:
            raise ValueError("an intercept direction c for a model without intercept")
        V = np.ascontiguousarray(V, dtype=dt)
        cv = np.zeros(k, dtype=dt) if c is None else np.ascontiguousarray(c, dtype=dt)
        head = (X, self.P, self._sw, self._weighted, self._scale, self._w, self._b)
        with numba_threads(self.n_threads) as n_threads:
            nc = self._n_chunks(n_threads)
            gc = np.empty((nc, k), dtype=dt)
            if self.strategy == "rows":
                G = np.empty((nc, k, n), dtype=dt)
                args = (*head, V, cv, G, gc, np.empty((nc, 9, k), dtype=dt))
                if self._serial:
                    _hessp_rows_chunk(0, *args)
                else:
                    _hessp_rows(*args)
            else:
                G = np.empty((nc, n, k), dtype=dt)
                args = (*head, np.ascontiguousarray(V.T), cv, G, gc,
                        np.empty((nc, 2 * self._gemm_rows() + 1, k), dtype=dt),
                        np.empty((nc, n, k), dtype=dt))
                if self._serial:
                    _hessp_gemm_chunk(0, *args)
                else:
                    with single_threaded_blas():
                        _hessp_gemm(*args)
        HV = G.sum(axis=0)
        if self.strategy == "gemm":
            HV = np.ascontiguousarray(HV.T)
        if self.alpha:
            HV += dt.type(self.alpha) * V
        Hc = gc.sum(axis=0) if self.intercept is not None else None
        return HV, Hc

    def diagonal(self):
        """Return the Hessian's diagonal: (d_coef (k, n), d_intercept (k,) or None).

        Computed on the first call and kept (the arrays returned are that
        copy: do not modify them).
        """
        if self._diag is not None:
            return self._diag
        X = self.X
        m, n = X.shape
        k = self.n_classes
        dt = X.dtype
        head = (X, self.P, self._sw, self._weighted, self._scale, self._w, self._b)
        with numba_threads(self.n_threads) as n_threads:
            nc = self._n_chunks(n_threads)
            db = np.empty((nc, k), dtype=dt)
            if self.strategy == "rows":
                D = np.empty((nc, k, n), dtype=dt)
                args = (*head, D, db, np.empty((nc, 5, k), dtype=dt),
                        np.empty((nc, 4, n), dtype=dt))
                if self._serial:
                    _hess_diag_rows_chunk(0, *args)
                else:
                    _hess_diag_rows(*args)
            else:
                R = self._gemm_rows()
                D = np.empty((nc, n, k), dtype=dt)
                args = (*head, D, db, np.empty((nc, R + 1, k), dtype=dt),
                        np.empty((nc, R, n), dtype=dt), np.empty((nc, n, k), dtype=dt))
                if self._serial:
                    _hess_diag_gemm_chunk(0, *args)
                else:
                    with single_threaded_blas():
                        _hess_diag_gemm(*args)
        d = D.sum(axis=0)
        if self.strategy == "gemm":
            d = np.ascontiguousarray(d.T)
        d += dt.type(self.alpha)
        self._diag = (d, db.sum(axis=0) if self.intercept is not None else None)
        return self._diag
