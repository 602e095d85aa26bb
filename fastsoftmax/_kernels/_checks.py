"""Validation scans, run once at the edge before any kernel writes output.

Each scan is parallel over row chunks and reports, per chunk, the first
offending row (or -1), so that the error message can name it; the edge takes
the smallest. They read their input once and allocate nothing.
"""

import numpy as np
from numba import njit, prange

from ._common import _chunk
from ._config import PJIT_STRICT, STRICT


@njit(**STRICT)
def _first_bad_label(labels, k):
    """Return the first i with labels[i] outside 0..k-1, else -1 (on the calling thread).

    IN: labels (m,) int64, k. One compiled loop in place of a NumPy
    reduction: after an idle pause NumPy's reduction machinery took
    tens of microseconds of a small call (BENCHMARKS.md, "Forty-ninth
    session").
    """
    m = labels.shape[0]
    # As unsigned, a negative label is above every class index too; the
    # failures are counted (an integer reduction, which LLVM vectorises;
    # a loop that leaves at the first would not be).
    top = np.uint64(k)
    nbad = 0
    for i in range(m):
        nbad += np.uint64(labels[i]) >= top
    if nbad == 0:
        return -1
    for i in range(m):
        if np.uint64(labels[i]) >= top:
            return i
    return -1


@njit(**PJIT_STRICT)
def _first_nonfinite_row(A, bad_row):
    """bad_row[c] = first row of chunk c holding NaN or +-inf, else -1.

    IN: A (m, n). OUT: bad_row (n_chunks,).
    """
    m = A.shape[0]
    n_chunks = bad_row.shape[0]
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        bad_row[c] = -1
        big = np.finfo(A.dtype).max
        for i in range(start, stop):
            row = A[i]
            # |x| <= max is false exactly for NaN and +-inf. Counting the
            # failures is an integer reduction, which LLVM vectorises without
            # fast-math (a float sum of x * 0 stays a serial chain, several
            # times slower).
            nbad = 0
            for j in range(row.shape[0]):
                nbad += not (abs(row[j]) <= big)
            if nbad:
                bad_row[c] = i
                break


@njit(**PJIT_STRICT)
def _first_bad_distribution_row(Y, tol, bad_row):
    """Find, per chunk, the first row of Y that is not a probability vector.

    IN: Y (m, k), tol. OUT: bad_row (n_chunks,).

    bad_row[c] receives the first row of chunk c with an entry negative or
    not finite, or a sum further than tol from 1; -1 if there is none.
    """
    m, k = Y.shape
    n_chunks = bad_row.shape[0]
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        bad_row[c] = -1
        for i in range(start, stop):
            s = 0.0
            ok = True
            for j in range(k):
                v = Y[i, j]
                if not (v >= 0 and v <= 1):
                    ok = False
                    break
                s += v
            if not ok or abs(s - 1.0) > tol:
                bad_row[c] = i
                break
