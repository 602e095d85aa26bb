"""Kernels for sparse data in CSR form: loss and gradient, SGD, prediction, validation.

A CSR matrix is passed as its three arrays -- ``data`` (nnz,) float32 or
float64, ``indices`` (nnz,) column indices, ``indptr`` (m + 1,) row starts --
and row i is the entries ``indptr[i]:indptr[i+1]``. The edge
(:mod:`fastsoftmax._sparse`) hands every kernel except the validation scan
``indices`` as int32 (int64 only when n >= 2**31) and ``indptr`` as int64,
so each kernel compiles once per data dtype, not four times.

Weights are stored (n, k): a nonzero x_f of a row touches the contiguous
k-vector W[f] (a gather in the forward pass, a scatter in the backward
pass), so the work is O(nnz k) and the inner loops run over k. Entries are
used one by one and linearly, so unsorted column indices and repeated ones
within a row give exactly what the summed-duplicates matrix gives (up to
the order of the additions).

Full-data kernels run over row chunks in a ``prange``. A feature-indexed
sum (the gradient Xᵀ E, a Hessian product Xᵀ S) is formed in one of two
ways, picked by the launcher:

* scatter: every chunk scatters into its own (n, k) accumulator -- chunk 0
  into the caller's result, chunk c > 0 into ``Gp[c - 1]`` -- and
  :func:`_finish_partials` adds the parts (in chunk order, over disjoint
  feature blocks) after the row pass. (n_chunks - 1) n k extra numbers.
* transpose: the row pass stores the rows of E (m, k) instead, and
  :func:`_csc_gather` runs over the columns of X (the CSR arrays of Xᵀ,
  a copy the caller keeps), each row of the result gathered by one thread.
  m k extra numbers plus the copy of X; no zeroing or adding of n k-sized
  buffers, which is what makes it the faster one on wide data.
* panels: X's entries regrouped by column panels (a copy the caller
  keeps, :func:`_panel_layout` and :func:`_panel_fill`), each panel's
  columns few enough that its rows of W (or of the gradient) stay in a
  core's L2 cache. The row pass (:func:`_panel_row_pass`) sweeps each
  thread's rows once per panel, gathering from that panel's rows of W
  only, and stores E; the column pass (:func:`_panel_column_pass`) gives
  each panel to one thread, which scatters every row of E into its own
  rows of the gradient. On data whose W is many times L2 (text), the
  other two schemes' gathers and scatters miss L2 at random; here they hit
  it, and E and X stream in order. m k extra numbers plus the copy of X.

None ever writes one array from two threads.

The per-row softmax error, loss term and finiteness test are the dense
kernels' (:func:`._fused._row_error`), and so are the SGD step size and
intercept step (:mod:`._sgd`). The Hessian product on CSR data,
:func:`._hessp._sparse_hessp`, lives with the dense ones and uses this
module's row helpers (:func:`_affine_row`, :func:`_chunk_sums`,
:func:`_scatter`) and column passes.
"""

import numpy as np
from numba import njit, prange

from ._ahead import prefetch, prefetch_row
from ._common import _chunk, _softmax_inplace, _zero1, _zero2
from ._config import JIT, PJIT, PJIT_STRICT, itemsize
from ._fused import _row_error
from ._sgd import _eta, _intercept_step

# Problems reported by the validation scan (the edge turns them into words).
BAD_INDPTR = 1  # indptr decreases at the row, or points outside [0, nnz]
BAD_INDEX = 2  # a column index outside [0, n)
BAD_VALUE = 3  # a NaN or +-inf value

# SGD with L2 and no momentum keeps W = wscale * W_hat (scikit-learn's
# WeightVector trick): the shrink W <- (1 - eta alpha) W is one multiply of
# wscale, so an update touches only the batch's features. When |wscale|
# falls below this, W_hat is multiplied out (O(n k), once every
# log(1e9) / (eta alpha) ~ 21 / (eta alpha) steps) before a division by a
# tiny wscale could overflow W_hat. scikit-learn's threshold.
WSCALE_MIN = 1e-9


@njit(inline="always", **JIT)
def _gather(data, indices, lo, hi, W, z):
    """Add sum over p in [lo, hi) of data[p] * W[indices[p]] to z (one CSR row)."""
    _gather_scaled(data, indices, lo, hi, W, z, W.dtype.type(1))


