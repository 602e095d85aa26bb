"""Prediction kernels: logits, probabilities and log-probabilities in row blocks.

(Labels of dense data need no kernel: one BLAS product per block of rows
and an arg-max, :func:`fastsoftmax._prediction.labels`.)

Rows go through BLAS GEMM in blocks of R rows, then each row of the block
is finished while it is still in cache: checked for non-finite logits,
turned into probabilities or log-probabilities in place. BLAS must be
limited to one thread by the caller (the thread policy does so): the
parallelism is over row chunks.
"""

import numpy as np
from numba import njit, prange

from ._blas import _gemm_into
from ._common import _chunk, _exp_shifted, _log_softmax_row, _max_finite, _softmax_row
from ._config import JIT, PJIT
from ._rowvec import bias_max_finite_row, exp_row

# What _scores writes for each row.
LOGITS = 0
PROBA = 1
LOG_PROBA = 2

# Rows per GEMM block at most (the block of logits stays in L1/L2 while it
# is finished); fewer for fewer rows, so that a batch still has about
# BLOCKS blocks to share among the threads, but never fewer than
# MIN_BLOCK_ROWS (one BLAS call per block).
BLOCK_ROWS = 256
BLOCKS = 64
MIN_BLOCK_ROWS = 16


@njit(inline="always", **JIT)
def _bias_max_chain(z, b):
    """z[j] += b[j]; returns (max of z, every entry finite) by ``_common._max_finite``."""
    for j in range(z.shape[0]):
        z[j] += b[j]
    return _max_finite(z)


@njit(inline="always", **JIT)
def _finish(z, b, mode, ex, bias_max, row_exp):
    """Row z of logits without the bias -> logits, softmax or log-softmax (``mode``).

    Returns False, z partly written, where a logit is not finite.
    SCRATCH ex (k,). ``bias_max`` and ``row_exp`` are compiled functions:
    :func:`_bias_max_chain` and ``_common._exp_shifted`` in :func:`_scores`,
    the explicit vectors of :mod:`._rowvec` (``bias_max_finite_row``,
    ``exp_row``) in :func:`_scores_lanes`.
    """
    mx, fin = bias_max(z, b)
    if fin:
        if mode == PROBA:
            _softmax_row(z, mx, z, row_exp)
        elif mode == LOG_PROBA:
            _log_softmax_row(z, mx, z, ex, row_exp)
    return fin


@njit(inline="always", **JIT)
def _score_rows(X, W, b, mode, out, bad_row, bias_max, row_exp):
    """Run the body of :func:`_scores` and :func:`_scores_lanes` (rows by :func:`_finish`)."""
    m = X.shape[0]
    k = W.shape[1]
    n_chunks = bad_row.shape[0]
    # Chunks of whole blocks on one grid from row 0, the block size set by m
    # alone: each row goes through the same GEMM block (its first row and
    # size) whatever the chunk count, so a row's answer is the same to the
    # last bit on any number of threads (BLAS may round a row differently at
    # another place in a block).
    block = min(BLOCK_ROWS, max(MIN_BLOCK_ROWS, -(-m // BLOCKS)))
    n_blocks = -(-m // block)
    for c in prange(n_chunks):
        first, last = _chunk(n_blocks, n_chunks, c)
        start, stop = first * block, min(last * block, m)
        bad_row[c] = -1
        ex = np.empty(k, dtype=out.dtype)
        for r0 in range(start, stop, block):
            rr = min(block, stop - r0)
            Zb = out[r0:r0 + rr]
            _gemm_into(X[r0:r0 + rr], W, Zb, 0.0)
            failed = False
            for q in range(rr):
                if not _finish(Zb[q], b, mode, ex, bias_max, row_exp):
                    bad_row[c] = r0 + q
                    failed = True
                    break
            if failed:
                break


@njit(**PJIT)
def _scores(X, W, b, mode, out, bad_row):
    """out[i] = logits, softmax or log-softmax (``mode``) of X[i] @ W + b.

    IN: X (m, n), W (n, k), b (k,) C-contiguous, mode (LOGITS, PROBA or
    LOG_PROBA). OUT: out (m, k); bad_row (n_chunks,) the first row of each
    chunk whose logits are not finite (X @ W overflowed), else -1; that
    chunk's rows from there on are left unfinished.

    For rows of fewer than ``_common.LANES_FROM`` classes; longer ones go
    to :func:`_scores_lanes`. Two kernels, each compiled when first used:
    one with both row paths made a first ``predict_proba`` compile 0.4-0.6 s
    longer (measured).
    """
    _score_rows(X, W, b, mode, out, bad_row, _bias_max_chain, _exp_shifted)


@njit(**PJIT)
def _scores_lanes(X, W, b, mode, out, bad_row):
    """:func:`_scores` for rows of at least ``_common.LANES_FROM`` classes."""
    _score_rows(X, W, b, mode, out, bad_row, bias_max_finite_row, exp_row)
