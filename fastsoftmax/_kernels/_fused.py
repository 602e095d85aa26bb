"""The fused softmax cross-entropy loss and gradient.

For a block of rows the kernels compute Z = X W + b, the row maximum, exp,
the row sums, the loss terms, E = softmax(Z) - Y in place of Z, and then
accumulate Xᵀ E, so each row of X is read from memory once per gradient and
no (m, k) array is ever allocated: the scratch space is a few rows per chunk.

Two strategies share the per-row arithmetic (:func:`_block_error`):

* :func:`_loss_grad_rows` -- small k. Weights are stored transposed, (k, n),
  so the inner loops run along contiguous features and vectorise. Blocks of
  4 rows x 3 classes are processed per pass over the features (register
  blocking): each loaded weight serves four rows, each loaded row three
  classes.
* :func:`_loss_grad_gemm` -- large k. Row blocks of ``R`` rows go through
  BLAS GEMM (``np.dot`` with an output buffer), sized so that a block of X
  stays in the L2 cache between the forward and the backward product. BLAS
  must run single-threaded here: the parallelism is over row chunks.

Both write per-chunk partial sums (a leading chunk axis on every
accumulator: no shared array is written from inside ``prange``); the caller
reduces them serially and adds the L2 penalty.

Targets: labels are either integer class indices ``y`` (m,) with ``soft``
False, or a matrix of class probabilities ``Y`` (m, k) with ``soft`` True;
the unused one is passed as an empty array so that each dtype compiles to a
single specialisation. Sample weights likewise (``weighted``).

Status: ``bad_row[c]`` receives the first row of chunk c whose logits are
not finite (X W overflowed), or -1.
"""

import numpy as np
from numba import njit, prange

from ._config import JIT, PJIT
from ._softmax import _chunk, _exp_shifted


@njit(inline="always", **JIT)
def _row_error(z, i, y, Y, sw, soft, weighted, scale, gb, sc):
    """Turn the logits z (row i of the data) into its scaled error, in place.

    Returns (w_i * cross-entropy of the row, True), or (0, False) when a
    logit is not finite (z is then left partly written and the caller
    discards everything). The cross-entropy is kept in float64 by the
    callers' sums (a sum over many rows loses too much in float32). ``sc``
    is a scratch row of length k; the error row is also added to ``gb``.

    Row i gets weight w_i = sw[i] (or 1); its error row is
    scale * w_i * (softmax(z_i) - Y_i). The loss term is logsumexp(z_i) -
    <Y_i, z_i>, written as (max - <Y_i, z_i>) + log(sum exp(z - max)) so
    that it never goes through log(p) and stays finite for extreme logits.
    Shared by the full gradient (both strategies) and the SGD epoch.
    """
    k = z.shape[0]
    one = z.dtype.type(1)
    # Row maximum and a finiteness test of every logit in one branch-free
    # (vectorisable) sweep: a NaN (inf - inf in X W, or a NaN/inf in X
    # times anything) is invisible to the max, and the vector exp would
    # flush it to 0, so it is caught here. |v| <= big is false for NaN and
    # +-inf; without "nnan"/"ninf" in the fast-math flags LLVM keeps the
    # comparison. The public loss_and_grad relies on this test instead of
    # pre-scanning X (every entry of X reaches every logit of its row).
    big = np.finfo(z.dtype).max
    mx = z[0]
    fin = True
    for j in range(k):
        v = z[j]
        mx = max(mx, v)
        fin = fin & (abs(v) <= big)
    if not fin:
        return 0.0, False
    # <Y_i, z_i> before z is overwritten; zero targets are skipped so a
    # -inf logit with zero target contributes nothing (0 * -inf is NaN).
    if soft:
        yz = z.dtype.type(0)
        for j in range(k):
            t = Y[i, j]
            if t != 0:
                yz += t * (z[j] - mx)
    else:
        yz = z[y[i]] - mx
    # Vectorised exp (see _softmax._exp_shifted); sc is a k-row scratch.
    s = _exp_shifted(z, mx, z, sc)
    w = sw[i] if weighted else one
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
    return w * (np.log(s) - yz), True


@njit(inline="always", **JIT)
def _block_error(Zb, nrows, r0, y, Y, sw, soft, weighted, scale, gb, sc):
    """:func:`_row_error` on the rows Zb[:nrows] (data rows r0...).

    Returns the summed loss terms (float64) and -1, or the block-local index
    of the first row with non-finite logits.
    """
    loss = 0.0
    for q in range(nrows):
        part, ok = _row_error(Zb[q], r0 + q, y, Y, sw, soft, weighted, scale, gb, sc)
        if not ok:
            return loss, q
        loss += part
    return loss, -1