@njit(inline="always", **JIT)
def _gather_scaled(data, indices, lo, hi, W, z, s):
    """Add sum over p in [lo, hi) of (s data[p]) * W[indices[p]] to z (one CSR row).

    The scale goes on each value before it meets W: a Hessian product
    along a huge direction (features ~1e150 give gradients that large)
    is taken along the direction times a small s without forming it, and
    without the product of the two overflowing first.

    Four entries per pass over z: z stays in memory (k is not known when
    compiling), and each += on it is a store-to-load chain of ~9 cycles per
    pass, which one entry per pass would pay per entry. Measured on the text
    benchmark (k = 20, W out of L2): 10 % faster than one entry per pass;
    blocks of 8 or 16 classes held in registers (one pass over the entries
    per block) were 1.5-2x slower.
    """
    k = z.shape[0]
    p = lo
    while p + 4 <= hi:
        v0 = s * data[p]
        v1 = s * data[p + 1]
        v2 = s * data[p + 2]
        v3 = s * data[p + 3]
        w0 = W[indices[p]]
        w1 = W[indices[p + 1]]
        w2 = W[indices[p + 2]]
        w3 = W[indices[p + 3]]
        for j in range(k):
            z[j] += (v0 * w0[j] + v1 * w1[j]) + (v2 * w2[j] + v3 * w3[j])
        p += 4
    while p < hi:
        v = s * data[p]
        w = W[indices[p]]
        for j in range(k):
            z[j] += v * w[j]
        p += 1


@njit(inline="always", **JIT)
def _scatter(data, indices, lo, hi, e, G):
    """G[indices[p]] += data[p] * e for p in [lo, hi) (one CSR row)."""
    k = e.shape[0]
    for p in range(lo, hi):
        v = data[p]
        f = indices[p]
        for j in range(k):
            G[f, j] += v * e[j]


@njit(inline="always", **JIT)
def _affine_row(data, indices, indptr, i, W, b, z):
    """OUT z = x_i W + b for row i of a CSR matrix (z (k,), W (n, k))."""
    _affine_row_scaled(data, indices, indptr, i, W, b, z, W.dtype.type(1))


@njit(inline="always", **JIT)
def _affine_row_scaled(data, indices, indptr, i, W, b, z, s):
    """OUT z = s x_i W + b for row i of a CSR matrix (see :func:`_gather_scaled`)."""
    for j in range(z.shape[0]):
        z[j] = b[j]
    _gather_scaled(data, indices, indptr[i], indptr[i + 1], W, z, s)


@njit(inline="always", **JIT)
def _chunk_sums(c, G0, Gp, gb, rows_stored):
    """Chunk c's accumulators, zeroed: (G, gb[c]); the full-data kernels' start.

    Scatter scheme: G is G0 for chunk 0, Gp[c - 1] otherwise, zeroed by its
    own thread (first touch on its core). Transpose scheme (``rows_stored``):
    G is the empty G0, untouched.
    """
    G = G0
    if not rows_stored:
        if c > 0:
            G = Gp[c - 1]
        _zero2(G)
    gbc = gb[c]
    _zero1(gbc)
    return G, gbc


# Each entry of a row gathers a row of W from wherever its feature puts
# it: at text sizes (millions of features) W is far larger than the caches
# and every gather waits for memory. So the row passes over X first ask for
# the rows of W that the row ROW_AHEAD further on will gather
# (:func:`_prefetch_weights`; the column pass, for the rows of E), and the
# SGD epoch, whose rows come in shuffled order, also for that row's entries
# and start (:func:`_prefetch_ahead`). Not the panel scheme, whose panels'
# rows of W stay in L2, nor where W is small enough to stay in the caches
# (below PREFETCH_MIN_BYTES): an SGD epoch with W of 1.6 MB took 1.12x the
# time with the prefetches, with W of 16 MB 0.82x. Ad hoc on the 2-core AMD
# host, 200,000 x 2,000,000 with 20 uniformly drawn entries a row, k = 20
# (float32 / float64): an SGD epoch 0.53x / 0.55x the time (2 to 6 rows
# ahead alike), prediction 0.38x / 0.52x; the transpose scheme's loss and
# gradient 0.65x. BENCHMARKS.md, "Twenty-fourth session".
SGD_AHEAD_ROWS = 4
ROW_AHEAD = 4
PREFETCH_MIN_BYTES = 8 << 20


