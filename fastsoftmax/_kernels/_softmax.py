"""Row-wise softmax, log-softmax and logsumexp kernels.

Every kernel works on a C-contiguous 2-D array ``Z`` of shape (m, k), one
row at a time, in parallel over rows. Each subtracts the row maximum before
exponentiating (softmax is invariant under adding a constant to a row), so
the largest term is exp(0) = 1, the row sum is at least 1 and nothing
overflows.

Status codes returned by the kernels (and interpreted by the edge):
``OK``; ``NAN`` a row holds NaN; ``POSINF`` a row holds +inf (the shift by
the row maximum would give inf - inf); ``ALL_NEGINF`` a row is entirely
-inf, so no entry can carry probability. ``bad_row`` receives, per chunk of
rows, the first offending row index, or -1.
"""

import numpy as np
from numba import njit, prange

from ._config import JIT, PJIT

OK = 0
NAN = 1
POSINF = 2
ALL_NEGINF = 3


@njit(inline="always", **JIT)
def _chunk(m, n_chunks, c):
    """Bounds [start, stop) of the c-th of n_chunks near-equal row ranges."""
    # prange indices can be typed unsigned; mixing uint64 with int64 would
    # promote the bounds to float64, so everything is made int64 first.
    c = np.int64(c)
    q, r = divmod(np.int64(m), np.int64(n_chunks))
    start = c * q + min(c, r)
    return start, start + q + (1 if c < r else 0)


@njit(inline="always", **JIT)
def _row_max(z):
    """Row maximum and a status code; one read of the row."""
    mx = -np.inf
    status = OK
    for j in range(z.shape[0]):
        v = z[j]
        if v != v:
            return mx, NAN
        if v > mx:
            mx = v
    if mx == np.inf:
        status = POSINF
    elif mx == -np.inf:
        status = ALL_NEGINF
    return mx, status


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
        for i in range(start, stop):
            z = Z[i]
            o = out[i]
            mx, status = _row_max(z)
            if status != OK:
                bad_row[c] = i
                bad_code[c] = status
                break
            s = z.dtype.type(0)
            for j in range(k):
                e = np.exp(z[j] - mx)
                o[j] = e
                s += e
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
        for i in range(start, stop):
            z = Z[i]
            o = out[i]
            mx, status = _row_max(z)
            if status != OK:
                bad_row[c] = i
                bad_code[c] = status
                break
            # Store z - max first and subtract log(s) in a second pass:
            # z - (max + log(s)) would round max + log(s) at the magnitude
            # of max and then cancel, losing the relative accuracy of
            # log p ~ 0 (the likeliest classes). With "reassoc" an
            # expression (z - max) - log(s) may be regrouped into exactly
            # that, so the split goes through memory.
            s = z.dtype.type(0)
            for j in range(k):
                t = z[j] - mx
                o[j] = t
                s += np.exp(t)
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
            s = z.dtype.type(0)
            for j in range(k):
                s += np.exp(z[j] - mx)
            out[i] = mx + np.log(s)
