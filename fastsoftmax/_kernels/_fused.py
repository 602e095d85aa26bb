"""The fused softmax cross-entropy loss and gradient.

For a block of rows the kernels compute Z = X W + b, the row maximum, exp,
the row sums, the loss terms, E = softmax(Z) - Y in place of Z, and then
accumulate Xᵀ E, so each row of X is read from memory once per gradient and
no (m, k) array is ever allocated: the scratch space is a few rows per chunk.

Two strategies share the per-row arithmetic (:func:`_error4`, four rows at a time):

* :func:`_loss_grad_rows` -- small k. Weights are stored transposed, (k, n),
  so the inner loops run along contiguous features and vectorise. Blocks of
  4 rows x 3 classes are processed per pass over the features (register
  blocking): each loaded weight serves four rows, each loaded row several
  classes. The forward tiles are those of :mod:`._ahead` (LLVM IR,
  prefetching the rows ahead where X is read ahead) and the backward
  tiles those of :mod:`._backward` (LLVM IR), in both dtypes: both block
  4 rows x 5 classes on AVX-512 hosts, 4 x 3 elsewhere.
* :func:`_loss_grad_gemm` -- large k. Row blocks of ``R`` rows go through
  BLAS GEMM (``np.dot`` with an output buffer for the logits; the
  backward product adds into the chunk's sum, ``_blas._gemm_into``), sized
  by the caller so that a block stays in cache between the forward and the
  backward product (``_dense.gemm_block_rows``). BLAS must run
  single-threaded here: the parallelism is over row chunks.

Both write per-chunk partial sums (a leading chunk axis on every
accumulator: no shared array is written from inside ``prange``); the caller
reduces them and adds the L2 penalty in one pass (:func:`_sum_chunks`, in
parallel once they are large). For few rows over a large n k,
:func:`_loss_grad_gemm_split` (BLAS's products) and
:func:`_loss_grad_tiles_split` (the tiles') split the backward product by
features instead and write the one gradient. Each
parallel kernel is a ``prange`` over chunks calling one compiled chunk
function (:func:`_rows_chunk`, :func:`_gemm_chunk`), which the caller
also calls directly for a problem run as one chunk, with no parallel region
(``_launch.run_one_chunk``): the
body is compiled once, not once per variant, and the parallel region stays
small (Numba's parallel lowering is the slow part of a cold compile). The
chunk index is passed as int64, the type a direct call gives it, so that the
chunk function has one specialisation (a ``prange`` index is unsigned).

Targets: labels are either integer class indices ``y`` (m,) with ``soft``
False, or a matrix of class probabilities ``Y`` (m, k) with ``soft`` True;
the unused one is passed as an empty array so that each dtype compiles to a
single specialisation. Sample weights likewise (``weighted``).

Status: ``bad_row[c]`` receives the first row of chunk c whose logits are
not finite (X W overflowed), or -1.

Probabilities: the last argument ``P`` is an (m, k) array that receives
softmax(X W + b), for the Hessian-vector products of :mod:`._hessp` (the
"cached" mode: a truncated-Newton step then reads X once per product
instead of recomputing X W), or an empty (0, k) array when they are not
wanted. Always a 2-D array of X's dtype, so storing or not is a run-time
branch per block of rows, not a second compiled specialisation.
"""

import numpy as np
from numba import njit, prange

from ._ahead import logits_prefetching
from ._backward import accumulate4_ahead
from ._blas import _gemm_into
from ._common import (
    LANES_FROM,
    _ahead_share,
    _chunk,
    _chunk_partials,
    _chunk_partials_set,
    _exp_flat,
    _exp_shifted,
    _max_chain,
    _max_finite,
    _touch,
    _touch_rows,
    _touches,
)
from ._config import JIT, PJIT, VECTOR_BYTES, itemsize
from ._micro import _accumulate1, _eight_rows, _logits1
from ._outer import (
    TILE,
    backward_block,
    backward_features,
    backward_vectors,
    forward_block,
    forward_vectors,
    lanes,
    no_rest,
    pack_block,
    pack_buffer,
    rest_classes,
    rest_rows,
    spare_rows,
)
from ._rowvec import (
    ERROR_PAIR_VECTORS,
    ROW_VECTORS,
    bias_max_finite_row,
    error_pair,
    exp_row,
    scale_add_row,
)
from ._vector import add_scaled_row
from ._width import _wide_vectors_float64, _wide_vectors_marked


@njit(inline="always", **JIT)
def _scale_error(z, s, i, y, Y, sw, soft, weighted, scale, gb):
    """INOUT z: the exp terms of row i, of sum s -> scale * w_i * (z / s - Y_i).

    Also adds the result to gb.

    Returns the row's weight w_i (1 without sample weights).
    """
    k = z.shape[0]
    w = sw[i] if weighted else z.dtype.type(1)
    f = scale * w / s
    for j in range(k):
        z[j] *= f
    if soft:
        g = scale * w
        for j in range(k):
            z[j] -= g * Y[i, j]
    else:
        z[y[i]] -= scale * w
    for j in range(k):
        gb[j] += z[j]
    return w


@njit(inline="always", **JIT)
def _row_error(z, i, y, Y, sw, soft, weighted, scale, gb):
    """Turn the logits z (row i of the data) into its scaled error, in place.

    Returns (w_i * cross-entropy of the row, True), or (0, False) when a
    logit is not finite (z is then left partly written and the caller
    discards everything). The cross-entropy is kept in float64 by the
    callers' sums (a sum over many rows loses too much in float32). The
    error row is also added to ``gb``.

    Row i gets weight w_i = sw[i] (or 1); its error row is
    scale * w_i * (softmax(z_i) - Y_i). The loss term is logsumexp(z_i) -
    <Y_i, z_i>, written as (max - <Y_i, z_i>) + log(sum exp(z - max)) so
    that it never goes through log(p) and stays finite for extreme logits.
    Used row by row by the sparse kernels and per-sample SGD; the dense
    gradient's blocks of rows go through :func:`_error4`, the same
    arithmetic four rows at a time.
    """
    # Row maximum and a finiteness test of every logit (_max_finite): a NaN
    # (inf - inf in X W, or a NaN/inf in X times anything) is invisible to
    # the max, and the vector exp would flush it to 0, so it is caught here.
    # The public loss_and_grad relies on this test instead of pre-scanning
    # X (every entry of X reaches every logit of its row).
    mx, fin = _max_finite(z)
    if not fin:
        return 0.0, False
    return _shifted_error(z, mx, i, y, Y, sw, soft, weighted, scale, gb), True


@njit(inline="always", **JIT)
def _target_logit(z, mx, i, y, Y, soft):
    """<Y_i, z - mx> for the logits z of row i (hard labels: z[y_i] - mx).

    Read before z is overwritten; zero targets are skipped so that a -inf
    logit with zero target contributes nothing (0 * -inf is NaN).
    """
    if soft:
        yz = z.dtype.type(0)
        for j in range(z.shape[0]):
            t = Y[i, j]
            if t != 0:
                yz += t * (z[j] - mx)
        return yz
    return z[y[i]] - mx


@njit(inline="always", **JIT)
def _shifted_error(z, mx, i, y, Y, sw, soft, weighted, scale, gb):
    """:func:`_row_error` once the row's maximum mx is known (and every logit finite).

    Returns w_i * the cross-entropy of row i; z becomes its error row.
    """
    yz = _target_logit(z, mx, i, y, Y, soft)
    # Vectorised exp (see _common._exp_shifted).
    s = _exp_shifted(z, mx, z)
    w = _scale_error(z, s, i, y, Y, sw, soft, weighted, scale, gb)
    return w * (np.log(s) - yz)