@njit(inline="always", **JIT)
def _far(W):
    """Whether the rows gathered from W (any 2-D array) are prefetched (PREFETCH_MIN_BYTES)."""
    return W.size * itemsize(W) >= PREFETCH_MIN_BYTES


@njit(inline="always", **JIT)
def _prefetch_weights(indices, indptr, i, W):
    """Prefetch the rows of W (n, k) that CSR row i's entries gather (into L2)."""
    k = W.shape[1]
    for p in range(indptr[i], indptr[i + 1]):
        prefetch_row(W, indices[p], 0, k)


@njit(inline="always", **JIT)
def _prefetch_ahead(data, indices, indptr, order, p, W):
    """Prefetch, before visiting order[p], what the rows after it will read.

    In three stages, SGD_AHEAD_ROWS apart, so that each stage's addresses
    are in the cache when the next asks for them: the rows of W gathered by
    order[p + d], the entries (indices and values) of order[p + 2 d], and
    the row start indptr[order[p + 3 d]].
    """
    m = order.shape[0]
    d = SGD_AHEAD_ROWS
    if p + d < m:
        _prefetch_weights(indices, indptr, order[p + d], W)
    if p + 2 * d < m:
        r = order[p + 2 * d]
        lo = indptr[r]
        hi = indptr[r + 1]
        if hi > lo:
            prefetch(indices, lo)
            prefetch(indices, hi - 1)
            prefetch(data, lo)
            prefetch(data, hi - 1)
    if p + 3 * d < m:
        prefetch(indptr, order[p + 3 * d])


@njit(**PJIT)
def _sparse_loss_grad(data, indices, indptr, y, Y, sw, soft, weighted, scale, W, b,
                      P, E, G0, Gp, gb, loss, bad_row, scratch):
    """Loss terms and Xᵀ E (or E itself) of a CSR matrix in one pass over its rows.

    IN     data, indices, indptr: the CSR arrays (m rows).
    IN     y (m,) int64 labels (``soft`` False) or Y (m, k) targets (``soft``
           True), the unused one empty; sw (m,) sample weights if
           ``weighted`` (else empty); scale = 1 / sum of the weights.
    IN     W (n, k), b (k,).
    OUT    P (m, k): softmax(X W + b), written when P has m rows; pass an
           empty (0, k) array not to store it.
    OUT    E (m, k): the error rows scale * w_i * (p_i - y_i), written when E
           has m rows (the transpose scheme: Xᵀ E is then the caller's column
           pass, :func:`_csc_gather`, and G0, Gp are not touched; pass them
           empty). With an empty (0, k) E, the scatter scheme:
    OUT    G0 (n, k): chunk 0's part of Xᵀ E.
    OUT    Gp (n_chunks - 1, n, k): the other chunks' parts.
    OUT    gb (n_chunks, k + pad): per-chunk column sums of E in the first k
           entries of each row (the padding keeps two chunks' sums off one
           cache line).
    OUT    loss (n_chunks,) float64: per-chunk sums of w_i * cross-entropy_i.
    OUT    bad_row (n_chunks,) int64: first row of the chunk whose logits are
           not finite (the chunk's other outputs are then incomplete), or -1.
    SCRATCH scratch (n_chunks, 1 + pad, k): row 0 used (scatter scheme).

    Per row: z = b + sum_f x_f W[f] (a gather of k-vectors), the error row
    and loss term by :func:`_row_error`, then G[f] += x_f e (a scatter), or
    e stored as row i of E. The row's entries are read twice, from L1: a
    row of text is a few dozen entries.
    """
    n_chunks = gb.shape[0]
    m = indptr.shape[0] - 1
    k = W.shape[1]
    store_p = P.shape[0] > 0
    store_e = E.shape[0] > 0
    far = _far(W)
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        G, gbc = _chunk_sums(c, G0, Gp, gb, store_e)
        bad_row[c] = -1
        acc = 0.0
        for i in range(start, stop):
            z = E[i] if store_e else scratch[c, 0]
            if far and i + ROW_AHEAD < stop:
                _prefetch_weights(indices, indptr, i + ROW_AHEAD, W)
            _affine_row(data, indices, indptr, i, W, b, z)
            if store_p:
                for j in range(k):
                    P[i, j] = z[j]
            part, ok = _row_error(z, i, y, Y, sw, soft, weighted, scale, gbc)
            if not ok:
                bad_row[c] = i
                break
            acc += part
            if store_p:
                # One more exp per row, only when P is kept: _row_error has
                # overwritten z with scale * w * (p - y), from which p cannot
                # be recovered for a zero weight.
                _softmax_inplace(P[i])
            if not store_e:
                _scatter(data, indices, indptr[i], indptr[i + 1], z, G)
        loss[c] = acc


