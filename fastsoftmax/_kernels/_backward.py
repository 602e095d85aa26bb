"""Backward register tiles written in LLVM IR: the gradient's accumulation G += Eᵀ X.

For four rows of X and C classes, G[j + c, :n] += Σ_q e[q, c] x_q: each
step of the feature loop loads one vector (``_config.VECTOR_BYTES``: 64
bytes on AVX-512 hosts, 32 elsewhere) of each of the four rows, and for
each class loads G's vector, adds the four products by FMAs against the
row errors broadcast once per tile, and stores it back. The last step
(fewer than a vector of features) is masked: loads give zeros beyond n
and the store writes nothing there, so the rows need no scalar remainder
loop and G's padding stays untouched.

Why IR, where :func:`._micro._accumulate4` is Numba code doing the same sum:
Numba's loop carries a vectorised remainder, and its blocks stop at 4 x 3
(16 vector registers). With AVX-512's 32 registers a 4 x 5 tile holds 20
broadcast errors, 4 row vectors and 5 of G, and per step loads 4 rows and 5
vectors of G for 20 FMAs where 4 x 3 loads 4 and 3 for 12. One thread,
a block of 4,096 rows in L2 (``python benchmarks/backward_tiles.py``;
BENCHMARKS.md, "Twenty-seventh session"): 0.40-0.89x the time of
Numba's tiles in float32 (n = 20 ... 3000, k = 3 ... 48), 0.52-0.95x in
float64, and 1.04x at (n, k) = (784, 48) in float64.

The tiles can also prefetch rows of X ahead, so that memory works
through the backward sweep too, not only the forward one (BENCHMARKS.md,
"Thirty-third session"): the rows kernels give the backward sweep half of
the next rows to ask for and the forward sweep the other half
(:func:`accumulate4_ahead`); the SGD epochs' batches split by features
ask, while they accumulate one batch, for the rows of the next
(:func:`accumulate4_gather_ahead`).

On every host, as the forward tiles of :mod:`._ahead`: without AVX-512,
32-byte vectors in tiles of up to 4 x 3 (``_config.TILE_CLASSES``: 12
broadcast errors, 4 row vectors and G's, one more than AVX2's 16
registers, which LLVM reloads). There the Hessian products keep
:func:`._micro._accumulate4_cols` (``_ahead.HESSP_MICRO``).
"""

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._ahead import (
    _I8P,
    _I32,
    _I64,
    VectorOps,
    _const,
    _enter_loop,
    feature_count,
    prefetch_lines,
    tail_mask,
    tile_codegen,
)
from ._config import JIT, TILE_CLASSES


def _emit(context, b, sig, args, C, ahead):
    """G[j + c, f0:f1] += Σ_q Z[zr + q, j + c] X[i_q, f0:f1] for c < C, q < 4.

    ``ahead``: each step also prefetches ``lines`` lines of X from element
    p and ``lines2`` from element p2 (the last four arguments), as the
    forward tiles of :mod:`._ahead` do.
    """
    X, i0, i1, i2, i3, Z, zr, j, G, f0, f1 = args[:11]
    xty, zty, gty = sig.args[0], sig.args[5], sig.args[8]
    ops = VectorOps(context, b, xty.dtype)
    L = ops.L
    xa = context.make_array(xty)(context, b, X)
    za = context.make_array(zty)(context, b, Z)
    ga = context.make_array(gty)(context, b, G)
    n = b.extract_value(xa.shape, 1)
    gn = b.extract_value(ga.shape, 1)
    xs = [b.gep(xa.data, [b.add(b.mul(i, n), f0)]) for i in (i0, i1, i2, i3)]
    gs = [b.gep(ga.data, [b.add(b.mul(b.add(j, _const(c)), gn), f0)]) for c in range(C)]
    count = feature_count(b, f0, f1)
    if ahead:
        p, lines, p2, lines2 = args[11:]
        pf = b.bitcast(b.gep(xa.data, [p]), _I8P)
        pf2 = b.bitcast(b.gep(xa.data, [p2]), _I8P)
    splat = ir.Constant(ir.VectorType(_I32, L), [0] * L)
    errors = []
    for q in range(4):
        row = []
        for c in range(C):
            ptr = cgutils.get_item_pointer(context, b, zty, za,
                                           [b.add(zr, _const(q)), b.add(j, _const(c))])
            one = b.insert_element(ir.Constant(ops.vec, None), b.load(ptr),
                                   ir.Constant(_I32, 0))
            row.append(b.shuffle_vector(one, one, splat))
        errors.append(row)

    def step(f, pos, mask):
        """Emit the feature loop's step at f; return the prefetch streams' positions after it.

        pos: their positions before it (without ``ahead``, none: both lists empty).
        """
        xv = [ops.load(ops.at(x, f), mask) for x in xs]
        if ahead:
            pos = [prefetch_lines(b, pf, pos[0], lines), prefetch_lines(b, pf2, pos[1], lines2)]
        for c in range(C):
            gp = ops.at(gs[c], f)
            g = ops.load(gp, mask)
            for q in range(4):
                g = b.call(ops.fma, [xv[q], errors[q][c], g])
            ops.store(g, gp, mask)
        return pos

    whole = b.and_(count, _const(-L))
    pre, loop, tail = _enter_loop(b, whole, "acc.loop")
    # The loop's phis take their values from its end, known only after the
    # body is emitted: make them first, and add the incoming values after.
    f, *pos = [b.phi(_I64) for _ in range(3 if ahead else 1)]
    new_pos = step(f, pos, None)
    f1 = b.add(f, _const(L))
    end = b.block
    for v, z in zip([f, *pos], [f1, *new_pos], strict=True):
        v.add_incoming(_const(0), pre)
        v.add_incoming(z, end)
    b.cbranch(b.icmp_signed("<", f1, whole), loop, tail)
    b.position_at_end(tail)
    last = [b.phi(_I64) for _ in pos]
    for v, z in zip(last, new_pos, strict=True):
        v.add_incoming(_const(0), pre)
        v.add_incoming(z, end)
    rest = b.sub(count, whole)
    with b.if_then(b.icmp_signed(">", rest, _const(0))):
        step(whole, last, tail_mask(b, rest, L))


