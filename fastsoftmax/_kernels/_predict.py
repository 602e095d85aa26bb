"""Prediction: the arg-max class of every row without building the logits.

Rows go through BLAS GEMM in blocks of R rows into a per-chunk (R, k)
scratch buffer, so predicting m rows allocates only the (m,) answer and a
few blocks, never the (m, k) logits. BLAS must be limited to one thread by
the caller: the parallelism is over row chunks.
"""

import numpy as np
from numba import njit, prange

from ._config import PJIT
from ._common import _chunk


@njit(**PJIT)
def _predict_labels(X, W, b, out, scratch):
    """out[i] = argmax_j (X[i] @ W + b)_j, ties to the lowest j."""
    m = X.shape[0]
    k = W.shape[1]
    n_chunks = scratch.shape[0]
    R = scratch.shape[1]
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        for r0 in range(start, stop, R):
            rr = min(R, stop - r0)
            Zb = scratch[c, :rr]
            np.dot(X[r0:r0 + rr], W, Zb)
            for q in range(rr):
                best = 0
                top = Zb[q, 0] + b[0]
                for j in range(1, k):
                    v = Zb[q, j] + b[j]
                    if v > top:
                        top = v
                        best = j
                out[r0 + q] = best