@njit(inline="always", **JIT)
def _penalty_row(g, w, a, add, acc):
    """Add the L2 term to one gradient row: g += a w (``add``) or g = a w.

    Returns acc + ||w||² (float64, summed in the order of the entries).
    ``add`` is a constant at each call site, so the branch folds away.
    """
    for j in range(g.shape[0]):
        v = w[j]
        if add:
            g[j] += a * v
        else:
            g[j] = a * v
        acc += np.float64(v) * np.float64(v)
    return acc


@njit(**PJIT)
def _csc_gather(tdata, tindices, tindptr, E, W, alpha, G, wsq):
    """Column pass of the transpose scheme: G = Xᵀ E + alpha W, and ||W||².

    IN     tdata, tindices, tindptr: the CSR arrays of Xᵀ (the CSC arrays of
           X: row f lists the entries of column f, with their row indices).
    IN     E (m, k): error rows (or the Hessian product's s rows).
    IN     W (n, k), alpha: the L2 term added to each row of G.
    OUT    G (n, k): every row written once, by one thread (no partial sums,
           no reduction, no zeroing pass).
    OUT    wsq (n_chunks,) float64: per-chunk sums of ||W[f]||² (the
           penalty's value; float64, a sum over n k terms).

    G[f] is a gather of the rows of E, the row pass's gather turned around;
    E is m k numbers, read at random, written once by the row pass.
    """
    n_chunks = wsq.shape[0]
    n = tindptr.shape[0] - 1
    a = G.dtype.type(alpha)
    far = _far(E)
    for c in prange(n_chunks):
        start, stop = _chunk(n, n_chunks, c)
        acc = 0.0
        for f in range(start, stop):
            g = G[f]
            if far and f + ROW_AHEAD < stop:
                _prefetch_weights(tindices, tindptr, f + ROW_AHEAD, E)
            acc = _penalty_row(g, W[f], a, False, acc)
            _gather(tdata, tindices, tindptr[f], tindptr[f + 1], E, g)
        wsq[c] = acc


@njit(**PJIT)
def _finish_partials(G0, Gp, W, alpha, wsq):
    """Scatter scheme's last pass: G0 += sum_c Gp[c] + alpha W, and ||W||².

    IN/OUT G0 (n, k): chunk 0's part in, the gradient (without the
           intercept) out.
    IN     Gp (n_chunks - 1, n, k): the other chunks' parts.
    IN     W (n, k), alpha.
    OUT    wsq (n_blocks,) float64: per-block sums of ||W[f]||².

    Parallel over blocks of features, each block's rows written by one
    thread; every entry sums the parts in chunk order (0, 1, ...), so the
    result does not depend on n_blocks. One read of each part and of W,
    against three separate NumPy passes (add, axpy, norm) that each read G0.
    """
    n_blocks = wsq.shape[0]
    n, k = G0.shape
    a = G0.dtype.type(alpha)
    for c in prange(n_blocks):
        start, stop = _chunk(n, n_blocks, c)
        acc = 0.0
        for f in range(start, stop):
            g = G0[f]
            for q in range(Gp.shape[0]):
                h = Gp[q, f]
                for j in range(k):
                    g[j] += h[j]
            acc = _penalty_row(g, W[f], a, True, acc)
        wsq[c] = acc


@njit(**PJIT)
def _panel_layout(indices, indptr, col_panel, ptr, n_chunks):
    """Count the entries of the panel scheme's layout, per panel and row, into offsets.

    ptr[p, i] to ptr[p, i + 1] are row i's entries in panel p, panels one
    after the other (panel-major).

    IN     indices, indptr: the CSR arrays of X (m rows).
    IN     col_panel (n,) int64: the panel of each column; n_chunks: row chunks.
    OUT    ptr (n_panels, m + 1) int64.
    """
    n_panels = ptr.shape[0]
    m = indptr.shape[0] - 1
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        for i in range(start, stop):
            for p in range(n_panels):
                ptr[p, i + 1] = 0
            for q in range(indptr[i], indptr[i + 1]):
                ptr[col_panel[indices[q]], i + 1] += 1
    offset = 0
    for p in range(n_panels):
        ptr[p, 0] = offset
        for i in range(m):
            offset += ptr[p, i + 1]
            ptr[p, i + 1] = offset


