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

from ._common import (
    ALL_NEGINF,
    OK,
    _chunk,
    _exp_shifted,
    _log_softmax_row,
    _row_max,
    _softmax_row,
)
from ._config import JIT, PJIT
from ._rowvec import exp_row, max_finite_row


@njit(**PJIT)
def _check_logits(Z, allow_all_neginf, bad_row, bad_code):
    """Scan Z without writing anything; report the first bad row per chunk.

    IN: Z (m, k), allow_all_neginf. OUT: bad_row, bad_code (n_chunks,).
    """
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


@njit(inline="always", **JIT)
def _row_max_vector(z):
    """``_common._row_max`` of a row of at least ``_common.LANES_FROM`` entries.

    ``_rowvec.max_finite_row`` first; a row with any NaN or infinite entry
    (a -inf logit is a legitimate zero probability) is then classified by
    ``_row_max`` itself. (A count of NaN entries before the maximum, as this
    function once did, made the float32 softmax that follows it run at half
    speed on rows of 100 and 1000 classes, measured.)
    """
    mx, finite = max_finite_row(z)
    if finite:
        return mx, OK
    # Without NaN, mx is the row's maximum whatever its infinities.
    return mx, _row_max(z)[1]


# What _rowwise computes for each row.
SOFTMAX = 0
LOG_SOFTMAX = 1
LOGSUMEXP = 2


@njit(inline="always", **JIT)
def _rows(Z, mode, out, bad_row, bad_code, row_max, row_exp):
    """Run the body of :func:`_rowwise` and :func:`_rowwise_lanes`.

    ``row_max`` and ``row_exp`` are compiled functions: a row's maximum and
    status (``_common._row_max``, or :func:`_row_max_vector`), and its
    shifted exp and sum (``_common._exp_shifted``, or ``_rowvec.exp_row``).
    """
    m, k = Z.shape
    n_chunks = bad_row.shape[0]
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        bad_row[c] = -1
        bad_code[c] = OK
        # A scratch row per chunk: the exp terms (out may alias Z).
        ex = np.empty(k, dtype=Z.dtype)
        for i in range(start, stop):
            z = Z[i]
            mx, status = row_max(z)
            if mode == LOGSUMEXP and status == ALL_NEGINF:
                out[i, 0] = mx
                continue
            if status != OK:
                bad_row[c] = i
                bad_code[c] = status
                break
            if mode == SOFTMAX:
                _softmax_row(z, mx, out[i], row_exp)
            elif mode == LOG_SOFTMAX:
                _log_softmax_row(z, mx, out[i], ex, row_exp)
            else:
                out[i, 0] = mx + np.log(row_exp(z, mx, ex))


@njit(**PJIT)
def _rowwise(Z, mode, out, bad_row, bad_code):
    """out[i] = softmax, log-softmax or logsumexp (``mode``) of Z[i].

    IN: Z (m, k), mode. OUT: out (m, k) for SOFTMAX and LOG_SOFTMAX (may be
    Z itself), (m, 1) for LOGSUMEXP; bad_row, bad_code (n_chunks,). A chunk
    stops at its first bad row. For LOGSUMEXP an all -inf row is not bad:
    its logsumexp is -inf (log of 0); -inf entries elsewhere give
    probability 0 and log-probability -inf.

    For rows shorter than ``_common.LANES_FROM``; longer ones go to
    :func:`_rowwise_lanes`, the same kernel with the row maximum in eight
    chains. Two kernels rather than a choice row by row: both row maxima in
    one loop made float64 softmax on 3 and 10 classes 6-9 % slower, and
    both loops in one kernel tripled its cold compile (4.6 -> 14.3 s,
    measured); each is compiled only when first used.
    """
    _rows(Z, mode, out, bad_row, bad_code, _row_max, _exp_shifted)


@njit(**PJIT)
def _rowwise_lanes(Z, mode, out, bad_row, bad_code):
    """:func:`_rowwise` for rows of at least ``_common.LANES_FROM`` entries.

    Their maximum and exp in the explicit vectors of :mod:`._rowvec`.
    """
    _rows(Z, mode, out, bad_row, bad_code, _row_max_vector, exp_row)
