"""Hessian-vector products, fused over X.

The Hessian of J(W, b) = sum_i w_i CE_i / sum(w) + alpha/2 ||W||² with
respect to the logits z_i is d_i (diag(p_i) - p_i p_iᵀ), d_i = w_i / sum(w),
whatever the targets (hard or soft). For a direction (V, c) the kernels
compute, row by row,

    u_i = V x_i + c                          (k logits of the direction)
    s_i = d_i (p_i ⊙ u_i - p_i <p_i, u_i>)
    H (V, c) = (sum_i s_i x_iᵀ, sum_i s_i)   (the caller adds alpha V)

reading each row of X once per call and building no (m, k) array.

Probabilities: ``P`` is either the (m, k) matrix softmax(X W + b) stored by
the gradient pass at this point (:mod:`._fused`, "cached": a product is
then one forward and one backward sweep, U = X Vᵀ and Sᵀ X) or an empty
(0, k) array ("recompute": the forward sweep also forms X W + b and its
softmax, for when m k numbers are more than the memory budget). One
compiled specialisation serves both. The logits at this point have been
checked finite by that gradient pass, so the recomputed softmax skips the
test.

Two strategies, as the gradient has:

* rows (small k): weights and direction in coef layout (k, n), 4 rows x 3
  classes register tiles of :mod:`._micro`;
* gemm (large k): W and V (n, k), row blocks through BLAS (which must run
  single-threaded: the parallelism is over row chunks); on rows of few
  features and classes each block is stored transposed
  (:func:`_hessp_gemm_t`), as the gradient's logits are
  (``_fused._gemm_t_chunk``).

Every accumulator has a leading chunk axis (n_chunks, ...); the caller sums
the chunks and adds alpha V. For few rows over a large n k,
:func:`_hessp_gemm_split` splits the backward product by features instead
and writes the one product.

Layout of the functions: ``_*_chunk`` is the whole work of one chunk of
rows, a plain (not inlined) compiled function; the parallel kernel is a
``prange`` over chunks that calls it. A small problem runs as one chunk:
the chunk function called from Python (``_launch.run_one_chunk``): no
second compiled kernel. Not inlining also keeps
Numba's parfor passes off the unrolled tile code (see :mod:`._sgd`: an
inlined tile body made one compile take minutes).

CSR data (:func:`_sparse_hessp`): the row pass of :mod:`._sparse` (a
gather per row, then a scatter of s_i, or s_i stored for the transpose
scheme), with the same per-row s_i (:func:`_row_hvp`); P always cached.

Accumulation is in X's dtype, as in the gradient (the per-chunk G of a
float32 problem is summed in float32 over m / n_chunks rows; the tests bound
the error against the float64 reference).
"""

import numpy as np
from numba import njit, prange

from ._ahead import _logits_ahead, logits_prefetching
from ._backward import accumulate4_ahead, accumulate4_cols
from ._blas import _gemm_into
from ._common import (
    _ahead_share,
    _chunk,
    _chunk_partials,
    _chunk_partials_set,
    _exp_flat,
    _softmax_inplace,
    _touch,
    _touch_rows,
    _touches,
    _zero1,
)
from ._config import JIT, PJIT, itemsize
from ._fused import (
    ERROR_T_MAX_FEATURES,
    ERROR_T_ROWS,
    PANEL_MIN_K,
    _blas_backward,
    _blas_forward,
    _panel_features,
    no_rest_backward,
    no_rest_forward,
    rest_array,
    rest_backward,
    rest_forward,
    rest_store,
    rest_transposed,
)
from ._micro import _accumulate1, _accumulate4_cols, _eight_rows, _logits1, _logits4
from ._outer import (
    backward_vectors,
    forward_vectors,
    lanes,
    no_rest,
    pack_block,
    pack_buffer,
    rest_classes,
    rest_rows,
    spare_rows,
)
from ._rowvec import bias_dot_row, bias_max_finite_row, exp_row, hvp_update_row, scale_row
from ._sparse import (
    ROW_AHEAD,
    _affine_row_scaled,
    _chunk_sums,
    _far,
    _gather_scaled,
    _prefetch_weights,
    _scatter,
)
from ._width import _wide_vectors_marked


@njit(inline="always", **JIT)
def _row_weight(i, sw, weighted, scale):
    """d_i = scale * w_i (scale = 1 / sum(w)), or scale without weights."""
    return scale * sw[i] if weighted else scale


@njit(inline="always", **JIT)
def _row_hvp(p, u, d, gc):
    """INOUT u: u_i -> s_i = d (p ⊙ u - p <p, u>), also added to gc (OUT)."""
    k = u.shape[0]
    pu = u.dtype.type(0)
    for j in range(k):
        pu += p[j] * u[j]
    for j in range(k):
        s = d * p[j] * (u[j] - pu)
        u[j] = s
        gc[j] += s


