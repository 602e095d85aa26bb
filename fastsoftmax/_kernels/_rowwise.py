"""Row-wise softmax, log-softmax and logsumexp kernels.

Every kernel works on a C-contiguous 2-D array ``Z`` of shape (m, k), one
row at a time, in parallel over row chunks. Each subtracts the row maximum
before exponentiating (softmax is invariant under adding a constant to a
row), so the largest term is exp(0) = 1, the row sum is at least 1 and
nothing overflows. ``bad_row`` (OUT) receives, per chunk of rows, the first
offending row index or -1, and ``bad_code`` (OUT) its status code
(:mod:`._common`).
"""

import numpy as np
from numba import njit, prange

from ._common import ALL_NEGINF, OK, _chunk, _exp_shifted, _row_max
from ._config import PJIT


@njit(**PJIT)
def _check_logits(Z, allow_all_neginf, bad_row, bad_code):
    """Scan Z without writing anything; report the first bad row per chunk."""
    m = Z.shape[0]
    n_chunks = bad_row.shape[0]
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        bad_row[c] = -1
        bad_code[c] = OK
        for i in range(start, stop):
            _, status = _row_max(Z[i])
            if status != OK and not (status == ALL_NEGINF and allow_all_neginf):
                bad_row[c] = i
                bad_code[c] = status
                break


@njit(**PJIT)
def _softmax(Z, out, bad_row, bad_code):
    """out[i] = softmax(Z[i]); stops a chunk at its first bad row."""
    m, k = Z.shape
    n_chunks = bad_row.shape[0]
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        bad_row[c] = -1
        bad_code[c] = OK
        # One scratch row per chunk for the vector exp's 2^n factors.
        sc = np.empty(k, dtype=Z.dtype)
        for i in range(start, stop):
            z = Z[i]
            o = out[i]
            mx, status = _row_max(z)
            if status != OK:
                bad_row[c] = i
                bad_code[c] = status
                break
            s = _exp_shifted(z, mx, o, sc)
            # s >= 1 because the maximum contributes exp(0) = 1.
            inv = z.dtype.type(1) / s
            for j in range(k):
                o[j] *= inv


@njit(**PJIT)
def _log_softmax(Z, out, bad_row, bad_code):
    """out[i] = Z[i] - logsumexp(Z[i]); -inf entries stay -inf."""
    m, k = Z.shape
    n_chunks = bad_row.shape[0]
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        bad_row[c] = -1
        bad_code[c] = OK
        # Scratch rows per chunk: the exp terms (out may alias Z) and the
        # vector exp's 2^n factors.
        ex = np.empty(k, dtype=Z.dtype)
        sc = np.empty(k, dtype=Z.dtype)
        for i in range(start, stop):
            z = Z[i]
            o = out[i]
            mx, status = _row_max(z)
            if status != OK:
                bad_row[c] = i
                bad_code[c] = status
                break
            s = _exp_shifted(z, mx, ex, sc)
            # Store z - max first and subtract log(s) in a second pass:
            # z - (max + log(s)) would round max + log(s) at the magnitude
            # of max and then cancel, losing the relative accuracy of
            # log p ~ 0 (the likeliest classes). With "reassoc" an
            # expression (z - max) - log(s) may be regrouped into exactly
            # that, so the split goes through memory.
            for j in range(k):
                o[j] = z[j] - mx
            ls = np.log(s)
            for j in range(k):
                o[j] -= ls


@njit(**PJIT)
def _logsumexp(Z, out, bad_row, bad_code):
    """out[i] = logsumexp(Z[i]); an all -inf row gives -inf (log of 0)."""
    m, k = Z.shape
    n_chunks = bad_row.shape[0]
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        bad_row[c] = -1
        bad_code[c] = OK
        ex = np.empty(k, dtype=Z.dtype)
        sc = np.empty(k, dtype=Z.dtype)
        for i in range(start, stop):
            z = Z[i]
            mx, status = _row_max(z)
            if status == ALL_NEGINF:
                out[i] = mx
                continue
            if status != OK:
                bad_row[c] = i
                bad_code[c] = status
                break
            s = _exp_shifted(z, mx, ex, sc)
            out[i] = mx + np.log(s)