@njit(**PJIT)
def _panel_fill(data, indices, indptr, col_panel, ptr, pdata, pindices, n_chunks):
    """Copy X's entries into the panel scheme's layout (offsets from :func:`_panel_layout`).

    OUT    pdata, pindices (nnz,): the entries, panel by panel and, within a
           panel, row by row in the order they have in their CSR row.
    """
    n_panels = ptr.shape[0]
    m = indptr.shape[0] - 1
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        cursor = np.empty(n_panels, np.int64)
        for i in range(start, stop):
            for p in range(n_panels):
                cursor[p] = ptr[p, i]
            for q in range(indptr[i], indptr[i + 1]):
                f = indices[q]
                p = col_panel[f]
                pdata[cursor[p]] = data[q]
                pindices[cursor[p]] = f
                cursor[p] += 1


@njit(**PJIT)
def _panel_row_pass(pdata, pindices, ptr, y, Y, sw, soft, weighted, scale, W, b,
                    P, E, gb, loss, bad_row):
    """Run the panel scheme's row pass: loss terms and the error rows E.

    IN     pdata, pindices, ptr: X in the panel layout (:func:`_panel_fill`).
    IN     y, Y, sw, soft, weighted, scale, W, b: as in :func:`_sparse_loss_grad`.
    OUT    P (m, k) or empty, E (m, k), gb, loss, bad_row: as there.

    Each chunk of rows first sets its rows of E to b, then, panel after
    panel, adds each row's entries in that panel (a gather from the
    panel's rows of W, which stay in L2 while the chunk's rows of E
    stream past), then turns each row into its error row.
    """
    n_chunks = gb.shape[0]
    n_panels = ptr.shape[0]
    m = ptr.shape[1] - 1
    k = W.shape[1]
    store_p = P.shape[0] > 0
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        gbc = gb[c]
        _zero1(gbc)
        bad_row[c] = -1
        for i in range(start, stop):
            z = E[i]
            for j in range(k):
                z[j] = b[j]
        for p in range(n_panels):
            pp = ptr[p]
            for i in range(start, stop):
                _gather(pdata, pindices, pp[i], pp[i + 1], W, E[i])
        acc = 0.0
        for i in range(start, stop):
            z = E[i]
            if store_p:
                for j in range(k):
                    P[i, j] = z[j]
            part, ok = _row_error(z, i, y, Y, sw, soft, weighted, scale, gbc)
            if not ok:
                bad_row[c] = i
                break
            acc += part
            if store_p:
                _softmax_inplace(P[i])
        loss[c] = acc


@njit(**PJIT)
def _panel_column_pass(pdata, pindices, ptr, bounds, owned, owner_start, E, W, alpha, G, wsq):
    """Run the panel scheme's column pass: G = Xᵀ E + alpha W, and ||W||² per panel.

    IN     pdata, pindices, ptr: X in the panel layout; bounds (n_panels + 1,):
           panel p holds columns bounds[p] to bounds[p + 1].
    IN     owned (n_panels,), owner_start (n_owners + 1,) int64: owner t (one
           per thread) forms the panels owned[owner_start[t]:owner_start[t + 1]]
           (:meth:`fastsoftmax._sparse.Panels.owners`).
    IN     E (m, k): error rows (or a Hessian product's s rows).
    IN     W (n, k), alpha.
    OUT    G (n, k): panel p's rows written by its owner only.
    OUT    wsq (n_panels,) float64: per-panel sums of ||W[f]||².
    """
    n_owners = owner_start.shape[0] - 1
    m = ptr.shape[1] - 1
    a = G.dtype.type(alpha)
    for t in prange(n_owners):
        for q in range(owner_start[t], owner_start[t + 1]):
            p = owned[q]
            acc = 0.0
            for f in range(bounds[p], bounds[p + 1]):
                acc = _penalty_row(G[f], W[f], a, False, acc)
            pp = ptr[p]
            for i in range(m):
                lo = pp[i]
                hi = pp[i + 1]
                if lo < hi:
                    _scatter(pdata, pindices, lo, hi, E[i], G)
            wsq[p] = acc