# Inlined: as a call, passing its arrays cost more than the error itself on
# short rows ((300000, 20, 2): 7.5 ms against 5.9 ms, measured). To keep the
# cold start as it was, the chunk functions use it for their last rows too
# (a block of fewer than four) instead of inlining _row_error a second time.
@njit(inline="always", **JIT)
def _error4(z4, i0, i1, i2, i3, y, Y, sw, soft, weighted, scale, gb):
    """:func:`_row_error` on up to four rows z4 (data rows i0, i1, ...) at once.

    IN/OUT z4 (r, k) C-contiguous, r <= 4: logits in, scaled error rows out
    (the row indices past r are not read). Returns (sum of w_i *
    cross-entropy, -1), or (0, q) where row q is the first whose logits
    are not finite (z4 is then partly written: the caller discards
    everything).

    The same arithmetic as four calls of :func:`_row_error`, reorganised so
    that short rows vectorise: each row is shifted by its maximum first, and
    the exp -- most of the per-row work -- runs once over the 4k contiguous
    entries, where a row of k = 2 or 10 alone is too short for a vector loop.
    Without sample weights the four log terms are one log of the product of
    the row sums: each sum lies in [1, k], so the product cannot overflow.
    """
    r, k = z4.shape
    dt = z4.dtype.type
    rows = (i0, i1, i2, i3)
    loss = 0.0
    for q in range(r):
        z = z4[q]
        i = rows[q]
        mx, fin = _max_finite(z)
        if not fin:
            return 0.0, q
        for j in range(k):
            z[j] -= mx
        # <Y_i, z_i - max_i>; zero targets are skipped (as in _row_error).
        if soft:
            yz = dt(0)
            for j in range(k):
                t = Y[i, j]
                if t != 0:
                    yz += t * z[j]
        else:
            yz = z[y[i]]
        loss -= (sw[i] * yz) if weighted else yz
    _exp_flat(z4.reshape(r * k))
    prod = 1.0
    for q in range(r):
        z = z4[q]
        i = rows[q]
        s = dt(0)
        for j in range(k):
            s += z[j]
        w = _scale_error(z, s, i, y, Y, sw, soft, weighted, scale, gb)
        if weighted:
            loss += w * np.log(s)
        else:
            prod *= s
    return loss + np.log(prod), -1


@njit(inline="always", **JIT)
def _store_proba(Zb, nrows, r0, P):
    """OUT P[r0:r0 + nrows] = softmax(Zb[:nrows]), Zb unchanged (rows of fewer than 32 classes).

    The same max, vector exp and sum as :func:`_row_error`, times 1 / sum
    (as :mod:`._hessp` recomputes them). Longer rows store theirs in
    :func:`_block_error_lanes`' last sweep. A row
    whose logits are not finite is left as garbage (its sum can be 0 or
    NaN): the error pass that follows reports it. A separate sweep rather
    than a store inside :func:`_row_error`: that per-row branch made the
    plain gradient 5-7 % slower on short rows (n = 64, measured), where this
    costs one test per block of rows and, when storing, k more exps per row.
    """
    k = Zb.shape[1]
    one = Zb.dtype.type(1)
    for q in range(nrows):
        z = Zb[q]
        pr = P[r0 + q]
        s = _exp_shifted(z, _max_chain(z), pr)
        if s > 0:
            inv = one / s
            for j in range(k):
                pr[j] *= inv


@njit(inline="always", **JIT)
def _block_error(Zb, nrows, r0, b, y, Y, sw, soft, weighted, scale, gb, mx, s, P):
    """Turn a block's logits into their scaled error rows, four rows at a time.

    IN/OUT Zb[:nrows]: X_b W of data rows r0 ... in, their error rows out
    (:func:`_error4`, after the bias b is added and, where P is not empty,
    softmax stored in P[r0:r0 + nrows] by :func:`_store_proba`). Returns the
    summed loss terms (float64) and -1, or the block-local index of the
    first row with non-finite logits. (``mx`` and ``s``, the scratch of
    :func:`_block_error_lanes`, are not used.)
    """
    k = Zb.shape[1]
    for q in range(nrows):
        for j in range(k):
            Zb[q, j] += b[j]
    if P.shape[0] != 0:
        _store_proba(Zb, nrows, r0, P)
    loss = 0.0
    for q in range(0, nrows, 4):
        i = r0 + q
        part, bad = _error4(Zb[q:min(q + 4, nrows)], i, i + 1, i + 2, i + 3, y, Y, sw, soft,
                            weighted, scale, gb)
        if bad >= 0:
            return loss, q + bad
        loss += part
    return loss, -1


@njit(inline="always", **JIT)
def _block_error_lanes(Zb, nrows, r0, b, y, Y, sw, soft, weighted, scale, gb, mx, s, P):
    """:func:`_block_error` for rows of at least ``_common.LANES_FROM`` classes.

    SCRATCH mx, s: at least nrows entries of Zb's dtype (the rows' maxima
    and sums).

    Three sweeps over the block, each a pass over every row: the bias and
    the maxima (:func:`._rowvec.bias_max_finite_row`), the exps and their
    sums (:func:`._rowvec.exp_row`), the scaling into the error
    (:func:`._rowvec.scale_add_row`, which adds it into ``gb`` too); where
    P is not empty, the rows' softmax, exp times 1 / sum as
    :func:`_store_proba` computes it, is stored before the last sweep,
    without a second exp. Row by
    row, each step waited for the one before it on the same row (the
    maximum's reduction before the exp, the sum's before the division);
    sweep by sweep the rows' steps are independent and overlap. Without
    sample weights the logs of the row sums are one log of their product
    (a product of values in [1, k], taken in float64 and flushed into the
    sum before it could overflow).
    """
    dt = Zb.dtype.type
    for q in range(nrows):
        m, fin = bias_max_finite_row(Zb[q], b)
        if not fin:
            return 0.0, q
        mx[q] = m
    # <Y_i, z_i - max_i> before z is overwritten, weighted.
    loss = 0.0
    k = Zb.shape[1]
    for q in range(nrows):
        i = r0 + q
        yz = _target_logit(Zb[q], mx[q], i, y, Y, soft)
        loss -= (sw[i] * yz) if weighted else yz
    for q in range(nrows):
        s[q] = exp_row(Zb[q], mx[q], Zb[q])
    if P.shape[0] != 0:
        one = dt(1)
        for q in range(nrows):
            z = Zb[q]
            pr = P[r0 + q]
            inv = one / s[q]
            for j in range(k):
                pr[j] = z[j] * inv
    prod = 1.0
    for q in range(nrows):
        i = r0 + q
        z = Zb[q]
        if soft:
            w = _scale_error(z, s[q], i, y, Y, sw, soft, weighted, scale, gb)
        else:
            w = sw[i] if weighted else dt(1)
            scale_add_row(z, scale * w / s[q], gb)
            z[y[i]] -= scale * w
            gb[y[i]] -= scale * w
        if weighted:
            loss += w * np.log(s[q])
        else:
            prod *= s[q]
            if prod > 1e250:
                loss += np.log(prod)
                prod = 1.0
    return loss + np.log(prod), -1