def _make_tile(C: int, ahead: bool = False):
    """Return a 4 x C tile, ``tile(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1)``.

    G[j + c, f0:f1] += Σ_q Z[zr + q, j + c] X[i_q, f0:f1] for c < C (X (m,
    n) C-contiguous, rows i0 ... i3 in any order; Z any 2-D array of X's
    dtype, the four rows' errors: a transposed view reads them in place;
    G (k, n' >= n) C-contiguous, its entries outside [f0, f1) untouched;
    f1 <= n; nothing where f1 <= f0). ``ahead``: the tile takes four more
    arguments, ``p, lines, p2, lines2``, and each step of its feature loop
    prefetches ``lines`` lines of X from element p on and ``lines2`` from
    element p2 on (two streams; a count of zero: none), as the forward
    tiles of :mod:`._ahead` do: over a whole row's steps, one line a step
    asks for one row's features [f0, f1).
    """

    def codegen(context, builder, sig, args):
        _emit(context, builder, sig, args, C, ahead)

    if ahead:
        @intrinsic
        def tile_ahead(typingctx, X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, p, lines, p2, lines2):
            return (types.void(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, p, lines, p2, lines2),
                    tile_codegen(codegen))

        return tile_ahead

    @intrinsic
    def tile(typingctx, X, i0, i1, i2, i3, Z, zr, j, G, f0, f1):
        return types.void(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1), tile_codegen(codegen)

    return tile


_tile_4x5 = _make_tile(5)
_tile_4x4 = _make_tile(4)
_tile_4x3 = _make_tile(3)
_tile_4x2 = _make_tile(2)
_tile_4x1 = _make_tile(1)
# The same tiles prefetching rows ahead: a family of their own rather than
# a test of ``lines`` in each step, which made the gradient of narrow rows
# (float32, (300000, 20, 10), X not read ahead) 1.07-1.13x as long
# (versions.py).
_ahead_4x5 = _make_tile(5, True)
_ahead_4x4 = _make_tile(4, True)
_ahead_4x3 = _make_tile(3, True)
_ahead_4x2 = _make_tile(2, True)
_ahead_4x1 = _make_tile(1, True)


@njit(inline="always", **JIT)
def _tile_classes(left):
    """Classes of the next tile when ``left`` remain: 5, 4 or 3, 2, 1; 6 as 3 + 3.

    (A 4 x 1 tile loads 5 vectors for 4 FMAs: a rest of 6 is not 5 + 1.)
    Up to ``TILE_CLASSES``: 3, 2, 1 without AVX-512, a rest of 4 as 2 + 2.
    """
    if TILE_CLASSES >= 5:
        if left >= 5 and left != 6:
            return 5
        if left == 4:
            return 4
    if left >= 3 and left != 4:
        return 3
    return min(left, 2)


@njit(inline="always", **JIT)
def _accumulate_tiles(X, i0, i1, i2, i3, Z, zr, G, f0, f1):
    """G[j, f0:f1] += Σ_q Z[zr + q, j] X[i_q, f0:f1] for every class j, by 4 x 5 (4 x 3) tiles.

    IN: X (m, n), the row indices i0 ... i3, Z (any 2-D array: its rows zr
    ... zr + 3 are the four rows' errors), the features [f0, f1). IN/OUT:
    G (k, n' >= n).
    """
    k = G.shape[0]
    j = 0
    while j < k:
        c = _tile_classes(k - j)
        if c == 5:
            _tile_4x5(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1)
        elif c == 4:
            _tile_4x4(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1)
        elif c == 3:
            _tile_4x3(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1)
        elif c == 2:
            _tile_4x2(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1)
        else:
            _tile_4x1(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1)
        j += c