@njit(**PJIT)
def _sparse_logits(data, indices, indptr, W, b, out, n_chunks):
    """OUT out (m, k) = X W + b, rows split into n_chunks parallel chunks."""
    m = indptr.shape[0] - 1
    far = _far(W)
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        for i in range(start, stop):
            if far and i + ROW_AHEAD < stop:
                _prefetch_weights(indices, indptr, i + ROW_AHEAD, W)
            _affine_row(data, indices, indptr, i, W, b, out[i])


@njit(**PJIT)
def _sparse_predict(data, indices, indptr, W, b, out, scratch):
    """OUT out (m,) = argmax_j (X W + b)_ij, ties to the lowest j.

    SCRATCH scratch (n_chunks, r, k), r >= 1: row 0 holds one row of logits
    per chunk, so no (m, k) array is built (the other rows keep chunks'
    rows off each other's cache lines). Same comparison as the dense
    :func:`fastsoftmax._prediction.labels`.
    """
    m = indptr.shape[0] - 1
    k = W.shape[1]
    n_chunks = scratch.shape[0]
    far = _far(W)
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        z = scratch[c, 0]
        for i in range(start, stop):
            if far and i + ROW_AHEAD < stop:
                _prefetch_weights(indices, indptr, i + ROW_AHEAD, W)
            _affine_row(data, indices, indptr, i, W, b, z)
            best = 0
            top = z[0]
            for j in range(1, k):
                if z[j] > top:
                    top = z[j]
                    best = j
            out[i] = best


@njit(**PJIT_STRICT)
def _csr_first_bad_row(data, indices, indptr, n, bad_row, bad_kind):
    """Find, per chunk, the first row that is not a valid finite CSR row.

    IN     data (nnz,), indices (nnz,) of any integer width, indptr (m + 1,)
           int64; n the number of columns.
    OUT    bad_row (n_chunks,) int64: the first bad row of the chunk, or -1.
    OUT    bad_kind (n_chunks,) int64: BAD_INDPTR (the row's range
           indptr[i]:indptr[i+1] decreases or leaves [0, nnz]), BAD_INDEX (a
           column index outside [0, n)) or BAD_VALUE (NaN or +-inf), in that
           order of precedence within a row; 0 when the chunk is clean.

    The row's range is checked before it is read, so a broken indptr never
    makes the scan read out of bounds.
    """
    m = indptr.shape[0] - 1
    nnz = indices.shape[0]
    n_chunks = bad_row.shape[0]
    big = np.finfo(data.dtype).max
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        bad_row[c] = -1
        bad_kind[c] = 0
        for i in range(start, stop):
            lo = indptr[i]
            hi = indptr[i + 1]
            if lo < 0 or hi < lo or hi > nnz:
                bad_row[c] = i
                bad_kind[c] = BAD_INDPTR
                break
            # Counted, not branched on, so that the loops vectorise (as in
            # _checks._first_nonfinite_row); |x| <= max is false exactly for
            # NaN and +-inf.
            n_index = 0
            n_value = 0
            for p in range(lo, hi):
                f = indices[p]
                n_index += (f < 0) | (f >= n)
                n_value += not (abs(data[p]) <= big)
            if n_index or n_value:
                bad_row[c] = i
                bad_kind[c] = BAD_INDEX if n_index else BAD_VALUE
                break


