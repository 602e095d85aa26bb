"""The fused softmax cross-entropy loss and gradient.

For a block of rows the kernels compute Z = X W + b, the row maximum, exp,
the row sums, the loss terms, E = softmax(Z) - Y in place of Z, and then
accumulate Xᵀ E, so each row of X is read from memory once per gradient and
no (m, k) array is ever allocated: the scratch space is a few rows per chunk.

Two strategies share the per-row arithmetic (:func:`_block_error`):

* :func:`_loss_grad_rows` -- small k. Weights are stored transposed, (k, n),
  so the inner loops run along contiguous features and vectorise. Four rows
  are processed per pass over the weights (register blocking): each weight
  and gradient element loaded from cache serves four rows.
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
from ._softmax import _chunk


@njit(inline="always", **JIT)
def _block_error(Zb, nrows, r0, y, Y, sw, soft, weighted, scale, gb):
    """Turn logits Zb[:nrows] (rows r0...) into scaled errors, in place.

    Returns the weighted sum of the rows' cross-entropy terms (float64: a sum
    over many rows loses too much in float32) and -1, or the block-local
    index of a row with non-finite logits (then Zb is left partly written and
    the caller discards everything).

    Row i gets weight w_i = sw[i] (or 1); its error row is
    scale * w_i * (softmax(z_i) - Y_i), where the caller's ``scale`` is
    1 / sum(w). The loss term is logsumexp(z_i) - <Y_i, z_i>, written as
    (max - <Y_i, z_i>) + log(sum exp(z - max)) so that it never goes through
    log(p) and stays finite for extreme logits.
    """
    k = Zb.shape[1]
    one = Zb.dtype.type(1)
    loss = 0.0
    for q in range(nrows):
        i = r0 + q
        z = Zb[q]
        mx = z[0]
        for j in range(1, k):
            if z[j] > mx:
                mx = z[j]
        if not np.isfinite(mx):
            return loss, q
        # <Y_i, z_i> before z is overwritten; zero targets are skipped so a
        # -inf logit with zero target contributes nothing (0 * -inf is NaN).
        if soft:
            yz = Zb.dtype.type(0)
            for j in range(k):
                t = Y[i, j]
                if t != 0:
                    yz += t * (z[j] - mx)
        else:
            yz = z[y[i]] - mx
        s = Zb.dtype.type(0)
        for j in range(k):
            e = np.exp(z[j] - mx)
            z[j] = e
            s += e
        w = sw[i] if weighted else one
        loss += w * (np.log(s) - yz)
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
    return loss, -1


@njit(**PJIT)
def _loss_grad_rows(X, y, Y, sw, soft, weighted, scale, Wt, b,
                    gWt, gb, loss, bad_row, scratch):
    """Small-k strategy. Wt is (k, n); gWt is (n_chunks, k, n) partial sums
    of Eᵀ X; gb (n_chunks, k); loss (n_chunks,) float64; scratch
    (n_chunks, 4, k)."""
    m, n = X.shape
    k = Wt.shape[0]
    n_chunks = gWt.shape[0]
    zero = X.dtype.type(0)
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        G = gWt[c]
        G[:] = zero
        gbc = gb[c]
        gbc[:] = zero
        z4 = scratch[c]
        acc = 0.0
        bad_row[c] = -1
        i = start
        while i < stop:
            if i + 4 <= stop:
                # Four rows per sweep over Wt: each loaded weight feeds four
                # independent FMA chains, which keeps the loop from being
                # load-bound and lets LLVM vectorise over features.
                x0 = X[i]
                x1 = X[i + 1]
                x2 = X[i + 2]
                x3 = X[i + 3]
                for j in range(k):
                    w = Wt[j]
                    a0 = zero
                    a1 = zero
                    a2 = zero
                    a3 = zero
                    for f in range(n):
                        wf = w[f]
                        a0 += x0[f] * wf
                        a1 += x1[f] * wf
                        a2 += x2[f] * wf
                        a3 += x3[f] * wf
                    z4[0, j] = a0 + b[j]
                    z4[1, j] = a1 + b[j]
                    z4[2, j] = a2 + b[j]
                    z4[3, j] = a3 + b[j]
                part, bad = _block_error(z4, 4, i, y, Y, sw, soft, weighted,
                                         scale, gbc)
                if bad >= 0:
                    bad_row[c] = i + bad
                    break
                acc += part
                for j in range(k):
                    g = G[j]
                    e0 = z4[0, j]
                    e1 = z4[1, j]
                    e2 = z4[2, j]
                    e3 = z4[3, j]
                    for f in range(n):
                        g[f] += e0 * x0[f] + e1 * x1[f] + e2 * x2[f] + e3 * x3[f]
                i += 4
            else:
                x0 = X[i]
                for j in range(k):
                    w = Wt[j]
                    a0 = zero
                    for f in range(n):
                        a0 += x0[f] * w[f]
                    z4[0, j] = a0 + b[j]
                part, bad = _block_error(z4, 1, i, y, Y, sw, soft, weighted,
                                         scale, gbc)
                if bad >= 0:
                    bad_row[c] = i + bad
                    break
                acc += part
                for j in range(k):
                    g = G[j]
                    e0 = z4[0, j]
                    for f in range(n):
                        g[f] += e0 * x0[f]
                i += 1
        loss[c] = acc


@njit(**PJIT)
def _loss_grad_gemm(X, y, Y, sw, soft, weighted, scale, W, b,
                    gW, gb, loss, bad_row, scratch, tmp):
    """Large-k strategy. W is (n, k); gW is (n_chunks, n, k) partial sums of
    Xᵀ E; scratch (n_chunks, R, k) holds one row block's logits and errors;
    tmp (n_chunks, n, k) receives each block's Xᵀ E before it is added."""
    m, n = X.shape
    k = W.shape[1]
    n_chunks = gW.shape[0]
    R = scratch.shape[1]
    zero = X.dtype.type(0)
    for c in prange(n_chunks):
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
                                     scale, gbc)
            if bad >= 0:
                bad_row[c] = r0 + bad
                break
            acc += part
            np.dot(Xb.T, Zb, T)
            for f in range(n):
                for j in range(k):
                    G[f, j] += T[f, j]
        loss[c] = acc