@njit(inline="always", **JIT)
def _logits4(X, i0, i1, i2, i3, Wt, b, z4):
    """z4[q, j] = X[iq] . Wt[j] + b[j] for the four rows i0..i3.

    The rows are given by index, so that the full gradient (consecutive
    rows) and the SGD epoch (rows in shuffled order) share this code.

    Register blocking 4 rows x 3 classes: each step of the feature loop loads
    4 x-vectors and 3 w-vectors for 12 FMAs (the 4 x 1 blocking needed 5
    loads per 4 FMAs and was load-bound), and the 12 independent
    accumulators cover the FMA latency (4 cycles x 2 ports on Zen 3). LLVM
    vectorises the feature loop (reassoc) with one 8-wide (float32) or 4-wide
    (float64) vector per accumulator; 4 x 3 is the largest block that keeps
    the spills to a handful on AVX2's 16 ymm registers (measured against 4 x 1,
    4 x 2 and 3 x 4). Leftover classes (k mod 3) take a 4 x 2 or 4 x 1 block.
    """
    n = X.shape[1]
    k = Wt.shape[0]
    zero = X.dtype.type(0)
    x0 = X[i0]
    x1 = X[i1]
    x2 = X[i2]
    x3 = X[i3]
    j = 0
    # k = 3q + 1 ends in two 4 x 2 blocks rather than a load-bound 4 x 1.
    while j + 3 <= k and k - j != 4:
        w0 = Wt[j]
        w1 = Wt[j + 1]
        w2 = Wt[j + 2]
        a00 = zero
        a01 = zero
        a02 = zero
        a10 = zero
        a11 = zero
        a12 = zero
        a20 = zero
        a21 = zero
        a22 = zero
        a30 = zero
        a31 = zero
        a32 = zero
        for f in range(n):
            c0 = x0[f]
            c1 = x1[f]
            c2 = x2[f]
            c3 = x3[f]
            u0 = w0[f]
            u1 = w1[f]
            u2 = w2[f]
            a00 += c0 * u0
            a01 += c0 * u1
            a02 += c0 * u2
            a10 += c1 * u0
            a11 += c1 * u1
            a12 += c1 * u2
            a20 += c2 * u0
            a21 += c2 * u1
            a22 += c2 * u2
            a30 += c3 * u0
            a31 += c3 * u1
            a32 += c3 * u2
        b0 = b[j]
        b1 = b[j + 1]
        b2 = b[j + 2]
        z4[0, j] = a00 + b0
        z4[0, j + 1] = a01 + b1
        z4[0, j + 2] = a02 + b2
        z4[1, j] = a10 + b0
        z4[1, j + 1] = a11 + b1
        z4[1, j + 2] = a12 + b2
        z4[2, j] = a20 + b0
        z4[2, j + 1] = a21 + b1
        z4[2, j + 2] = a22 + b2
        z4[3, j] = a30 + b0
        z4[3, j + 1] = a31 + b1
        z4[3, j + 2] = a32 + b2
        j += 3
    while k - j >= 2:
        w0 = Wt[j]
        w1 = Wt[j + 1]
        a00 = zero
        a01 = zero
        a10 = zero
        a11 = zero
        a20 = zero
        a21 = zero
        a30 = zero
        a31 = zero
        for f in range(n):
            c0 = x0[f]
            c1 = x1[f]
            c2 = x2[f]
            c3 = x3[f]
            u0 = w0[f]
            u1 = w1[f]
            a00 += c0 * u0
            a01 += c0 * u1
            a10 += c1 * u0
            a11 += c1 * u1
            a20 += c2 * u0
            a21 += c2 * u1
            a30 += c3 * u0
            a31 += c3 * u1
        b0 = b[j]
        b1 = b[j + 1]
        z4[0, j] = a00 + b0
        z4[0, j + 1] = a01 + b1
        z4[1, j] = a10 + b0
        z4[1, j + 1] = a11 + b1
        z4[2, j] = a20 + b0
        z4[2, j + 1] = a21 + b1
        z4[3, j] = a30 + b0
        z4[3, j + 1] = a31 + b1
        j += 2
    if k - j == 1:
        w0 = Wt[j]
        a00 = zero
        a10 = zero
        a20 = zero
        a30 = zero
        for f in range(n):
            u0 = w0[f]
            a00 += x0[f] * u0
            a10 += x1[f] * u0
            a20 += x2[f] * u0
            a30 += x3[f] * u0
        b0 = b[j]
        z4[0, j] = a00 + b0
        z4[1, j] = a10 + b0
        z4[2, j] = a20 + b0
        z4[3, j] = a30 + b0