@njit(**JIT)
def _sparse_sgd_epoch(data, indices, indptr, y, Y, sw, soft, weighted, order, batch_size,
                      scale, W, wscale, b, fit_intercept, alpha, VW, Vb, momentum, nesterov,
                      eta0, schedule, power_t, t0, steps_per_epoch, E, gb, loss_out):
    """One epoch of mini-batch SGD over the CSR rows ``order``, in place.

    IN     data, indices, indptr: the CSR arrays; y, Y, sw, soft, weighted
           as in :func:`_sparse_loss_grad`; order (m_epoch,) int64 rows in
           visiting order; scale = m / sum of the weights (divided here by
           the batch size, as in the dense :func:`._sgd._sgd_epoch`).
    IN/OUT W (n, k): W_hat, the weights divided by wscale[0].
    IN/OUT wscale (1,) float64: the weights are wscale[0] * W_hat. Stays 1
           when alpha == 0; with momentum > 0 it is multiplied out first
           and stays 1.
    IN/OUT b (k,); VW (n, k), Vb (k,): velocities. VW is read and written
           only when momentum > 0 (pass an empty (0, k) array otherwise);
           Vb always (zeros when momentum == 0).
    IN     alpha, momentum, nesterov, eta0, schedule (SCHEDULE_CONSTANT or
           SCHEDULE_INVSCALING), power_t, t0 (updates before this epoch),
           steps_per_epoch: as in the dense epoch.
    SCRATCH E (batch_size, k): the batch's error rows; gb (k,).
    OUT    loss_out (1,) float64: sum of w_i * CE_i over the epoch's rows,
           each with the weights in force for its batch.

    Returns the number of updates, or -(updates + 1) when a row's logits are
    not finite (W, wscale, b are then consistent with the updates made, and
    the caller restores its snapshot).

    Cost per batch of B rows: the logits and errors of the B rows with the
    weights before the step (O(nnz_B k)), then

    * momentum == 0: W <- (1 - eta alpha) W - eta G as wscale *= (1 - eta
      alpha) and W_hat[f] -= (eta / wscale) x_f e for the batch's entries:
      O(nnz_B k), independent of n (plus the rare rescale of WSCALE_MIN);
    * momentum > 0: the velocity decays everywhere, v <- mu v - eta (alpha W
      + G), so a dense sweep over all n k weights per batch is unavoidable:
      O(n k + nnz_B k). The dense part (mu v - eta alpha W) is applied first,
      the sparse part (-eta G, and -(1 + mu) eta G for Nesterov) after.

    Serial: a batch holds far too little work for a parallel launch.
    """
    m = order.shape[0]
    n, k = W.shape
    dt = W.dtype.type
    mu = dt(momentum)
    a = dt(alpha)
    use_velocity = momentum != 0.0
    far = _far(W)
    ws = wscale[0]
    if use_velocity and ws != 1.0:
        s = dt(ws)
        for f in range(n):
            for j in range(k):
                W[f, j] *= s
        ws = 1.0
    total = 0.0
    t = t0
    n_steps = 0
    for start in range(0, m, batch_size):
        stop = min(m, start + batch_size)
        bs = stop - start
        eta64 = _eta(schedule, eta0, t, steps_per_epoch, power_t)
        eta = dt(eta64)
        coef = dt(scale / bs)
        wsd = dt(ws)
        # ---- errors of the batch at the current weights ------------------
        _zero1(gb)
        for q in range(bs):
            i = order[start + q]
            z = E[q]
            _zero1(z)
            if far:
                _prefetch_ahead(data, indices, indptr, order, start + q, W)
            _gather(data, indices, indptr[i], indptr[i + 1], W, z)
            for j in range(k):
                z[j] = wsd * z[j] + b[j]
            ce, ok = _row_error(z, i, y, Y, sw, soft, weighted, coef, gb)
            if not ok:
                wscale[0] = ws
                return -(n_steps + 1)
            total += ce
        # ---- update ------------------------------------------------------
        if use_velocity:
            for f in range(n):
                for j in range(k):
                    w = W[f, j]
                    g = a * w
                    v = mu * VW[f, j] - eta * g
                    VW[f, j] = v
                    if nesterov:
                        W[f, j] = w + (mu * v - eta * g)
                    else:
                        W[f, j] = w + v
            step_w = eta * (mu + dt(1)) if nesterov else eta
            for q in range(bs):
                i = order[start + q]
                e = E[q]
                for p in range(indptr[i], indptr[i + 1]):
                    x = data[p]
                    f = indices[p]
                    for j in range(k):
                        d = x * e[j]
                        VW[f, j] -= eta * d
                        W[f, j] -= step_w * d
        else:
            if alpha != 0.0:
                ws *= 1.0 - eta64 * alpha
                if abs(ws) < WSCALE_MIN:
                    # Multiply out (also covers eta alpha == 1: W becomes 0).
                    s = dt(ws)
                    for f in range(n):
                        for j in range(k):
                            W[f, j] *= s
                    ws = 1.0
            step = dt(-eta64 / ws)
            for q in range(bs):
                i = order[start + q]
                e = E[q]
                for j in range(k):
                    e[j] *= step
                _scatter(data, indices, indptr[i], indptr[i + 1], e, W)
        if fit_intercept:
            _intercept_step(b, Vb, gb, mu, eta, nesterov)
        t += 1
        n_steps += 1
    wscale[0] = ws
    loss_out[0] = total
    return n_steps