@njit(inline="always", **JIT)
def _block_error_pairs(Zb, nrows, r0, b, y, Y, sw, soft, weighted, scale, gb, mx, s, P):
    """:func:`_block_error_lanes` two rows at a time in one pass (AVX-512).

    Rows of at most ``_rowvec.ERROR_PAIR_VECTORS`` vectors of classes (128
    in float32, 64 in float64) with hard labels: each pair of rows by
    :func:`._rowvec.error_pair`, which keeps the rows in registers from
    their load to their store (the bias, maximum, exp, sum, scaling, P and
    the sum into ``gb``); the target's logit read before, its -w scale
    after. Other rows, soft labels and hosts without AVX-512 (16 vector
    registers): :func:`_block_error_lanes`. A row whose logits are not
    finite is found with its pair: the pair's rows are then written and gb
    holds their terms (the caller raises).

    The tiles' whole gradient against the three sweeps (two threads, the
    Zen 5 host; ``benchmarks/gradient_variants.py pairs --rounds 7``):
    float32 0.81-0.96x the time on rows of 20-100 features and 40-128
    classes, 0.96-0.99x on rows of 784-3,000 features (where the error is
    a small part of the pass). In float64 at 33-64 classes and 20-100
    features, 0.82-0.95x (``benchmarks/against_commit.py --dtype float64
    --strategy gemm``, once each row's maximum no longer went through
    scalar maxima; 0.98-1.13x before, when float64 kept the sweeps;
    BENCHMARKS.md, "Sixty-third session").
    """
    k = Zb.shape[1]
    if ROW_VECTORS:  # (pruned before typing on hosts without AVX-512)
        if not soft and k <= ERROR_PAIR_VECTORS * (VECTOR_BYTES // Zb.itemsize):
            return _error_pairs(Zb, nrows, r0, b, y, sw, weighted, scale, gb, P)
    return _block_error_lanes(Zb, nrows, r0, b, y, Y, sw, soft, weighted, scale, gb, mx, s, P)


@njit(inline="always", **JIT)
def _pair_row_end(z, yi, gb, f, w, yz, s, weighted, loss, prod):
    """Finish one row of a pair: the target's -f in z and gb, its loss terms; (loss, prod).

    yz: the target's logit less the row's maximum; s: the row's sum of exps
    (weighted: w log s added to the loss; else s multiplied into prod).
    """
    z[yi] -= f
    gb[yi] -= f
    loss -= w * yz
    if weighted:
        loss += w * np.log(s)
    else:
        prod *= s
    return loss, prod


@njit(inline="always", **JIT)
def _error_pairs(Zb, nrows, r0, b, y, sw, weighted, scale, gb, P):
    """Run :func:`_block_error_pairs`' loop: (loss terms, -1) or (0, the first bad row)."""
    dt = Zb.dtype.type
    store_p = P.shape[0] != 0
    loss = 0.0
    prod = 1.0
    for q in range(0, nrows, 2):
        two = q + 1 < nrows
        q1 = q + 1 if two else q  # an odd last row twice, the second with weight 0
        i0, i1 = r0 + q, r0 + q1
        w0 = sw[i0] if weighted else dt(1)
        w1 = (sw[i1] if weighted else dt(1)) if two else dt(0)
        z0, z1 = Zb[q], Zb[q1]
        y0, y1 = y[i0], y[i1]
        t0, t1 = z0[y0] + b[y0], z1[y1] + b[y1]
        p0 = P[i0] if store_p else z0
        p1 = P[i1] if store_p else z1
        f0, f1 = scale * w0, scale * w1
        m0, s0, fin0, m1, s1, fin1 = error_pair(z0, z1, b, gb, p0, p1, f0, f1, store_p)
        if fin0 == 0:
            return 0.0, q
        if fin1 == 0:
            return 0.0, q1
        loss, prod = _pair_row_end(z0, y0, gb, f0, w0, t0 - m0, s0, weighted, loss, prod)
        if two:
            loss, prod = _pair_row_end(z1, y1, gb, f1, w1, t1 - m1, s1, weighted, loss, prod)
        if prod > 1e250:
            loss += np.log(prod)
            prod = 1.0
    return loss + np.log(prod), -1


@njit(inline="always", **JIT)
def _block_error_t(ZT, r0, y, Y, sw, soft, weighted, scale, gb, mx, s, P):
    """:func:`_block_error` on a block stored transposed: ZT (k, r), one column a row.

    IN/OUT ZT (k, r) C-contiguous: the logits of data rows r0 ... r0 + r - 1
    (column q is row r0 + q) in, their scaled error rows out. SCRATCH mx
    (r,), s (r,). OUT P: rows r0 ... of softmax(Z), or an empty (0, k)
    array. Returns (the summed loss terms (float64), -1) or (0, q)
    with q the block-local index of the first row whose logits are not
    finite (ZT is then partly written).

    The same arithmetic as :func:`_error4` with every step a loop along the
    rows: the maximum of a row is an elementwise max of k vectors, the exp
    runs over the whole block, the row sums are k vector adds. On rows of a
    few classes the row-wise version spends its time in short loops and
    horizontal steps (about 9 cycles an entry at k = 10, measured); here
    every loop is r long.
    """
    k, r = ZT.shape
    dt = ZT.dtype.type
    big = np.finfo(ZT.dtype).max
    for q in range(r):
        mx[q] = ZT[0, q]
    finite = 0
    # np.maximum, not max: Numba's max became a scalar max and a masked
    # store, np.maximum a compare and blend of whole vectors (3-5x faster
    # on a Zen 3 host at k = 3 and 10, BENCHMARKS.md, "Fifty-second
    # session"). Their NaN rules differ; a row with one is reported below
    # before its maximum is used.
    for j in range(k):
        zj = ZT[j]
        for q in range(r):
            v = zj[q]
            mx[q] = np.maximum(mx[q], v)
            finite += abs(v) <= big
    if finite != k * r:
        for q in range(r):
            for j in range(k):
                if not abs(ZT[j, q]) <= big:
                    return 0.0, q
    # <Y_i, z_i - max_i> before ZT is overwritten (zero targets skipped, as
    # in _row_error), weighted.
    loss = 0.0
    for q in range(r):
        i = r0 + q
        if soft:
            yz = dt(0)
            for j in range(k):
                t = Y[i, j]
                if t != 0:
                    yz += t * (ZT[j, q] - mx[q])
        else:
            yz = ZT[y[i], q] - mx[q]
        loss -= (sw[i] * yz) if weighted else yz
    for j in range(k):
        zj = ZT[j]
        for q in range(r):
            zj[q] -= mx[q]
    _exp_flat(ZT.reshape(k * r))
    for q in range(r):
        s[q] = ZT[0, q]
    for j in range(1, k):
        zj = ZT[j]
        for q in range(r):
            s[q] += zj[q]
    if weighted:
        for q in range(r):
            loss += sw[r0 + q] * np.log(s[q])
    else:
        # One log per 32 rows, of the product of their sums: each sum lies
        # in [1, k] and k < 32 here, so the product stays below 32^32.
        for q0 in range(0, r, 32):
            prod = 1.0
            for q in range(q0, min(q0 + 32, r)):
                prod *= s[q]
            loss += np.log(prod)
    if P.shape[0] != 0:
        for q in range(r):
            mx[q] = dt(1) / s[q]
        for q in range(r):
            pr = P[r0 + q]
            for j in range(k):
                pr[j] = ZT[j, q] * mx[q]
    # The error: scale * w_i * (p_i - Y_i), and its column sums into gb.
    for q in range(r):
        s[q] = (scale * sw[r0 + q] if weighted else scale) / s[q]
    for j in range(k):
        zj = ZT[j]
        for q in range(r):
            zj[q] *= s[q]
    for q in range(r):
        i = r0 + q
        g = scale * sw[i] if weighted else scale
        if soft:
            for j in range(k):
                ZT[j, q] -= g * Y[i, j]
        else:
            ZT[y[i], q] -= g
    for j in range(k):
        zj = ZT[j]
        t = dt(0)
        for q in range(r):
            t += zj[q]
        gb[j] += t
    return loss, -1


@njit(inline="always", **JIT)
def _chunk_start(c, m, gW, gb, bad_row):
    """Start chunk c of both strategies: its rows [start, stop), its partial sums.

    Returns (start, stop, gW[c], gb[c]) with the two sums zeroed, and sets
    bad_row[c] = -1.
    """
    start, stop, G, gbc = _chunk_partials(c, m, gW, gb)
    bad_row[c] = -1
    return start, stop, G, gbc


@njit(inline="always", **JIT)
def _chunk_start_set(c, m, gW, gb, bad_row):
    """:func:`_chunk_start` for the GEMM strategy, whose first block's product sets gW[c].

    (:func:`._common._chunk_partials_set`: no pass zeroing a partial sum of
    n k entries before the first block writes it.)
    """
    start, stop, G, gbc = _chunk_partials_set(c, m, gW, gb)
    bad_row[c] = -1
    return start, stop, G, gbc


# The float32 rows kernel's blocks with their error on transposed logits
# (_block_error_t): ERROR_T_ROWS rows each, for up to ERROR_T_MAX_K
# classes. Against the error four rows at a time (BENCHMARKS.md,
# "Fourteenth session"): on one thread (ad hoc) 0.51-0.67x the time at
# n = 48 ... 128 and k = 2 ... 5, 0.75-0.86x at k = 10 and 20, 0.84-0.85x
# at (256, 7) and (384, 10), 0.96-1.02x at n = 784 and 3000, blocks of 64
# rows a little faster than 32 or 16; whole passes on two threads
# (``versions.py``) 0.82-0.93x at n = 48 ... 256, 0.99-1.01x from
# n = 384. In float64 the same passes took 0.98-1.12x the time (1.09-1.12x
# at n = 128, k = 5 and 10): float64 keeps the error four rows at a time
# (its kernels compile without the blocks: :func:`rows_blocks`). Up to
# ERROR_T_MAX_K = LANES_FROM - 1 classes: every class count the rows kernels
# run below the GEMM kernels' vector sweeps. While the blocks stopped at 24
# classes, rows of 25-31 classes went four at a time; in the blocks their
# gradient took 0.61-0.81x that time at 50-300 features and 25-30 classes,
# 0.95x at (4000, 1500, 30), on two threads (BENCHMARKS.md, "Thirty-second
# session").
ERROR_T_ROWS = 64
ERROR_T_MAX_K = LANES_FROM - 1
# ... and rows of at most ERROR_T_MAX_FEATURES features. A block of 64 longer
# rows (over 256 KB) is read twice from L2, once by the logits and once by
# the gradient's accumulation; the four- and eight-row loop reads each row
# twice while it is in L1. Where X streams from memory at two classes the
# blocks took 1.04-1.28x the loop's time (1,100-3,072 features), at 3 to 24
# classes 0.97-1.05x, at 784 features 0.96x (k = 2) and 0.92x (k = 10)
# (BENCHMARKS.md, "Twenty-fifth session").
ERROR_T_MAX_FEATURES = 1024
# Longer rows go in the blocks from PANEL_MIN_K classes on, their gradient's
# accumulation in panels of features: for each panel, every four rows of
# the block in turn, so that the panel of G (PANEL_G_BYTES) and the rows'
# stretches stay in L1 (over whole rows, G's k rows of n features and four
# rows of X outgrow L1 past about a thousand features and come from L2 at
# every step). Each entry of G gets the same additions in the same order
# as over whole rows. The 4 x 5 tiles alone on a block in L2 (ad hoc):
# 0.80x the time at 3,000 features, 0.84x at 1,536, the same at 784; whole
# gradients 0.82-0.94x at 1,100-6,000 features and 8-24 classes, but
# 1.09-1.25x at 3 and 5 classes, where the blocks' second read of X from
# L2 weighs more than the tiles' gain (BENCHMARKS.md, "Twenty-eighth
# session").
PANEL_G_BYTES = 1 << 14
PANEL_MIN_K = 8


@njit(inline="always", **JIT)
def _panel_features(k):
    """Features a panel of the wide blocks' backward sweep: k float32 rows in PANEL_G_BYTES."""
    return max(16, PANEL_G_BYTES // (4 * k) // 16 * 16)


def rows_blocks(dtype) -> bool | None:
    """Return the rows kernels' ``blocks`` argument for X of this dtype: True in float32, else None.

    The float32 blocks of ERROR_T_ROWS rows (:func:`_rows_chunk`) are
    compiled only into the specialisation whose ``blocks`` is not None:
    Numba prunes a branch on ``blocks is None`` before typing, where a
    branch on the dtype itself (a constant only from typing on) is typed,
    inlined and lowered in every dtype (BENCHMARKS.md, "Twenty-third
    session": the float64 rows kernel compiled in about 16 s instead of 25).
    """
    return True if np.dtype(dtype) == np.float32 else None


def rows_scratch_length(k: int) -> int:
    """Entries of one chunk's scratch for the rows kernel: z8 (8, k), Zᵀ (k, R), two of R, one."""
    return (8 + ERROR_T_ROWS) * k + 2 * ERROR_T_ROWS + 1


@njit(**JIT)
def _rows_chunk(c, X, y, Y, sw, soft, weighted, scale, Wt, b,
                gWt, gb, loss, bad_row, scratch, P, width, blocks):
    """Chunk c of the small-k strategy: the parallel kernel's body.

    Also called directly (c = 0 of one chunk) for a problem run on the
    calling thread (``_launch.run_one_chunk``).

    Float32 rows of up to ERROR_T_MAX_K classes over at most
    ERROR_T_MAX_FEATURES features (longer ones from PANEL_MIN_K classes)
    go ERROR_T_ROWS at a
    time: their logits by the register tiles below, stored transposed (one
    column a row), their softmax error by :func:`_block_error_t` (every
    loop along the block's rows, where a row of a few classes alone is too
    short for a vector loop), then the gradient from the block's rows,
    still in L1/L2 (longer rows in panels of features). The rest of the
    chunk (and every row in float64, of more classes, or of more features
    and fewer classes) goes four rows at a time through
    logits, softmax error and gradient, so each block of X (4 x n) is read
    from memory once and is still in L1 for the backward sweep. The
    logits come from the tiles of :mod:`._ahead` and the gradient from
    those of :mod:`._backward` on every host (4 x 5 blocks on
    AVX-512 hosts, 4 x 3 elsewhere), the logits eight rows at
    a time in float32 where ``_micro.EIGHT_ROWS_N`` and
    ``_micro.EIGHT_ROWS_MAX_K`` say; they write a block's transposed logits
    straight into Zᵀ and, where X is read ahead, prefetch the rows
    ``_touch_rows`` ahead. ``width``:
    ``_width.FLOAT64_512`` (512-bit vectors in float64 too, for long rows)
    or ``_width.DEFAULT_WIDTH``;
    each is its own compiled specialisation. ``blocks``: :func:`rows_blocks`
    (None compiles the kernel without the float32 blocks). scratch[c]: see
    :func:`_loss_grad_rows`.
    """
    _wide_vectors_marked(width, X)
    start, stop, G, gbc = _chunk_start(c, X.shape[0], gWt, gb, bad_row)
    k = Wt.shape[0]
    R = ERROR_T_ROWS
    flat = scratch[c]
    z8 = flat[:8 * k].reshape(8, k)
    ZT = flat[8 * k:(8 + R) * k].reshape(k, R)
    mx = flat[(8 + R) * k:(8 + R) * k + R]
    s = flat[(8 + R) * k + R:(8 + R) * k + 2 * R]
    acc = 0.0
    store = P.shape[0] != 0
    touch = _touches(X)
    ahead_rows = _touch_rows(X)
    # What the reads ahead (_common._touch) sum up, kept in memory (their
    # loads stay), not in a register through the whole chunk.
    touched = flat[(8 + R) * k + 2 * R:(8 + R) * k + 2 * R + 1]
    touched[0] = 0
    # When X is read ahead, the tiles prefetch the rows ahead_rows ahead:
    # only the chunk's first rows are read by _touch.
    eight = _eight_rows(X, k)
    if touch:
        touched[0] += _touch(X, start, min(stop, start + ahead_rows))
    pf_rows = ahead_rows if touch else 0
    i = start
    # Numba prunes this branch before typing where ``blocks`` is None (see
    # rows_blocks): typed and compiled, it was half of the float64 kernel's
    # compile time, though that kernel never runs it.
    if blocks is not None:
        n = X.shape[1]
        panel = n if n <= ERROR_T_MAX_FEATURES else _panel_features(k)
        while (itemsize(X) == 4 and k <= ERROR_T_MAX_K
               and (n <= ERROR_T_MAX_FEATURES or k >= PANEL_MIN_K) and i + R <= stop):
            h = 0
            nb = 8 if eight else 4
            # The block R rows ahead is prefetched while this one is worked
            # on: its first half by the forward tiles, its second half by
            # the backward tiles (all by the forward tiles where the
            # gradient goes in panels), so that memory is busy through
            # both sweeps, not only the first.
            nxt = i + pf_rows
            fw = R if panel < n else R // 2
            while h < R:
                first, rows = _ahead_share(nxt, fw * h // R, fw * (h + nb) // R, stop, pf_rows)
                logits_prefetching(X, i + h, nb, Wt, b, ZT.T, h, first, rows)
                h += nb
            part, bad = _block_error_t(ZT, i, y, Y, sw, soft, weighted, scale, gbc, mx, s, P)
            if bad >= 0:
                bad_row[c] = i + bad
                loss[c] = acc
                return
            acc += part
            # Each four rows' errors read straight from Zᵀ (a transposed
            # view), not copied out first: the gradient took 0.89-0.96x
            # the time at n = 20 ... 256 (BENCHMARKS.md, "Twenty-seventh session").
            for f0 in range(0, n, panel):
                f1 = min(n, f0 + panel)
                for h in range(0, R, 4):
                    r0 = i + h
                    first, rows = _ahead_share(nxt, fw + (R - fw) * h // R,
                                               fw + (R - fw) * (h + 4) // R, stop, pf_rows)
                    accumulate4_ahead(X, r0, r0 + 1, r0 + 2, r0 + 3, ZT.T, h, G, f0, f1,
                                      first, rows)
            i += R
    while i + 4 <= stop:
        nb = 8 if eight and i + 8 <= stop else 4
        # The rows pf_rows ahead prefetched as in the blocks above: half by
        # the forward tiles, half by the backward tiles.
        nxt = i + pf_rows
        half = nb // 2
        first, rows = _ahead_share(nxt, 0, half, stop, pf_rows)
        logits_prefetching(X, i, nb, Wt, b, z8, 0, first, rows)
        if store:
            _store_proba(z8, nb, i, P)
        for h in range(0, nb, 4):
            z4 = z8[h:h + 4]
            r0 = i + h
            part, bad = _error4(z4, r0, r0 + 1, r0 + 2, r0 + 3, y, Y, sw, soft, weighted,
                                scale, gbc)
            if bad >= 0:
                bad_row[c] = r0 + bad
                loss[c] = acc
                return
            acc += part
            first, rows = _ahead_share(nxt, half + h // 2, half + (h + 4) // 2, stop, pf_rows)
            accumulate4_ahead(X, r0, r0 + 1, r0 + 2, r0 + 3, z8, h, G, 0, X.shape[1],
                              first, rows)
        i += nb
    # The last r = (stop - start) mod 4 rows of the chunk: logits and
    # gradient one row at a time, their error as one block of r rows.
    r = stop - i
    if r > 0:
        z4 = z8[:4]
        for q in range(r):
            _logits1(X[i + q], Wt, b, z4[q])
        if store:
            _store_proba(z4, r, i, P)
        part, bad = _error4(z4[:r], i, i + 1, i + 2, i + 3, y, Y, sw, soft, weighted,
                            scale, gbc)
        if bad >= 0:
            bad_row[c] = i + bad
        else:
            acc += part
            for q in range(r):
                _accumulate1(X[i + q], z4[q], G)
    loss[c] = acc


@njit(**PJIT)
def _loss_grad_rows(X, y, Y, sw, soft, weighted, scale, Wt, b,
                    gWt, gb, loss, bad_row, scratch, P, width, blocks):
    """Small-k strategy: rows four at a time, weights stored transposed.

    Wt is (k, n') and gWt (n_chunks, k, n') partial sums of Eᵀ X, n' >= n:
    their rows may be padded (so that each starts on a cache line; only the
    first n entries, n from X, are read or written); gb
    (n_chunks, k); loss (n_chunks,) float64; scratch (n_chunks, L >=
    :func:`rows_scratch_length`): eight rows of logits, a transposed block of
    ERROR_T_ROWS rows and two rows of ERROR_T_ROWS. OUT P: (m, k) receives softmax(X W + b), or an
    empty (0, k) array: not stored. ``width``, ``blocks``: see
    :func:`_rows_chunk`.
    """
    for c in prange(gWt.shape[0]):
        _rows_chunk(np.int64(c), X, y, Y, sw, soft, weighted, scale, Wt, b,
                    gWt, gb, loss, bad_row, scratch, P, width, blocks)


@njit(inline="always", **JIT)
def _blas_forward(X, r0, rows, W, Z):
    """OUT Z[:rows] = X[r0:r0 + rows] W by BLAS."""
    _gemm_into(X[r0:r0 + rows], W, Z[:rows], 0.0)


@njit(inline="always", **JIT)
def _blas_backward(X, r0, rows, E, G, first):
    """G (+)= X[r0:r0 + rows]ᵀ E[:rows] by BLAS: the first block's product starts the sum.

    (beta 0: G is not read.)
    """
    _gemm_into(X[r0:r0 + rows].T, E[:rows], G, 0.0 if first else 1.0)


@njit(inline="always", **JIT)
def _tiles_backward(X, r0, rows, E, G, first):
    """G (+)= X[r0:r0 + rows]ᵀ E[:rows] by the tiles of ._outer: the first block's sets G.

    (For :func:`_gemm_body`'s variants in ``benchmarks/gradient_variants.py``.)
    """
    backward_block(X, r0, rows, E, G, first)


@njit(inline="always", **JIT)
def _block_error_tiles(Zc, nrows, r0, b, y, Y, sw, soft, weighted, scale, gb, mx, s, P):
    """:func:`_block_error` by way of the block's transpose: the tiles' blocks of few classes.

    Zc (2 R + spare, k), a chunk's scratch of :func:`_tiles_chunk` (R =
    mx.shape[0], the block's rows at most): the logits of the block's
    nrows rows in its first rows, their error out; its last R rows hold the
    block transposed, (k, nrows), for :func:`_block_error_t`, whose loops
    run along the rows. Against :func:`_block_error` on the same blocks
    (one thread, ad hoc) the error took 0.44-0.64x the time at k = 3, 10
    and 30 in float32, 0.47-0.93x in float64, the two copies included;
    the whole gradient 0.80-0.97x at n = 96 and 200 (BENCHMARKS.md,
    "Fifty-eighth session").
    """
    k = Zc.shape[1]
    R = mx.shape[0]
    ZT = Zc[Zc.shape[0] - R:].reshape(R * k)[:k * nrows].reshape(k, nrows)
    for q in range(nrows):
        z = Zc[q]
        for j in range(k):
            ZT[j, q] = z[j] + b[j]
    loss, bad = _block_error_t(ZT, r0, y, Y, sw, soft, weighted, scale, gb, mx[:nrows],
                               s[:nrows], P)
    if bad < 0:
        for q in range(nrows):
            z = Zc[q]
            for j in range(k):
                z[j] = ZT[j, q]
    return loss, bad


@njit(inline="always", **JIT)
def _gemm_body(c, X, y, Y, sw, soft, weighted, scale, W, b,
               gW, gb, loss, bad_row, scratch, P, block_error, forward, backward, spare,
               blocks):
    """Chunk c of the GEMM strategy, each block's logits into its error by ``block_error``.

    ``block_error`` is a compiled function: :func:`_block_error` in
    :func:`_gemm_chunk`, :func:`_block_error_lanes` in
    :func:`_gemm_chunk_lanes`; it gets the chunk's whole scratch and the
    block's row count. ``forward(X, r0, rows, W, Z)`` and
    ``backward(X, r0, rows, E, G, first)`` the block's two products: by
    BLAS (:func:`_blas_forward`, :func:`_blas_backward`), or in the
    variants of ``benchmarks/gradient_variants.py`` by the tiles of
    :mod:`._outer` (``forward_block``, :func:`_tiles_backward`: W and G
    padded to whole vectors of classes, and ``spare`` rows of the scratch
    beyond each block's, :func:`._outer.spare_rows`; the package's tiles
    kernels run :func:`_tiles_body`). The scratch holds ``blocks`` blocks
    of R rows beside the spare rows (2: :func:`_block_error_tiles`'s
    transpose).
    """
    m, n = X.shape
    R = (scratch.shape[1] - spare) // blocks
    start, stop, G, gbc = _chunk_start_set(c, m, gW, gb, bad_row)
    mx = np.empty(R, dtype=X.dtype)
    s = np.empty(R, dtype=X.dtype)
    Zc = scratch[c]
    acc = 0.0
    for r0 in range(start, stop, R):
        rr = min(R, stop - r0)
        forward(X, r0, rr, W, Zc)
        part, bad = block_error(Zc, rr, r0, b, y, Y, sw, soft, weighted, scale, gbc, mx, s, P)
        if bad >= 0:
            bad_row[c] = r0 + bad
            break
        acc += part
        backward(X, r0, rr, Zc, G, r0 == start)
    loss[c] = acc


@njit(**JIT)
def _gemm_chunk(c, X, y, Y, sw, soft, weighted, scale, W, b,
                gW, gb, loss, bad_row, scratch, P):
    """Chunk c of the GEMM strategy (as :func:`_rows_chunk`), rows of fewer than 32 classes."""
    _gemm_body(c, X, y, Y, sw, soft, weighted, scale, W, b, gW, gb, loss, bad_row,
               scratch, P, _block_error, _blas_forward, _blas_backward, 0, 1)


@njit(**JIT)
def _gemm_chunk_lanes(c, X, y, Y, sw, soft, weighted, scale, W, b,
                      gW, gb, loss, bad_row, scratch, P):
    """:func:`_gemm_chunk` for rows of at least ``_common.LANES_FROM`` classes."""
    _wide_vectors_float64(X)
    _gemm_body(c, X, y, Y, sw, soft, weighted, scale, W, b, gW, gb, loss, bad_row,
               scratch, P, _block_error_lanes, _blas_forward, _blas_backward, 0, 1)


@njit(**JIT)
def _tiles_chunk(c, X, y, Y, sw, soft, weighted, scale, Wp, b,
                 gW, gb, loss, bad_row, scratch, P):
    """:func:`_gemm_chunk` with the products by the tiles of :mod:`._outer`.

    Wp (n, kp) and gW (n_chunks, n, kp): W and the partial sums padded to
    whole vectors of classes (Wp's extra columns zero; gW's take the
    tiles' extra lanes and are not read); scratch (n_chunks, 2 R +
    ``_outer.spare_rows`` + ``_outer.rest_rows``, k): a block's logits, the
    spare rows its last vectors run on into, the block transposed
    (:func:`_block_error_tiles`), the rest's arrays (:func:`_tiles_body`;
    none here: every class on the tiles, :func:`_tiles_chunk_rest` where
    there is a rest).
    """
    _tiles_body(c, X, y, Y, sw, soft, weighted, scale, Wp, b, gW, gb, loss, bad_row,
                scratch, P, _block_error_tiles, 2, no_rest, no_rest_forward, no_rest_backward)


@njit(**JIT)
def _tiles_chunk_rest(c, X, y, Y, sw, soft, weighted, scale, Wp, b,
                      gW, gb, loss, bad_row, scratch, P):
    """:func:`_tiles_chunk` with the classes past whole vectors by the rows kernels' tiles."""
    _tiles_body(c, X, y, Y, sw, soft, weighted, scale, Wp, b, gW, gb, loss, bad_row,
                scratch, P, _block_error_tiles, 2, rest_classes, rest_forward, rest_backward)


@njit(inline="always", **JIT)
def rest_forward(X, r0, rows, Wr, zero_b, Z, kv):
    """OUT Z[q, kv:] = X[r0 + q] @ Wrᵀ for q < rows: the rest's logits by the rows kernels' tiles.

    Wr (r, n): the rest's columns of W transposed; zero_b (r,) zeros (the
    error pass adds the bias).
    """
    Zr = Z[:, kv:]
    h = 0
    while h + 4 <= rows:
        logits_prefetching(X, r0 + h, 4, Wr, zero_b, Zr, h, 0, 0)
        h += 4
    while h < rows:
        _logits1(X[r0 + h], Wr, zero_b, Zr[h])
        h += 1


@njit(inline="always", **JIT)
def rest_backward(X, r0, rows, E, kv, Gr):
    """INOUT Gr (r, n) += (X[r0:r0 + rows]ᵀ E[:rows, kv:])ᵀ: the rest's gradient, transposed."""
    Er = E[:, kv:]
    n = X.shape[1]
    h = 0
    while h + 4 <= rows:
        accumulate4_ahead(X, r0 + h, r0 + h + 1, r0 + h + 2, r0 + h + 3, Er, h, Gr, 0, n, 0, 0)
        h += 4
    while h < rows:
        _accumulate1(X[r0 + h], Er[h], Gr)
        h += 1


# The tiles' kernels with a rest (rest_classes) and without one (no_rest,
# no_rest_forward, no_rest_backward) are kernels of their own, each compiled
# where a shape first needs it: the rest's products (the rows kernels'
# tiles) made the tiles' gradient kernel take about half again as long to
# compile. On a Zen 3 host (AVX2), float64, a first default fit on an empty
# cache (`benchmarks/compile_time.py float64 auto kernels`, alternating with
# the kernels before): that kernel 8.2-10.6 s against 13.3-16.0 s, the
# import and fit 12.6-15.0 s against 18.0-21.4 s (BENCHMARKS.md,
# "Sixty-eighth session").
@njit(inline="always", **JIT)
def no_rest_forward(X, r0, rows, Wr, zero_b, Z, kv):
    """:func:`rest_forward` of the kernels without a rest: nothing."""


@njit(inline="always", **JIT)
def no_rest_backward(X, r0, rows, E, kv, Gr):
    """:func:`rest_backward` of the kernels without a rest: nothing."""


@njit(inline="always", **JIT)
def rest_array(scratch_rows, r, n, a):
    """Return the rest's a-th (r, n) array (a = 0, 1, ...) of a chunk's last scratch rows."""
    return scratch_rows.reshape(-1)[a * r * n:(a + 1) * r * n].reshape(r, n)


@njit(inline="always", **JIT)
def rest_transposed(Wp, kv, Wr):
    """OUT Wr (r, n) = Wp[:, kv:kv + r]ᵀ: the rest's columns laid out for the rows tiles."""
    r, n = Wr.shape
    for f in range(n):
        for j in range(r):
            Wr[j, f] = Wp[f, kv + j]


@njit(inline="always", **JIT)
def rest_store(G, kv, Gr):
    """OUT G[:, kv:kv + r] = Grᵀ: the rest's sum, summed transposed, into a chunk's partial sum."""
    r, n = Gr.shape
    for f in range(n):
        for j in range(r):
            G[f, kv + j] = Gr[j, f]


@njit(inline="always", **JIT)
def _tiles_body(c, X, y, Y, sw, soft, weighted, scale, Wp, b,
                gW, gb, loss, bad_row, scratch, P, block_error, blocks,
                rest_count, rest_fwd, rest_bwd):
    """Chunk c of the tiles' gradient (:func:`_tiles_chunk`, :func:`_tiles_chunk_lanes`, ``_rest``).

    Each block's error by ``block_error`` on the chunk's first ``blocks``
    R + ``_outer.spare_rows`` rows of scratch. The classes of whole
    vectors on the tiles; the r = ``_outer.rest_classes`` classes past
    them, where there are any, by the rows kernels' tiles: their columns of
    W copied transposed into the scratch's last rows (Wr, r x n,
    ``_outer.rest_rows``) at the chunk's start, their gradient summed there
    transposed (Gr) and set into the chunk's partial sum at its end.
    ``rest_count``, ``rest_fwd``, ``rest_bwd``: ``rest_classes``,
    :func:`rest_forward` and :func:`rest_backward`, or for the kernels
    without a rest ``no_rest`` and the ``no_rest_`` forms. Rows of X that
    alias in L1 (``_outer.ALIAS_BYTES``): each block's products on its
    copy in rows a line longer (``_outer.pack_block``), the rest's on X.
    """
    m, n = X.shape
    k = b.shape[0]
    r = rest_count(X, k)
    kv = k - r
    vectors = -(-kv // lanes(X))
    spare = spare_rows(X, k)
    R = (scratch.shape[1] - spare - rest_rows(X, k, r, 2)) // blocks
    start, stop, G, gbc = _chunk_start_set(c, m, gW, gb, bad_row)
    mx = np.empty(R, dtype=X.dtype)
    s = np.empty(R, dtype=X.dtype)
    Zc = scratch[c, :blocks * R + spare]
    rest = scratch[c, blocks * R + spare:]
    Wr = rest_array(rest, r, n, 0)
    Gr = rest_array(rest, r, n, 1)
    zero_b = np.zeros(r, dtype=X.dtype)
    rest_transposed(Wp, kv, Wr)
    Gr[:] = 0
    buf = pack_buffer(X, R)
    acc = 0.0
    for r0 in range(start, stop, R):
        rr = min(R, stop - r0)
        Xb, rb = pack_block(X, r0, rr, buf)
        forward_vectors(Xb, rb, rr, Wp, Zc, vectors)
        if r > 0:
            rest_fwd(X, r0, rr, Wr, zero_b, Zc, kv)
        part, bad = block_error(Zc, rr, r0, b, y, Y, sw, soft, weighted, scale, gbc, mx, s, P)
        if bad >= 0:
            bad_row[c] = r0 + bad
            break
        acc += part
        backward_vectors(Xb, rb, rr, Zc, G, r0 == start, vectors)
        if r > 0:
            rest_bwd(X, r0, rr, Zc, kv, Gr)
    rest_store(G, kv, Gr)
    loss[c] = acc


@njit(**JIT)
def _tiles_chunk_lanes(c, X, y, Y, sw, soft, weighted, scale, Wp, b,
                       gW, gb, loss, bad_row, scratch, P):
    """:func:`_tiles_chunk` for rows of at least ``_common.LANES_FROM`` classes.

    The error row by row (:func:`_block_error_pairs`): scratch (n_chunks, R
    + ``_outer.spare_rows`` + ``_outer.rest_rows``, k).
    """
    _wide_vectors_float64(X)
    _tiles_body(c, X, y, Y, sw, soft, weighted, scale, Wp, b, gW, gb, loss, bad_row,
                scratch, P, _block_error_pairs, 1, no_rest, no_rest_forward, no_rest_backward)


@njit(**JIT)
def _tiles_chunk_lanes_rest(c, X, y, Y, sw, soft, weighted, scale, Wp, b,
                            gW, gb, loss, bad_row, scratch, P):
    """:func:`_tiles_chunk_lanes` with the classes past whole vectors by the rows kernels' tiles."""
    _wide_vectors_float64(X)
    _tiles_body(c, X, y, Y, sw, soft, weighted, scale, Wp, b, gW, gb, loss, bad_row,
                scratch, P, _block_error_pairs, 1, rest_classes, rest_forward, rest_backward)


@njit(**PJIT)
def _loss_grad_gemm(X, y, Y, sw, soft, weighted, scale, W, b,
                    gW, gb, loss, bad_row, scratch, P):
    """Large-k strategy: BLAS GEMM on row blocks.

    W is (n, k); gW is (n_chunks, n, k) partial sums of Xᵀ E; scratch
    (n_chunks, R, k) holds one row block's logits and errors. Each block's
    Xᵀ E is added into the chunk's sum by the product itself
    (``_blas._gemm_into``). OUT P: (m, k)
    probabilities or an empty (0, k) array, as in :func:`_loss_grad_rows`.

    For rows of fewer than ``_common.LANES_FROM`` classes; longer rows go
    to :func:`_loss_grad_gemm_lanes`. Two kernels, each compiled when first
    used, rather than a choice inside one: the second code path made the
    cold start of a first fit 2.5-3 s longer (11.3 -> 14.2 s, measured).
    """
    for c in prange(gW.shape[0]):
        _gemm_chunk(np.int64(c), X, y, Y, sw, soft, weighted, scale, W, b,
                    gW, gb, loss, bad_row, scratch, P)


@njit(**PJIT)
def _loss_grad_gemm_lanes(X, y, Y, sw, soft, weighted, scale, W, b,
                          gW, gb, loss, bad_row, scratch, P):
    """:func:`_loss_grad_gemm` for rows of at least ``_common.LANES_FROM`` classes."""
    for c in prange(gW.shape[0]):
        _gemm_chunk_lanes(np.int64(c), X, y, Y, sw, soft, weighted, scale, W, b,
                          gW, gb, loss, bad_row, scratch, P)


@njit(**PJIT)
def _loss_grad_tiles(X, y, Y, sw, soft, weighted, scale, Wp, b,
                     gW, gb, loss, bad_row, scratch, P):
    """:func:`_loss_grad_gemm`, its products by :mod:`._outer`'s tiles (:func:`_tiles_chunk`)."""
    for c in prange(gW.shape[0]):
        _tiles_chunk(np.int64(c), X, y, Y, sw, soft, weighted, scale, Wp, b,
                     gW, gb, loss, bad_row, scratch, P)


@njit(**PJIT)
def _loss_grad_tiles_lanes(X, y, Y, sw, soft, weighted, scale, Wp, b,
                           gW, gb, loss, bad_row, scratch, P):
    """:func:`_loss_grad_tiles` for rows of at least ``_common.LANES_FROM`` classes."""
    for c in prange(gW.shape[0]):
        _tiles_chunk_lanes(np.int64(c), X, y, Y, sw, soft, weighted, scale, Wp, b,
                           gW, gb, loss, bad_row, scratch, P)


@njit(**PJIT)
def _loss_grad_tiles_rest(X, y, Y, sw, soft, weighted, scale, Wp, b,
                          gW, gb, loss, bad_row, scratch, P):
    """:func:`_loss_grad_tiles` with a rest of classes (:func:`_tiles_chunk_rest`)."""
    for c in prange(gW.shape[0]):
        _tiles_chunk_rest(np.int64(c), X, y, Y, sw, soft, weighted, scale, Wp, b,
                          gW, gb, loss, bad_row, scratch, P)


@njit(**PJIT)
def _loss_grad_tiles_lanes_rest(X, y, Y, sw, soft, weighted, scale, Wp, b,
                                gW, gb, loss, bad_row, scratch, P):
    """:func:`_loss_grad_tiles_lanes` with a rest of classes (:func:`_tiles_chunk_lanes_rest`)."""
    for c in prange(gW.shape[0]):
        _tiles_chunk_lanes_rest(np.int64(c), X, y, Y, sw, soft, weighted, scale, Wp, b,
                                gW, gb, loss, bad_row, scratch, P)


@njit(inline="always", **JIT)
def _split_errors(c, X, y, Y, sw, soft, weighted, scale, W, b, gb, loss, bad_row, Ec, base,
                  R, P, block_logits, block_error):
    """Chunk c of a split pass's first pass: the scaled error of its rows in Ec.

    Row blocks of ``R`` rows: each block's logits by ``block_logits(X,
    r0, rows, W, Z)`` into its rows of Ec (row r of X at Ec[r - base]),
    then the bias, P if asked and the scaled error in place by
    ``block_error``. Sets gb[c], loss[c], bad_row[c] as :func:`_gemm_chunk`
    does.
    """
    _wide_vectors_float64(X)
    start, stop = _chunk(X.shape[0], gb.shape[0], c)
    gbc = gb[c]
    gbc[:] = gb.dtype.type(0)
    bad_row[c] = -1
    mx = np.empty(R, dtype=X.dtype)
    s = np.empty(R, dtype=X.dtype)
    acc = 0.0
    for r0 in range(start, stop, R):
        rr = min(R, stop - r0)
        Zb = Ec[r0 - base:]
        block_logits(X, r0, rr, W, Zb)
        part, bad = block_error(Zb, rr, r0, b, y, Y, sw, soft, weighted, scale, gbc, mx, s, P)
        if bad >= 0:
            bad_row[c] = r0 + bad
            break
        acc += part
    loss[c] = acc


@njit(**JIT)
def _gemm_split_chunk(c, X, y, Y, sw, soft, weighted, scale, W, b,
                      gb, loss, bad_row, E, R, P):
    """Chunk c of :func:`_loss_grad_gemm_split`'s first pass: E of its rows.

    :func:`_split_errors`, each block's Z = Xb W by BLAS into its rows of
    E (m, k), the error by :func:`_block_error_lanes`.
    """
    _split_errors(c, X, y, Y, sw, soft, weighted, scale, W, b, gb, loss, bad_row, E, 0, R, P,
                  _blas_forward, _block_error_lanes)


@njit(**PJIT)
def _loss_grad_gemm_split(X, y, Y, sw, soft, weighted, scale, W, b,
                          G, gb, loss, bad_row, E, R, P):
    """Run the GEMM strategy with the backward product split by features.

    Rows of at least ``_common.LANES_FROM`` classes, few rows next to
    n k. First pass, a ``prange`` over row chunks: the scaled error of
    every row into E (m, k) (:func:`_gemm_split_chunk`). Second, a
    ``prange`` over ranges of features: G[f0:f1] = X[:, f0:f1]ᵀ E by BLAS,
    each thread writing its own rows of the one (n, k) gradient. The
    row-split kernels give every thread an n k partial sum, which the
    caller then reduces: where n k is large next to m k (1000 rows, 3000
    features, 1000 classes: 12 MB a thread in float32) that sum cost more
    than writing and re-reading E. OUT G (n, k) C-contiguous; gb, loss,
    bad_row per row chunk as in :func:`_loss_grad_gemm`; SCRATCH E (m, k)
    C-contiguous; OUT P as in :func:`_loss_grad_rows`. G is not written
    when some row's logits are not finite.
    """
    n = X.shape[1]
    chunks = gb.shape[0]
    for c in prange(chunks):
        _gemm_split_chunk(np.int64(c), X, y, Y, sw, soft, weighted, scale, W, b,
                          gb, loss, bad_row, E, R, P)
    for c in range(chunks):
        if bad_row[c] >= 0:
            return
    for f in prange(chunks):
        f0, f1 = _chunk(n, chunks, f)
        if f1 > f0:
            _gemm_into(X[:, f0:f1].T, E, G[f0:f1], 0.0)


@njit(**JIT)
def _tiles_split_chunk(c, X, y, Y, sw, soft, weighted, scale, Wp, b,
                       gb, loss, bad_row, E, R, P):
    """Chunk c of :func:`_loss_grad_tiles_split`'s first pass: the error of its rows in E[c].

    :func:`_split_errors` in blocks of ``R`` rows (whole cache lines of k
    entries), each block's logits by the tiles (:func:`._outer.forward_block`)
    into its rows of E[c], the error by :func:`_block_error_pairs`. E[c]
    (the chunk's rows + ``spare_rows``, k): the last row's last vector runs
    on into the rows past it, so each chunk has its own.
    """
    start = _chunk(X.shape[0], gb.shape[0], c)[0]
    _split_errors(c, X, y, Y, sw, soft, weighted, scale, Wp, b, gb, loss, bad_row, E[c], start,
                  R, P, forward_block, _block_error_pairs)


@njit(**JIT)
def _tiles_split_part(p, X, E, G):
    """Part p of :func:`_loss_grad_tiles_split`'s second pass: G[f0:f1] = X[:, f0:f1]ᵀ E.

    The features in whole tiles (``_outer.TILE``), split over E's chunks
    as the rows were; each chunk's rows of E in turn (the first sets G's
    rows, the others add), each over all of its rows, its classes in
    panels that stay in L2 (:func:`._outer.backward_features`).
    """
    m, n = X.shape
    chunks = E.shape[0]
    t0, t1 = _chunk(-(-n // TILE), chunks, p)
    f0, f1 = t0 * TILE, min(n, t1 * TILE)
    vectors = G.shape[1] // lanes(X)
    for c in range(chunks):
        start, stop = _chunk(m, chunks, c)
        backward_features(X, start, stop - start, E[c], G, c == 0, vectors, f0, f1)


@njit(**PJIT)
def _loss_grad_tiles_split(X, y, Y, sw, soft, weighted, scale, Wp, b,
                           G, gb, loss, bad_row, E, R, P):
    """Run the tiles' gradient with the backward product split by features.

    Rows of at least ``_common.LANES_FROM`` classes in whole vectors (no
    ``_outer.rest_classes``), few rows a thread (``_dense.tiles_split``).
    First pass, a ``prange`` over row chunks: each chunk's error into its
    part of E (:func:`_tiles_split_chunk`). Second, a ``prange`` over
    ranges of features: G[f0:f1] = X[:, f0:f1]ᵀ E (:func:`_tiles_split_part`),
    each thread writing its own rows of the one gradient, read and written
    once, where the row split (:func:`_loss_grad_tiles_lanes`) gives each
    thread an n kp partial sum that every block reads and writes and the
    caller then sums. OUT G (1, n, kp) (the padded columns hold the extra
    lanes' sums); gb, loss, bad_row per row chunk as in
    :func:`_loss_grad_tiles`; SCRATCH E (chunks, rows, k) (``_dense``);
    OUT P as in :func:`_loss_grad_rows`. G is not written when some row's
    logits are not finite.
    """
    chunks = gb.shape[0]
    for c in prange(chunks):
        _tiles_split_chunk(np.int64(c), X, y, Y, sw, soft, weighted, scale, Wp, b,
                           gb, loss, bad_row, E, R, P)
    for c in range(chunks):
        if bad_row[c] >= 0:
            return
    for p in prange(chunks):
        _tiles_split_part(np.int64(p), X, E, G[0])


@njit(**JIT)
def _gemm_t_chunk(c, X, y, Y, sw, soft, weighted, scale, W, b,
                  gW, gb, loss, bad_row, scratch, P):
    """Chunk c of the GEMM strategy with each block's logits stored transposed.

    For rows over a few features (the caller's rule,
    ``_dense.transposed_logits``: the error pass takes any k): Zᵀ = Wᵀ Xbᵀ
    (k, r) by BLAS, the error by
    :func:`_block_error_t`, then Xbᵀ E by BLAS from Zᵀ's transposed view.
    scratch (n_chunks, (k + 2) R): per chunk, Zᵀ of R rows and two rows of
    R; otherwise as :func:`_gemm_chunk`.
    """
    m, n = X.shape
    k = W.shape[1]
    R = scratch.shape[1] // (k + 2)
    start, stop, G, gbc = _chunk_start(c, m, gW, gb, bad_row)
    flat = scratch[c]
    Wt = W.T
    acc = 0.0
    for r0 in range(start, stop, R):
        rr = min(R, stop - r0)
        Xb = X[r0:r0 + rr]
        ZT = flat[:k * rr].reshape(k, rr)
        _gemm_into(Wt, Xb.T, ZT, 0.0)
        for j in range(k):
            bj = b[j]
            zj = ZT[j]
            for q in range(rr):
                zj[q] += bj
        part, bad = _block_error_t(ZT, r0, y, Y, sw, soft, weighted, scale, gbc,
                                   flat[k * R:k * R + rr], flat[k * R + R:k * R + R + rr], P)
        if bad >= 0:
            bad_row[c] = r0 + bad
            break
        acc += part
        _gemm_into(Xb.T, ZT.T, G, 0.0 if r0 == start else 1.0)
    loss[c] = acc


@njit(**PJIT)
def _loss_grad_gemm_t(X, y, Y, sw, soft, weighted, scale, W, b,
                      gW, gb, loss, bad_row, scratch, P):
    """:func:`_loss_grad_gemm` with each block's logits transposed (:func:`_gemm_t_chunk`).

    Rows of few classes over few features: (300000, 20, 2) and (300000, 20,
    10) took 0.4-0.6x the time of :func:`_loss_grad_gemm` in float32,
    0.5-0.8x in float64 (BENCHMARKS.md, "Seventh session"); against the
    row-wise kernel on the outer-product tiles it is the faster only on
    rows of a few features ("Seventy-third session"), where the rule in
    ``_dense`` takes it.
    """
    for c in prange(gW.shape[0]):
        _gemm_t_chunk(np.int64(c), X, y, Y, sw, soft, weighted, scale, W, b,
                      gW, gb, loss, bad_row, scratch, P)


@njit(inline="always", **JIT)
def _reduce_rows(G, W, alpha, out, squares, r0, r1):
    """OUT out[r] = Σ_c G[c, r, :b] + alpha W[r, :b], squares[r] = Σ W[r, :b]² for r0 <= r < r1.

    The chunks are added in order, c = 0, 1, ..., as NumPy's
    ``G.sum(axis=0)`` does, then the L2 term as ``_penalty.add_l2`` adds
    it; each row's squares in float64 (none where alpha is 0: W and
    squares are then not touched).
    """
    chunks, b = G.shape[0], out.shape[1]
    for r in range(r0, r1):
        o = out[r]
        g = G[0, r]
        for j in range(b):
            o[j] = g[j]
        for c in range(1, chunks):
            g = G[c, r]
            for j in range(b):
                o[j] += g[j]
        if alpha != 0:
            squares[r] = add_scaled_row(o, W[r], alpha, b)


@njit(**PJIT)
def _sum_chunks(G, W, alpha, out, squares, parts):
    """OUT out (a, b) = Σ_c G[c, :, :b] + alpha W[:, :b]; squares (a,) each row's Σ W² (float64).

    G (n_chunks, a, b') and W (a, b'') with b', b'' >= b, both row-major:
    the per-chunk partial sums of the kernels above (and of ``_hessp``)
    and the kernels' own weights (or direction), whose rows line up with
    G's. The rows go in ``parts`` parts over the threads; each row is
    :func:`_reduce_rows`'s, so the numbers do not depend on the parts (the
    caller sums ``squares``). Reducing and adding the L2 term in one pass
    reads W and writes the gradient once, not twice.
    """
    a = out.shape[0]
    for p in prange(parts):
        r0, r1 = _chunk(a, parts, p)
        _reduce_rows(G, W, alpha, out, squares, r0, r1)


@njit(**JIT)
def _sum_chunks_one(G, W, alpha, out, squares):
    """:func:`_sum_chunks` on the calling thread: for small sums."""
    _reduce_rows(G, W, alpha, out, squares, 0, out.shape[0])


@njit(**PJIT)
def _pad_copy(W, Wp):
    """OUT Wp[:, :k] = W (n, k), C-contiguous, the rows split over the threads.

    The tiles' padded weights (``_outer``'s Wp, its padding left as it is).
    NumPy's copy runs on one thread: 0.8 ms of a 27 ms gradient at (1000,
    3000, 1000) float32 (BENCHMARKS.md, "Sixty-second session").
    """
    k = W.shape[1]
    for i in prange(W.shape[0]):
        w, s = Wp[i], W[i]
        for j in range(k):
            w[j] = s[j]