@njit(inline="always", **JIT)
def _accumulate4(X, i0, i1, i2, i3, z4, G):
    """G[j] += sum_q z4[q, j] * X[iq] for the four rows i0..i3.

    The same 4 rows x 3 classes blocking as :func:`_logits4`: per step of
    the feature loop, 4 x-loads (from L1: the block was just read by the
    forward sweep), 3 loads and 3 stores of G for 12 FMAs. G is this chunk's
    partial Eᵀ X; in float32 it accumulates up to m / n_chunks rows in
    float32 -- precision traded for keeping G (k x n) small enough for L1/L2;
    the tests bound the resulting error against the float64-exact reference.
    """
    n = X.shape[1]
    k = G.shape[0]
    x0 = X[i0]
    x1 = X[i1]
    x2 = X[i2]
    x3 = X[i3]
    j = 0
    while j + 3 <= k and k - j != 4:
        g0 = G[j]
        g1 = G[j + 1]
        g2 = G[j + 2]
        e00 = z4[0, j]
        e10 = z4[1, j]
        e20 = z4[2, j]
        e30 = z4[3, j]
        e01 = z4[0, j + 1]
        e11 = z4[1, j + 1]
        e21 = z4[2, j + 1]
        e31 = z4[3, j + 1]
        e02 = z4[0, j + 2]
        e12 = z4[1, j + 2]
        e22 = z4[2, j + 2]
        e32 = z4[3, j + 2]
        for f in range(n):
            c0 = x0[f]
            c1 = x1[f]
            c2 = x2[f]
            c3 = x3[f]
            g0[f] += e00 * c0 + e10 * c1 + e20 * c2 + e30 * c3
            g1[f] += e01 * c0 + e11 * c1 + e21 * c2 + e31 * c3
            g2[f] += e02 * c0 + e12 * c1 + e22 * c2 + e32 * c3
        j += 3
    while k - j >= 2:
        g0 = G[j]
        g1 = G[j + 1]
        e00 = z4[0, j]
        e10 = z4[1, j]
        e20 = z4[2, j]
        e30 = z4[3, j]
        e01 = z4[0, j + 1]
        e11 = z4[1, j + 1]
        e21 = z4[2, j + 1]
        e31 = z4[3, j + 1]
        for f in range(n):
            c0 = x0[f]
            c1 = x1[f]
            c2 = x2[f]
            c3 = x3[f]
            g0[f] += e00 * c0 + e10 * c1 + e20 * c2 + e30 * c3
            g1[f] += e01 * c0 + e11 * c1 + e21 * c2 + e31 * c3
        j += 2
    while j < k:
        g0 = G[j]
        e00 = z4[0, j]
        e10 = z4[1, j]
        e20 = z4[2, j]
        e30 = z4[3, j]
        for f in range(n):
            g0[f] += e00 * x0[f] + e10 * x1[f] + e20 * x2[f] + e30 * x3[f]
        j += 1


@njit(inline="always", **JIT)
def _logits1(x, Wt, b, z):
    """z[j] = x . Wt[j] + b[j] for one row x (the leftover rows, SGD with B = 1).

    Three classes per pass over the features: one x-load serves three FMAs.
    """
    n = x.shape[0]
    k = Wt.shape[0]
    zero = x.dtype.type(0)
    j = 0
    while j + 3 <= k:
        w0 = Wt[j]
        w1 = Wt[j + 1]
        w2 = Wt[j + 2]
        a0 = zero
        a1 = zero
        a2 = zero
        for f in range(n):
            c = x[f]
            a0 += c * w0[f]
            a1 += c * w1[f]
            a2 += c * w2[f]
        z[j] = a0 + b[j]
        z[j + 1] = a1 + b[j + 1]
        z[j + 2] = a2 + b[j + 2]
        j += 3
    while j < k:
        w0 = Wt[j]
        a0 = zero
        for f in range(n):
            a0 += x[f] * w0[f]
        z[j] = a0 + b[j]
        j += 1


@njit(inline="always", **JIT)
def _accumulate1(x, e, G):
    """G[j] += e[j] * x for one row x."""
    n = x.shape[0]
    k = G.shape[0]
    for j in range(k):
        g = G[j]
        ej = e[j]
        for f in range(n):
            g[f] += ej * x[f]