@njit(inline="always", **JIT)
def _tile_count(k):
    """Return how many tiles :func:`_tile_classes` splits k classes into."""
    tiles = 0
    j = 0
    while j < k:
        j += _tile_classes(k - j)
        tiles += 1
    return tiles


@njit(inline="always", **JIT)
def _ahead_tile(c, X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, p, lines, p2, lines2):
    """Run the prefetching 4 x c tile on classes j ... j + c - 1 (see :func:`_make_tile`)."""
    if c == 5:
        _ahead_4x5(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, p, lines, p2, lines2)
    elif c == 4:
        _ahead_4x4(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, p, lines, p2, lines2)
    elif c == 3:
        _ahead_4x3(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, p, lines, p2, lines2)
    elif c == 2:
        _ahead_4x2(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, p, lines, p2, lines2)
    else:
        _ahead_4x1(X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, p, lines, p2, lines2)


@njit(inline="always", **JIT)
def _accumulate_tiles_ahead(X, i0, i1, i2, i3, Z, zr, G, f0, f1, first, rows):
    """:func:`_accumulate_tiles`, prefetching the rows [first, first + rows) of X (rows >= 1).

    The rows' lines are spread over the tiles: tile t of T asks for about
    (rows - done) / (T - t) of them.
    """
    k = G.shape[0]
    tiles = _tile_count(k)
    n = X.shape[1]
    j = 0
    t = 0
    done = 0
    while j < k:
        c = _tile_classes(k - j)
        take = (rows - done + tiles - t - 1) // (tiles - t)
        p = min(first + done, X.shape[0] - 1) * n
        _ahead_tile(c, X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, p, take, 0, 0)
        done += take
        j += c
        t += 1


@njit(inline="always", **JIT)
def accumulate4_gather_ahead(X, i0, i1, i2, i3, Z, zr, G, f0, f1, a0, a1, a2, a3):
    """:func:`accumulate4_cols`, prefetching the rows a0 ... a3 of X (their features [f0, f1)).

    For rows visited in an order no prefetcher can guess (the SGD epochs'
    shuffled batches): tile t of T asks for rows a_t and a_(t + T) (one
    line of each a step: a row's [f0, f1) over the tile's steps), so with
    two tiles or more (6 classes or more) all four; with one, a0 and a1. A
    negative index: none.
    """
    _gather_tiles(X, i0, i1, i2, i3, Z, zr, G, f0, f1, a0, a1, a2, a3)


@njit(inline="always", **JIT)
def _gather_tiles(X, i0, i1, i2, i3, Z, zr, G, f0, f1, a0, a1, a2, a3):
    """:func:`accumulate4_gather_ahead` by the tiles here."""
    k = G.shape[0]
    tiles = _tile_count(k)
    n = X.shape[1]
    j = 0
    t = 0
    while j < k:
        c = _tile_classes(k - j)
        a = _pick(t, a0, a1, a2, a3)
        b = _pick(t + tiles, a0, a1, a2, a3)
        _ahead_tile(c, X, i0, i1, i2, i3, Z, zr, j, G, f0, f1, max(a, 0) * n + f0,
                    1 if a >= 0 else 0, max(b, 0) * n + f0, 1 if b >= 0 else 0)
        j += c
        t += 1


@njit(inline="always", **JIT)
def _pick(t, a0, a1, a2, a3):
    """a_t for t < 4, else -1."""
    if t == 0:
        return a0
    if t == 1:
        return a1
    if t == 2:
        return a2
    if t == 3:
        return a3
    return -1


@njit(inline="always", **JIT)
def accumulate4_ahead(X, i0, i1, i2, i3, Z, zr, G, f0, f1, first, rows):
    """:func:`accumulate4_cols`, prefetching the rows [first, first + rows) of X."""
    if rows > 0:
        _accumulate_tiles_ahead(X, i0, i1, i2, i3, Z, zr, G, f0, f1, first, rows)
    else:
        _accumulate_tiles(X, i0, i1, i2, i3, Z, zr, G, f0, f1)


@njit(inline="always", **JIT)
def accumulate4_cols(X, i0, i1, i2, i3, Z, zr, G, f0, f1):
    """G[j, f0:f1] += Σ_q Z[zr + q, j] X[i_q, f0:f1] for every class j.

    By the tiles here. The SGD epochs' batches split by features take a
    range each.
    """
    _accumulate_tiles(X, i0, i1, i2, i3, Z, zr, G, f0, f1)


@njit(inline="always", **JIT)
def accumulate4(X, i0, i1, i2, i3, Z, zr, G):
    """G[j] += Σ_q Z[zr + q, j] X[i_q] for every class j: the rows kernels' backward step.

    :func:`accumulate4_cols` over all of X's features.
    """
    accumulate4_cols(X, i0, i1, i2, i3, Z, zr, G, 0, X.shape[1])