# Scratch rows per chunk of the rows kernel (_hessp_rows_chunk): two blocks
# of ERROR_T_ROWS for wide float32 rows (the loop of four or eight rows
# uses the first 16).
HESSP_SCRATCH_ROWS = 2 * ERROR_T_ROWS


@njit(**JIT)
def _hessp_rows_chunk(c, X, P, sw, weighted, scale, Wt, b, Vt, cv, G, gc, scratch, width,
                      blocks, micro):
    """Chunk c of the small-k Hessian-vector product (c < n_chunks = G.shape[0]).

    IN    X (m, n); P (m, k) probabilities or (0, k): recompute them from
          Wt (k, n) and b (k,); sw (m,) sample weights (or empty, with
          weighted False); scale = 1 / sum(w); Vt (k, n) and cv (k,) the
          direction (cv zeros when there is no intercept). Wt, Vt and G
          may have padded rows (k, n' >= n): only the first n entries of a
          row are read or written.
    OUT   G[c] (k, n) = this chunk's sum_i s_i x_iᵀ; gc[c] (k,) = sum_i s_i.
    SCRATCH scratch[c] (r, k), r >= 16: eight rows of probabilities, eight
          of u / s; with r >= 2 ERROR_T_ROWS, wide float32 rows go in
          blocks (below).

    Four rows at a time: u = X Vᵀ + c by the logit tiles, s in place, and
    the accumulation tiles while the rows are still in L1; with P not
    cached the forward sweep runs the logit tile twice (W, then V) on the
    same four rows, so X is still read from memory once. Where ``micro``
    is None (AVX-512 hosts: ``_ahead.HESSP_MICRO``) the logits come from
    the tiles of :mod:`._ahead`, as
    ``_fused._rows_chunk``'s do (eight rows at a time in float32 where the
    gradient's kernel takes eight: ``_micro.EIGHT_ROWS_N``,
    ``_micro.EIGHT_ROWS_MAX_K``, then two accumulations of four), and the
    direction's product prefetches the rows ahead; the accumulation is
    ``_backward.accumulate4_ahead`` (its IR tiles there, prefetching the
    rest of the rows ahead where X is read ahead); elsewhere from Numba's
    tiles of :mod:`._micro`, X read ahead by ``_common._touch``. Float32 rows of more
    than ``_fused.ERROR_T_MAX_FEATURES`` features and ``_fused.PANEL_MIN_K``
    classes or more go ``_fused.ERROR_T_ROWS`` at a time there, the
    accumulation in panels of features, as the gradient's do. ``width``,
    ``blocks``, ``micro``: the vector width's marker, the blocks' (None
    compiles the kernel without them: ``_fused.rows_blocks``) and the
    tiles' (None: the IR tiles alone).
    """
    _wide_vectors_marked(width, X)
    m = X.shape[0]
    start, stop, Gc, gcc = _chunk_partials(c, m, G, gc)
    cached = P.shape[0] != 0
    p8 = scratch[c, :8]
    u8 = scratch[c, 8:16]
    touch = _touches(X)
    touched = X.dtype.type(0)
    ahead_rows = _touch_rows(X)
    # The IR tiles of _ahead and _backward where micro is None; the
    # direction's product (which always runs) prefetches.
    tiles = micro is None
    eight = tiles and _eight_rows(X, Wt.shape[0])  # as in _fused._rows_chunk
    if tiles and touch:
        touched += _touch(X, start, min(stop, start + ahead_rows))
    pf_rows = ahead_rows if touch else 0
    i = start
    k = Wt.shape[0]
    n = X.shape[1]
    R = ERROR_T_ROWS
    # Wide float32 rows of PANEL_MIN_K classes or more (as in
    # _fused._rows_chunk): blocks of R rows, their accumulation in panels of
    # features that keep G's slice in L1; the rows' probabilities and u / s
    # in scratch rows [0, R) and [R, 2 R).
    # Numba prunes the branch before typing where ``blocks`` is None (float64,
    # which never runs it): typed and lowered, it was a quarter of the
    # float64 kernel's compile time (BENCHMARKS.md, "Forty-third session").
    if (blocks is not None and tiles and itemsize(X) == 4 and n > ERROR_T_MAX_FEATURES
            and PANEL_MIN_K <= k and scratch.shape[1] >= 2 * R):
        panel = _panel_features(k)
        pR = scratch[c, :R]
        uR = scratch[c, R:2 * R]
        while i + R <= stop:
            h = 0
            while h < R:
                nb = 8 if eight else 4
                # W's logits (unless P is cached), then V's, which prefetch:
                # one call site for both, half the tiles to compile.
                for s in range(1 if cached else 0, 2):
                    _logits_ahead(X, i + h, nb, Vt if s else Wt, cv if s else b,
                                  uR if s else pR, h, pf_rows if s else 0, stop)
                for q in range(nb):
                    if cached:
                        p = P[i + h + q]
                    else:
                        p = pR[h + q]
                        _softmax_inplace(p)
                    _row_hvp(p, uR[h + q], _row_weight(i + h + q, sw, weighted, scale), gcc)
                h += nb
            for f0 in range(0, n, panel):
                f1 = min(n, f0 + panel)
                for h in range(0, R, 4):
                    r0 = i + h
                    accumulate4_cols(X, r0, r0 + 1, r0 + 2, r0 + 3, uR, h, Gc, f0, f1)
            i += R
    ahead = i
    while i + 4 <= stop:
        if touch and not tiles and i >= ahead:
            ahead = min(stop, i + ahead_rows)
            touched += _touch(X, i, ahead)
        nb = 8 if eight and i + 8 <= stop else 4
        # The rows pf_rows ahead prefetched half by the forward tiles, half
        # by the backward tiles (as in _fused._rows_chunk).
        nxt = i + pf_rows
        half = nb // 2
        if micro is None or tiles:
            first, rows = _ahead_share(nxt, 0, half, stop, pf_rows)
            for s in range(1 if cached else 0, 2):  # W's (no prefetch), then V's
                logits_prefetching(X, i, nb, Vt if s else Wt, cv if s else b,
                                   u8 if s else p8, 0, first, rows if s else 0)
        else:
            if not cached:
                _logits4(X, i, i + 1, i + 2, i + 3, Wt, b, p8)
            _logits4(X, i, i + 1, i + 2, i + 3, Vt, cv, u8)
        for q in range(nb):
            if cached:
                p = P[i + q]
            else:
                p = p8[q]
                _softmax_inplace(p)
            _row_hvp(p, u8[q], _row_weight(i + q, sw, weighted, scale), gcc)
        for h in range(0, nb, 4):
            r0 = i + h
            first, rows = _ahead_share(nxt, half + h // 2, half + (h + 4) // 2, stop, pf_rows)
            # On micro itself, not on ``tiles``: Numba prunes a branch on an
            # argument's None-ness before typing, so a kernel compiled for
            # one kind of tiles holds no code of the other.
            if micro is None:
                accumulate4_ahead(X, r0, r0 + 1, r0 + 2, r0 + 3, u8, h, Gc, 0, n, first, rows)
            else:
                _accumulate4_cols(X, r0, r0 + 1, r0 + 2, r0 + 3, u8[h:h + 4], Gc, 0, n)
        i += nb
    # The last (stop - start) mod 4 rows, one by one.
    while i < stop:
        x = X[i]
        if cached:
            p = P[i]
        else:
            p = p8[0]
            _logits1(x, Wt, b, p)
            _softmax_inplace(p)
        u = u8[0]
        _logits1(x, Vt, cv, u)
        _row_hvp(p, u, _row_weight(i, sw, weighted, scale), gcc)
        _accumulate1(x, u, Gc)
        i += 1
    scratch[c, 15, 0] = touched  # keeps the reads ahead (_common._touch)


@njit(**PJIT)
def _hessp_rows(X, P, sw, weighted, scale, Wt, b, Vt, cv, G, gc, scratch, width, blocks,
                micro):
    """Small-k Hessian-vector product, chunks of rows in parallel.

    IN X, P, sw, weighted, scale, Wt, b, Vt, cv; OUT G (n_chunks, k, n),
    gc (n_chunks, k); SCRATCH scratch (n_chunks, 16, k). See
    :func:`_hessp_rows_chunk`, which is also the serial variant.
    """
    for c in prange(G.shape[0]):
        _hessp_rows_chunk(np.int64(c), X, P, sw, weighted, scale, Wt, b, Vt, cv,
                          G, gc, scratch, width, blocks, micro)


@njit(inline="always", **JIT)
def _proba_rows(Pb, b, mx, s):
    """INOUT Pb (rr, k): the logits Xb W in, softmax(Xb W + b) out, row by row.

    As ``_fused._store_proba`` computes them: the probabilities the
    gradient stores. (``mx`` and ``s``, the scratch of
    :func:`_proba_rows_lanes`, are not used.)
    """
    rr, k = Pb.shape
    for q in range(rr):
        z = Pb[q]
        for j in range(k):
            z[j] += b[j]
        _softmax_inplace(z)


@njit(inline="always", **JIT)
def _proba_rows_lanes(Pb, b, mx, s):
    """:func:`_proba_rows` for rows of at least ``_common.LANES_FROM`` classes.

    The sweeps of ``_fused._block_error_lanes`` (the bias and the maxima,
    the exps and their sums, times 1 / sum), as the gradient stores them.
    SCRATCH mx, s (at least rr entries).
    """
    rr = Pb.shape[0]
    one = Pb.dtype.type(1)
    for q in range(rr):
        mx[q] = bias_max_finite_row(Pb[q], b)[0]
    for q in range(rr):
        s[q] = exp_row(Pb[q], mx[q], Pb[q])
    for q in range(rr):
        scale_row(Pb[q], one / s[q])


@njit(inline="always", **JIT)
def _block_hvp(Pb, Ub, cv, r0, sw, weighted, scale, gc, pu):
    """INOUT Ub (rr, k): U = Xb V in, S out (u += cv, then :func:`_row_hvp`'s s); gc += S's rows.

    (``pu``, the scratch of :func:`_block_hvp_lanes`, is not used.)
    """
    rr, k = Ub.shape
    for q in range(rr):
        u = Ub[q]
        for j in range(k):
            u[j] += cv[j]
        _row_hvp(Pb[q], u, _row_weight(r0 + q, sw, weighted, scale), gc)


@njit(inline="always", **JIT)
def _block_hvp_lanes(Pb, Ub, cv, r0, sw, weighted, scale, gc, pu):
    """:func:`_block_hvp` for rows of at least ``_common.LANES_FROM`` classes.

    Two sweeps over the block (:func:`._rowvec.bias_dot_row`, then
    :func:`._rowvec.hvp_update_row`). Shorter rows keep the Numba loops,
    where the vector passes' masked steps cost more than they save (1.3x
    the time at k = 10, measured). SCRATCH pu (at least rr entries).
    """
    rr = Ub.shape[0]
    for q in range(rr):
        pu[q] = bias_dot_row(Ub[q], cv, Pb[q])
    for q in range(rr):
        hvp_update_row(Ub[q], Pb[q], pu[q], _row_weight(r0 + q, sw, weighted, scale), gc)


@njit(inline="always", **JIT)
def _hessp_gemm_body(c, X, P, sw, weighted, scale, W, b, V, cv, G, gc, scratch,
                     proba_rows, block_hvp):
    """Chunk c of the large-k Hessian-vector product (c < n_chunks = G.shape[0]).

    IN    X (m, n); P (m, k) or (0, k): recompute from W (n, k) and b (k,);
          sw, weighted, scale as in :func:`_hessp_rows_chunk`; V (n, k) and
          cv (k,) the direction.
    OUT   G[c] (n, k) = this chunk's sum_i x_i s_iᵀ; gc[c] (k,) = sum_i s_i.
    SCRATCH scratch[c] (2 R, k): a block of R rows of probabilities, then
          one of u / s.

    Per block of R rows (sized by the caller to keep the block of X in L2):
    U = Xb V (+ Pb = softmax(Xb W + b) by ``proba_rows`` on the logits
    when not cached), S in place by ``block_hvp``, Xbᵀ S, the products by
    BLAS. ``proba_rows`` and ``block_hvp`` are compiled functions:
    :func:`_proba_rows` and :func:`_block_hvp` in
    :func:`_hessp_gemm_chunk`, their ``_lanes`` forms in
    :func:`_hessp_gemm_chunk_lanes` (and in :func:`_hessp_tiles_body`,
    the same work on the tiles of ``_outer``).
    """
    m = X.shape[0]
    R = scratch.shape[1] // 2
    start, stop, Gc, gcc = _chunk_partials_set(c, m, G, gc)  # (the first block's sets G)
    cached = P.shape[0] != 0
    mx = np.empty(R, dtype=X.dtype)
    s = np.empty(R, dtype=X.dtype)
    Pc = scratch[c, :R]
    Uc = scratch[c, R:]
    for r0 in range(start, stop, R):
        rr = min(R, stop - r0)
        if cached:
            Pb = P[r0:r0 + rr]
        else:
            _blas_forward(X, r0, rr, W, Pc)
            Pb = Pc[:rr]
            proba_rows(Pb, b, mx, s)
        _blas_forward(X, r0, rr, V, Uc)
        block_hvp(Pb, Uc[:rr], cv, r0, sw, weighted, scale, gcc, mx)
        _blas_backward(X, r0, rr, Uc, Gc, r0 == start)


@njit(**JIT)
def _hessp_gemm_chunk(c, X, P, sw, weighted, scale, W, b, V, cv, G, gc, scratch):
    """:func:`_hessp_gemm_body` for rows of fewer than ``_common.LANES_FROM`` classes."""
    _hessp_gemm_body(c, X, P, sw, weighted, scale, W, b, V, cv, G, gc, scratch,
                     _proba_rows, _block_hvp)


@njit(**JIT)
def _hessp_gemm_chunk_lanes(c, X, P, sw, weighted, scale, W, b, V, cv, G, gc, scratch):
    """:func:`_hessp_gemm_body` for rows of at least ``_common.LANES_FROM`` classes."""
    _hessp_gemm_body(c, X, P, sw, weighted, scale, W, b, V, cv, G, gc, scratch,
                     _proba_rows_lanes, _block_hvp_lanes)


@njit(inline="always", **JIT)
def _hessp_tiles_body(c, X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch,
                      proba_rows, block_hvp, rest_count, rest_fwd, rest_bwd):
    """Chunk c of the tiles' Hessian product (:func:`_hessp_tiles_chunk`, its ``_lanes`` form).

    :func:`_hessp_gemm_body`'s work, its products by the tiles of
    ``_outer``, and as the gradient's ``_fused._tiles_body``: the classes
    of whole vectors on the tiles, the r = ``_outer.rest_classes`` classes
    past them, where there are any, by the rows kernels' tiles. Wp, Vp
    (n, kp) and G (n_chunks, n, kp) padded to whole vectors of classes;
    scratch (n_chunks, 2 (R + ``_outer.spare_rows``) + ``_outer.rest_rows``,
    k): the blocks of P and U, then the rest's direction (Vr, r x n),
    product (Hr, summed transposed) and, recomputing P, weights (Wr),
    copied transposed at the chunk's start. ``proba_rows`` and
    ``block_hvp`` as in :func:`_hessp_gemm_body`; ``rest_count``,
    ``rest_fwd``, ``rest_bwd`` and the copy of blocks of rows that alias
    as in ``_fused._tiles_body``.
    """
    m, n = X.shape
    k = b.shape[0]
    r = rest_count(X, k)
    kv = k - r
    vectors = -(-kv // lanes(X))
    spare = spare_rows(X, k)
    R = (scratch.shape[1] - rest_rows(X, k, r, 3)) // 2 - spare
    start, stop, Gc, gcc = _chunk_partials_set(c, m, G, gc)
    cached = P.shape[0] != 0
    mx = np.empty(R, dtype=X.dtype)
    s = np.empty(R, dtype=X.dtype)
    Pc = scratch[c, :R + spare]
    Uc = scratch[c, R + spare:2 * (R + spare)]
    rest = scratch[c, 2 * (R + spare):]
    Vr = rest_array(rest, r, n, 0)
    Hr = rest_array(rest, r, n, 1)
    Wr = rest_array(rest, r, n, 2)
    zero_b = np.zeros(r, dtype=X.dtype)
    rest_transposed(Vp, kv, Vr)
    Hr[:] = 0
    if not cached:
        rest_transposed(Wp, kv, Wr)
    buf = pack_buffer(X, R)
    for r0 in range(start, stop, R):
        rr = min(R, stop - r0)
        Xb, rb = pack_block(X, r0, rr, buf)
        if cached:
            Pb = P[r0:r0 + rr]
        else:
            forward_vectors(Xb, rb, rr, Wp, Pc, vectors)
            if r > 0:
                rest_fwd(X, r0, rr, Wr, zero_b, Pc, kv)
            Pb = Pc[:rr]
            proba_rows(Pb, b, mx, s)
        forward_vectors(Xb, rb, rr, Vp, Uc, vectors)
        if r > 0:
            rest_fwd(X, r0, rr, Vr, zero_b, Uc, kv)
        block_hvp(Pb, Uc[:rr], cv, r0, sw, weighted, scale, gcc, mx)
        backward_vectors(Xb, rb, rr, Uc, Gc, r0 == start, vectors)
        if r > 0:
            rest_bwd(X, r0, rr, Uc, kv, Hr)
    rest_store(Gc, kv, Hr)


@njit(**JIT)
def _hessp_tiles_chunk(c, X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch):
    """:func:`_hessp_gemm_chunk`, its products by the tiles: :func:`_hessp_tiles_body` (no rest)."""
    _hessp_tiles_body(c, X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch,
                      _proba_rows, _block_hvp, no_rest, no_rest_forward, no_rest_backward)


@njit(**JIT)
def _hessp_tiles_chunk_rest(c, X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch):
    """:func:`_hessp_tiles_chunk` with the classes past whole vectors by the rows kernels' tiles."""
    _hessp_tiles_body(c, X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch,
                      _proba_rows, _block_hvp, rest_classes, rest_forward, rest_backward)


@njit(**JIT)
def _hessp_tiles_chunk_lanes(c, X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch):
    """:func:`_hessp_tiles_chunk` for rows of at least ``_common.LANES_FROM`` classes."""
    _hessp_tiles_body(c, X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch,
                      _proba_rows_lanes, _block_hvp_lanes, no_rest, no_rest_forward,
                      no_rest_backward)


@njit(**JIT)
def _hessp_tiles_chunk_lanes_rest(c, X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch):
    """:func:`_hessp_tiles_chunk_lanes` with a rest of classes (:func:`_hessp_tiles_chunk_rest`)."""
    _hessp_tiles_body(c, X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch,
                      _proba_rows_lanes, _block_hvp_lanes, rest_classes, rest_forward,
                      rest_backward)


@njit(**PJIT)
def _hessp_tiles(X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch):
    """:func:`_hessp_gemm`, its products by the tiles of ``_outer`` (:func:`_hessp_tiles_chunk`)."""
    for c in prange(G.shape[0]):
        _hessp_tiles_chunk(np.int64(c), X, P, sw, weighted, scale, Wp, b, Vp, cv,
                           G, gc, scratch)


@njit(**PJIT)
def _hessp_tiles_lanes(X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch):
    """:func:`_hessp_tiles` for rows of at least ``_common.LANES_FROM`` classes."""
    for c in prange(G.shape[0]):
        _hessp_tiles_chunk_lanes(np.int64(c), X, P, sw, weighted, scale, Wp, b, Vp, cv,
                                 G, gc, scratch)


@njit(**PJIT)
def _hessp_tiles_rest(X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch):
    """:func:`_hessp_tiles` with a rest of classes (:func:`_hessp_tiles_chunk_rest`)."""
    for c in prange(G.shape[0]):
        _hessp_tiles_chunk_rest(np.int64(c), X, P, sw, weighted, scale, Wp, b, Vp, cv,
                                G, gc, scratch)


@njit(**PJIT)
def _hessp_tiles_lanes_rest(X, P, sw, weighted, scale, Wp, b, Vp, cv, G, gc, scratch):
    """:func:`_hessp_tiles_lanes` with a rest of classes (:func:`_hessp_tiles_chunk_lanes_rest`)."""
    for c in prange(G.shape[0]):
        _hessp_tiles_chunk_lanes_rest(np.int64(c), X, P, sw, weighted, scale, Wp, b, Vp, cv,
                                      G, gc, scratch)


@njit(**PJIT)
def _hessp_gemm(X, P, sw, weighted, scale, W, b, V, cv, G, gc, scratch):
    """Large-k Hessian-vector product, chunks of rows in parallel.

    IN X, P, sw, weighted, scale, W, b, V, cv; OUT G (n_chunks, n, k), gc
    (n_chunks, k); SCRATCH scratch (n_chunks, 2 R, k). See
    :func:`_hessp_gemm_body`; :func:`_hessp_gemm_chunk` is also the serial
    variant. For rows of fewer than ``_common.LANES_FROM`` classes; longer
    rows go to :func:`_hessp_gemm_lanes`. Two kernels, each compiled when
    first used: one with both row paths made a first default fit compile
    0.8 s longer (measured).
    """
    for c in prange(G.shape[0]):
        _hessp_gemm_chunk(np.int64(c), X, P, sw, weighted, scale, W, b, V, cv,
                          G, gc, scratch)


@njit(**PJIT)
def _hessp_gemm_lanes(X, P, sw, weighted, scale, W, b, V, cv, G, gc, scratch):
    """:func:`_hessp_gemm` for rows of at least ``_common.LANES_FROM`` classes."""
    for c in prange(G.shape[0]):
        _hessp_gemm_chunk_lanes(np.int64(c), X, P, sw, weighted, scale, W, b, V, cv,
                                G, gc, scratch)


@njit(inline="always", **JIT)
def _softmax_t(PT, b, mx, s):
    """INOUT PT (k, r) C-contiguous: the logits X_b W of r rows stored transposed in, softmax out.

    Column q is a row: the bias added, the row's maximum an elementwise
    maximum of k vectors, one exp over the block
    (:func:`._common._exp_flat`), the sums k vector adds, times 1 / sum.
    SCRATCH mx, s (r,). The logits at this point have been checked finite
    by the gradient pass (see the module).
    """
    k, r = PT.shape
    one = PT.dtype.type(1)
    for j in range(k):
        pj = PT[j]
        bj = b[j]
        for q in range(r):
            pj[q] += bj
    for q in range(r):
        mx[q] = PT[0, q]
    for j in range(1, k):
        pj = PT[j]
        for q in range(r):
            mx[q] = np.maximum(mx[q], pj[q])  # np.maximum: see _fused._block_error_t
    for j in range(k):
        pj = PT[j]
        for q in range(r):
            pj[q] -= mx[q]
    _exp_flat(PT.reshape(k * r))
    for q in range(r):
        s[q] = PT[0, q]
    for j in range(1, k):
        pj = PT[j]
        for q in range(r):
            s[q] += pj[q]
    for q in range(r):
        s[q] = one / s[q]
    for j in range(k):
        pj = PT[j]
        for q in range(r):
            pj[q] *= s[q]


@njit(**JIT)
def _hessp_gemm_t_chunk(c, X, P, sw, weighted, scale, W, b, V, cv, G, gc, scratch):
    """Chunk c of the GEMM Hessian product with each block stored transposed.

    As :func:`_hessp_gemm_chunk` (the same arguments, G[c] (n, k) and
    gc[c] out), for rows of few features and classes (the caller's rule,
    ``_dense.transposed_products``): per block of R rows Uᵀ = Vᵀ Xbᵀ (k,
    r) by BLAS, the block's probabilities transposed beside it (P's rows
    copied in, or softmax(Wᵀ Xbᵀ + b) by :func:`_softmax_t`), s_i of the
    module's docstring with every step a loop along the rows, then Xbᵀ S
    by BLAS from Sᵀ's transposed view. Row by row (:func:`_block_hvp`),
    each step is a loop over k classes, a few entries, as in the
    gradient's ``_fused._block_error_t``. SCRATCH scratch (n_chunks, (2 k
    + 2) R): per chunk Uᵀ and Pᵀ of R rows, and two rows of R.
    """
    m = X.shape[0]
    k = V.shape[1]
    R = scratch.shape[1] // (2 * k + 2)
    start, stop, Gc, gcc = _chunk_partials(c, m, G, gc)
    cached = P.shape[0] != 0
    flat = scratch[c]
    dt = X.dtype.type
    for r0 in range(start, stop, R):
        rr = min(R, stop - r0)
        Xb = X[r0:r0 + rr]
        UT = flat[:k * rr].reshape(k, rr)
        PT = flat[k * R:k * R + k * rr].reshape(k, rr)
        d = flat[2 * k * R:2 * k * R + rr]
        pu = flat[2 * k * R + R:2 * k * R + R + rr]
        if cached:
            for q in range(rr):
                pr = P[r0 + q]
                for j in range(k):
                    PT[j, q] = pr[j]
        else:
            _gemm_into(W.T, Xb.T, PT, 0.0)
            _softmax_t(PT, b, d, pu)
        _gemm_into(V.T, Xb.T, UT, 0.0)
        # u = U + cv and <p, u>, then s = d p (u - <p, u>) (_row_hvp's).
        for q in range(rr):
            pu[q] = 0
            d[q] = _row_weight(r0 + q, sw, weighted, scale)
        for j in range(k):
            uj = UT[j]
            pj = PT[j]
            cj = cv[j]
            for q in range(rr):
                u = uj[q] + cj
                uj[q] = u
                pu[q] += pj[q] * u
        for j in range(k):
            uj = UT[j]
            pj = PT[j]
            t = dt(0)
            for q in range(rr):
                v = d[q] * pj[q] * (uj[q] - pu[q])
                uj[q] = v
                t += v
            gcc[j] += t
        # The first block's product starts the sum (beta 0: Gc is not read).
        _gemm_into(Xb.T, UT.T, Gc, 0.0 if r0 == start else 1.0)


@njit(**PJIT)
def _hessp_gemm_t(X, P, sw, weighted, scale, W, b, V, cv, G, gc, scratch):
    """:func:`_hessp_gemm` with each block stored transposed (:func:`_hessp_gemm_t_chunk`)."""
    for c in prange(G.shape[0]):
        _hessp_gemm_t_chunk(np.int64(c), X, P, sw, weighted, scale, W, b, V, cv,
                            G, gc, scratch)


@njit(**JIT)
def _hessp_split_chunk(c, X, P, sw, weighted, scale, W, b, V, cv, gc, S, scratch):
    """Chunk c of :func:`_hessp_gemm_split`'s first pass: S of its rows.

    OUT S[rows of chunk c] (the s_i of the module's docstring); gc[c] (k,) =
    their sum. SCRATCH scratch[c] (R, k): a block's probabilities when not
    cached. Per block of R rows: U = Xb V + cv by BLAS into S, then S in
    place, by the ``_lanes`` block functions (the split serves rows of at
    least ``_common.LANES_FROM`` classes only: ``_dense.split_features``).
    """
    m = X.shape[0]
    R = scratch.shape[1]
    start, stop = _chunk(m, gc.shape[0], c)
    gcc = gc[c]
    _zero1(gcc)
    cached = P.shape[0] != 0
    mx = np.empty(R, dtype=X.dtype)
    s = np.empty(R, dtype=X.dtype)
    for r0 in range(start, stop, R):
        rr = min(R, stop - r0)
        Xb = X[r0:r0 + rr]
        if cached:
            Pb = P[r0:r0 + rr]
        else:
            Pb = scratch[c, :rr]
            _gemm_into(Xb, W, Pb, 0.0)
            _proba_rows_lanes(Pb, b, mx, s)
        Ub = S[r0:r0 + rr]
        _gemm_into(Xb, V, Ub, 0.0)
        _block_hvp_lanes(Pb, Ub, cv, r0, sw, weighted, scale, gcc, mx)


@njit(**PJIT)
def _hessp_gemm_split(X, P, sw, weighted, scale, W, b, V, cv, G, gc, S, scratch):
    """Large-k Hessian-vector product with the backward product split by features.

    As ``_fused._loss_grad_gemm_split`` for the gradient: S (m, k) for
    every row chunk in parallel (:func:`_hessp_split_chunk`), then
    G[f0:f1] = X[:, f0:f1]ᵀ S by BLAS on ranges of features in parallel.
    OUT G (n, k) C-contiguous, gc (n_chunks, k); SCRATCH S (m, k), scratch
    (n_chunks, R, k).
    """
    n = X.shape[1]
    chunks = gc.shape[0]
    for c in prange(chunks):
        _hessp_split_chunk(np.int64(c), X, P, sw, weighted, scale, W, b, V, cv, gc, S,
                           scratch)
    for f in prange(chunks):
        f0, f1 = _chunk(n, chunks, f)
        if f1 > f0:
            _gemm_into(X[:, f0:f1].T, S, G[f0:f1], 0.0)


@njit(**PJIT)
def _sparse_hessp(data, indices, indptr, P, sw, weighted, scale, V, vscale, cv,
                  S, H0, Hp, hc, scratch):
    """Hessian of the mean cross-entropy times a direction (V, cv), P cached.

    IN     data, indices, indptr: the CSR arrays (m rows).
    IN     P (m, k): the probabilities at the current weights (from
           :func:`._sparse._sparse_loss_grad`).
    IN     sw, weighted, scale: as in :func:`._sparse._sparse_loss_grad`.
    IN     V (n, k), vscale, cv (k,): the direction is (vscale V, cv) (cv zero
           without an intercept; the caller scales it).
    OUT    S (m, k): the rows s_i, written when S has m rows (transpose
           scheme; H0, Hp untouched); with an empty (0, k) S:
    OUT    H0 (n, k), Hp (n_chunks - 1, n, k): parts of sum_i x_i s_iᵀ.
    OUT    hc (n_chunks, k): parts of sum_i s_i.
    SCRATCH scratch (n_chunks, 1 + pad, k): row 0 used. hc (n_chunks, k + pad):
           the first k entries of each row.

    With u_i = vscale Vᵀ x_i + cv, s_i = scale * w_i * (p_i * u_i - p_i (p_i . u_i)).
    The L2 term alpha V is the caller's. The row pass of
    :func:`._sparse._sparse_loss_grad` (rows of V prefetched ahead as
    there), with the dense kernels' s_i
    (:func:`_row_hvp`); Xᵀ S by the same scatter or transpose scheme.
    """
    n_chunks = hc.shape[0]
    m = indptr.shape[0] - 1
    store_s = S.shape[0] > 0
    far = _far(V)
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        H, hcc = _chunk_sums(c, H0, Hp, hc, store_s)
        for i in range(start, stop):
            u = S[i] if store_s else scratch[c, 0]
            if far and i + ROW_AHEAD < stop:
                _prefetch_weights(indices, indptr, i + ROW_AHEAD, V)
            _affine_row_scaled(data, indices, indptr, i, V, cv, u, vscale)
            _row_hvp(P[i], u, _row_weight(i, sw, weighted, scale), hcc)
            if not store_s:
                _scatter(data, indices, indptr[i], indptr[i + 1], u, H)


@njit(**PJIT)
def _panel_hessp_rows(pdata, pindices, ptr, P, sw, weighted, scale, V, vscale, cv, S, hc):
    """Run the panel scheme's row pass of a Hessian product: the rows s_i into S.

    IN     pdata, pindices, ptr: X in the panel layout
           (:func:`._sparse._panel_fill`).
    IN     P, sw, weighted, scale, V, vscale, cv: as in :func:`_sparse_hessp`.
    OUT    S (m, k): the rows s_i (Xᵀ S is :func:`._sparse._panel_column_pass`).
    OUT    hc (n_chunks, k + pad): per-chunk sums of s_i in the first k entries.

    u_i = vscale Vᵀ x_i + cv is gathered panel by panel, as the loss's row pass
    gathers the logits (:func:`._sparse._panel_row_pass`).
    """
    n_chunks = hc.shape[0]
    n_panels = ptr.shape[0]
    m = ptr.shape[1] - 1
    k = V.shape[1]
    for c in prange(n_chunks):
        start, stop = _chunk(m, n_chunks, c)
        hcc = hc[c]
        _zero1(hcc)
        for i in range(start, stop):
            u = S[i]
            for j in range(k):
                u[j] = cv[j]
        for p in range(n_panels):
            pp = ptr[p]
            for i in range(start, stop):
                _gather_scaled(pdata, pindices, pp[i], pp[i + 1], V, S[i], vscale)
        for i in range(start, stop):
            _row_hvp(P[i], S[i], _row_weight(i, sw, weighted, scale), hcc)