@njit(inline="always", **JIT)
def _rows_chunk(c, X, y, Y, sw, soft, weighted, scale, Wt, b,
                gWt, gb, loss, bad_row, scratch):
    """Chunk c of the small-k strategy (the body of both rows kernels).

    Rows go four at a time through logits, softmax error and gradient, so
    each block of X (4 x n) is read from memory once and is still in L1 for
    the backward sweep.
    """
    m = X.shape[0]
    n_chunks = gWt.shape[0]
    zero = X.dtype.type(0)
    start, stop = _chunk(m, n_chunks, c)
    G = gWt[c]
    G[:] = zero
    gbc = gb[c]
    gbc[:] = zero
    z4 = scratch[c, :4]
    sc = scratch[c, 4]
    acc = 0.0
    bad_row[c] = -1
    i = start
    while i + 4 <= stop:
        _logits4(X, i, i + 1, i + 2, i + 3, Wt, b, z4)
        part, bad = _block_error(z4, 4, i, y, Y, sw, soft, weighted, scale, gbc, sc)
        if bad >= 0:
            bad_row[c] = i + bad
            loss[c] = acc
            return
        acc += part
        _accumulate4(X, i, i + 1, i + 2, i + 3, z4, G)
        i += 4
    # The last (stop - start) mod 4 rows of the chunk, one by one.
    while i < stop:
        z = z4[0]
        _logits1(X[i], Wt, b, z)
        part, ok = _row_error(z, i, y, Y, sw, soft, weighted, scale, gbc, sc)
        if not ok:
            bad_row[c] = i
            break
        acc += part
        _accumulate1(X[i], z, G)
        i += 1
    loss[c] = acc


@njit(**PJIT)
def _loss_grad_rows(X, y, Y, sw, soft, weighted, scale, Wt, b,
                    gWt, gb, loss, bad_row, scratch):
    """Small-k strategy: rows four at a time, weights stored transposed.

    Wt is (k, n); gWt is (n_chunks, k, n) partial sums of Eᵀ X; gb
    (n_chunks, k); loss (n_chunks,) float64; scratch (n_chunks, 5, k): four
    rows of logits/errors and the exp scratch row.
    """
    for c in prange(gWt.shape[0]):
        _rows_chunk(c, X, y, Y, sw, soft, weighted, scale, Wt, b,
                    gWt, gb, loss, bad_row, scratch)


@njit(**JIT)
def _loss_grad_rows_serial(X, y, Y, sw, soft, weighted, scale, Wt, b,
                           gWt, gb, loss, bad_row, scratch):
    """:func:`_loss_grad_rows` without a parallel region, for small problems.

    A Numba parallel launch costs tens of microseconds on an idle machine
    and far more when the other core is busy; below a few MFLOP that is
    more than the work. A separate function (not the same one compiled
    twice) because two dispatchers of one Python function share a name in
    Numba's cache index.
    """
    for c in range(gWt.shape[0]):
        _rows_chunk(c, X, y, Y, sw, soft, weighted, scale, Wt, b,
                    gWt, gb, loss, bad_row, scratch)


@njit(inline="always", **JIT)
def _gemm_chunk(c, X, y, Y, sw, soft, weighted, scale, W, b,
                gW, gb, loss, bad_row, scratch, tmp):
    """Chunk c of the GEMM strategy (the body of both GEMM kernels)."""
    m, n = X.shape
    k = W.shape[1]
    n_chunks = gW.shape[0]
    R = scratch.shape[1] - 1
    zero = X.dtype.type(0)
    start, stop = _chunk(m, n_chunks, c)
    G = gW[c]
    G[:] = zero
    gbc = gb[c]
    gbc[:] = zero
    T = tmp[c]
    acc = 0.0
    bad_row[c] = -1
    for r0 in range(start, stop, R):
        rr = min(R, stop - r0)
        Xb = X[r0:r0 + rr]
        Zb = scratch[c, :rr]
        np.dot(Xb, W, Zb)
        for q in range(rr):
            for j in range(k):
                Zb[q, j] += b[j]
        part, bad = _block_error(Zb, rr, r0, y, Y, sw, soft, weighted,
                                 scale, gbc, scratch[c, R])
        if bad >= 0:
            bad_row[c] = r0 + bad
            break
        acc += part
        np.dot(Xb.T, Zb, T)
        for f in range(n):
            for j in range(k):
                G[f, j] += T[f, j]
    loss[c] = acc


@njit(**PJIT)
def _loss_grad_gemm(X, y, Y, sw, soft, weighted, scale, W, b,
                    gW, gb, loss, bad_row, scratch, tmp):
    """Large-k strategy: BLAS GEMM on row blocks.

    W is (n, k); gW is (n_chunks, n, k) partial sums of Xᵀ E; scratch
    (n_chunks, R + 1, k) holds one row block's logits and errors, and the
    exp scratch row; tmp (n_chunks, n, k) receives each block's Xᵀ E before
    it is added.
    """
    for c in prange(gW.shape[0]):
        _gemm_chunk(c, X, y, Y, sw, soft, weighted, scale, W, b,
                    gW, gb, loss, bad_row, scratch, tmp)


@njit(**JIT)
def _loss_grad_gemm_serial(X, y, Y, sw, soft, weighted, scale, W, b,
                           gW, gb, loss, bad_row, scratch, tmp):
    """:func:`_loss_grad_gemm` without a parallel region (see the rows one)."""
    for c in range(gW.shape[0]):
        _gemm_chunk(c, X, y, Y, sw, soft, weighted, scale, W, b,
                    gW, gb, loss, bad_row, scratch, tmp)
