"""Forward register tiles that prefetch the rows ahead, written in LLVM IR.

The rows kernels' forward product z = x . Wt[j] + b[j] streams X from
memory. Read by the tiles of :mod:`._micro` (four or eight rows side by
side), X arrives line after line as the tiles wait for it; read ahead in
order first (``_common._touch``), it arrives at the memory's rate, but
the arithmetic waits for that pass. Here the forward tiles themselves ask
for the rows a block ahead: each step of a tile's feature loop issues a
software prefetch (``prefetcht1``, into L2) of the next lines of those
rows, spread over the tiles of a block of rows so that the lines asked for
match the lines the tiles read, and the stream then overlaps the
arithmetic instead of preceding it. BENCHMARKS.md, "Twenty-first session".

Why IR: Numba code cannot issue a prefetch inside a loop that LLVM is to
vectorise (the vectoriser gives up on the call and leaves the loop scalar),
and a prefetch between two tiles (a burst of a row's lines) gained nothing:
the lines have to be spread over the loop. So each tile is one loop written
here with explicit vectors: one vector of ``_config.VECTOR_BYTES`` (64
bytes, 16 float32 or 8 float64 lanes, on AVX-512 hosts; 32 bytes
elsewhere) per row and class per step, FMAs into R x C vector accumulators, a
masked last step for the features beyond the last whole vector (no scalar
remainder), and the accumulators summed across their lanes at the end
(:meth:`_TileCode._store`). Blocks of 4 rows x 5 classes (the rest in 3-,
2- and 1-class tiles), 8 x 2 in float32 where ``_micro.EIGHT_ROWS_N``
says. The 4 x 5 blocks, once float64's only, took 0.85-0.96x the time of
the 4 x 3 blocks in float32 too (the gradient at n = 20 ... 3000, k = 7 ...
48; BENCHMARKS.md, "Twenty-seventh session"); without AVX-512's 32
registers blocks of 4 x 3 at most (``_config.TILE_CLASSES``). The rows
kernels' gradient takes every logit from these tiles, X read ahead or not
(where it is not, ``lines`` is zero: no prefetch). :func:`logits4_cols` is the same
tile for four rows given by index over a range of the features: the SGD
epochs' batches. :func:`tail_mask` and :func:`tile_codegen` serve the
backward tiles of :mod:`._backward` too.

The module also gives Numba code a prefetch of its own (:func:`prefetch`,
:func:`prefetch_row`), for loops that read memory in an order no hardware
prefetcher can guess and that are not vectorised themselves: the SGD
epochs' shuffled rows, the rows of W that sparse rows gather.

On every host since the fifty-first session: on a Zen 3 host (AVX2),
where Numba's tiles of :mod:`._micro` ran until then, the gradient took
0.68-0.96x their time and the SGD epochs of 64 rows 0.78-1.07x; the
Hessian products kept Numba's tiles there, as these took 1.07-1.20x their
time on data in the caches (BENCHMARKS.md, "Fifty-first session";
:data:`HESSP_MICRO`). The caller's function is marked so that 512-bit
vectors are legal in it (``_width._widen`` without the preference: the
loops Numba vectorises itself keep their width).
"""

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._config import JIT, TILE_CLASSES, VECTOR_BYTES, WIDE_REGISTERS, itemsize
from ._width import _widen

# prefetcht1 (locality 2): into L2. prefetcht0 (into L1) ran the forward
# sweep over X from memory 1.25x slower than prefetcht1 (ad hoc, one
# thread, MNIST shape).
_LOCALITY = 2
_LINE = 64

_I1 = ir.IntType(1)
_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def _const(v):
    return ir.Constant(_I64, v)


def _intrinsic_fn(module, name, ret, args):
    return cgutils.get_or_insert_function(module, ir.FunctionType(ret, args), name)


def _enter_loop(b, count, name):
    """Branch to a new loop block when count > 0, else to the block after it.

    Returns (the block branched from, the loop's block, the block after it),
    positioned at the start of the loop's block: the caller builds the body,
    its phis (incoming from the first block and from the body's end) and the
    branch back.
    """
    start = b.block
    loop = b.append_basic_block(name)
    after = b.append_basic_block(name + ".after")
    b.cbranch(b.icmp_signed(">", count, _const(0)), loop, after)
    b.position_at_end(loop)
    return start, loop, after


def prefetch_lines(b, base, pos, lines):
    """Prefetch ``lines`` lines from byte ``pos`` of ``base``; return the next pos.

    ``base``: an i8 pointer; ``pos``, ``lines``: int64 IR values (``lines``
    zero or less: none). Each goes to L2 (``_LOCALITY``). A "line" here is
    a tile's vector (``VECTOR_BYTES``): a tile's steps then ask for as
    many rows as they read, whatever the width; 32-byte vectors ask for
    each 64-byte cache line twice.
    """
    # A loop of its own, built here rather than by cgutils.for_range:
    # with that helper's loop the gradient took 1.01-1.05x the time
    # (float32, 2 cores, versions.py; the same results).
    fn = _intrinsic_fn(b.module, "llvm.prefetch.p0", ir.VoidType(), [_I8P, _I32, _I32, _I32])
    start, loop, done = _enter_loop(b, lines, "ahead.pf")
    t = b.phi(_I64)
    t.add_incoming(_const(0), start)
    at = b.add(pos, b.mul(t, _const(VECTOR_BYTES)))
    b.call(fn, [b.gep(base, [at]), ir.Constant(_I32, 0), ir.Constant(_I32, _LOCALITY),
                ir.Constant(_I32, 1)])
    t1 = b.add(t, _const(1))
    t.add_incoming(t1, loop)
    b.cbranch(b.icmp_signed("<", t1, lines), loop, done)
    b.position_at_end(done)
    return b.add(pos, b.mul(lines, _const(VECTOR_BYTES)))


def tail_mask(b, rest, L):
    """Return the mask of a vector's first ``rest`` of L lanes (the features past whole vectors)."""
    lanes = ir.Constant(ir.VectorType(_I64, L), list(range(L)))
    restv = b.insert_element(ir.Constant(ir.VectorType(_I64, L), [0] * L), rest,
                             ir.Constant(_I32, 0))
    restv = b.shuffle_vector(restv, restv, ir.Constant(ir.VectorType(_I32, L), [0] * L))
    return b.icmp_signed("<", lanes, restv)


def feature_count(b, f0, f1):
    """Return the features of [f0, f1) as an IR value: f1 - f0, or 0 where f1 <= f0.

    (An empty range of an SGD batch split by features can have f0 > f1.)
    """
    count = b.sub(f1, f0)
    return b.select(b.icmp_signed(">", count, _const(0)), count, _const(0))


class VectorOps:
    """A vector of ``VECTOR_BYTES`` of a dtype (16 or 8 float32 lanes) and the tiles' work on it."""

    def __init__(self, context, builder, dtype):
        self.builder = builder
        self.fty = context.get_value_type(dtype)
        self.itemsize = context.get_abi_sizeof(self.fty)
        self.L = VECTOR_BYTES // self.itemsize
        self.vec = ir.VectorType(self.fty, self.L)
        self.zero = ir.Constant(self.vec, [0.0] * self.L)
        mask_t = ir.VectorType(_I1, self.L)
        mod = builder.module
        sfx = f"v{self.L}f{self.itemsize * 8}"
        self.fma = _intrinsic_fn(mod, f"llvm.fma.{sfx}", self.vec, [self.vec] * 3)
        self._mload = _intrinsic_fn(mod, f"llvm.masked.load.{sfx}.p0", self.vec,
                                    [self.vec.as_pointer(), _I32, mask_t, self.vec])
        self._mstore = _intrinsic_fn(mod, f"llvm.masked.store.{sfx}.p0", ir.VoidType(),
                                     [self.vec, self.vec.as_pointer(), _I32, mask_t])
        self._align = ir.Constant(_I32, self.itemsize)

    def at(self, ptr, f):
        """Return a pointer to the vector at element f from ``ptr`` (a pointer to the dtype)."""
        b = self.builder
        return b.bitcast(b.gep(ptr, [f]), self.vec.as_pointer())

    def load(self, vp, mask=None):
        """Load the vector at ``vp``; with a mask, its lanes only (zeros elsewhere)."""
        if mask is None:
            return self.builder.load(vp, align=self.itemsize)
        return self.builder.call(self._mload, [vp, self._align, mask, self.zero])

    def store(self, v, vp, mask=None):
        """Store ``v`` at ``vp``; with a mask, its lanes only."""
        if mask is None:
            self.builder.store(v, vp, align=self.itemsize)
        else:
            self.builder.call(self._mstore, [v, vp, self._align, mask])


class _TileCode:
    """The IR of one R x C tile: see :func:`_make_tile` and :func:`_make_rows_tile`.

    ``rows``: the R row indices (IR values); the tile reads the features
    [f0, f1) of those rows of X and of the rows j ... j + C - 1 of Wt, and
    prefetches ``lines`` lines a step from element ``p`` of X (``lines``
    zero: none).
    """

    def __init__(self, context, builder, types_, X, rows, Wt, j, b, z, zr, f0, f1, p, lines, C):
        self.builder = builder
        xty, wty, bty, zty = types_
        self.R, self.C = len(rows), C
        self.ops = ops = VectorOps(context, builder, xty.dtype)
        self.fty, self.L, self.vec, self.zero = ops.fty, ops.L, ops.vec, ops.zero
        self.align = ops.itemsize
        mod = builder.module
        self.reduce = _intrinsic_fn(mod, f"llvm.vector.reduce.fadd.v{self.L}f{ops.itemsize * 8}",
                                    self.fty, [self.fty, self.vec])
        xa = context.make_array(xty)(context, builder, X)
        wa = context.make_array(wty)(context, builder, Wt)
        n = builder.extract_value(xa.shape, 1)
        wn = builder.extract_value(wa.shape, 1)
        self.n = feature_count(builder, f0, n if f1 is None else f1)  # the loop's features
        self.xs = [builder.gep(xa.data, [builder.add(builder.mul(i, n), f0)]) for i in rows]
        self.ws = [builder.gep(wa.data, [builder.add(builder.mul(builder.add(j, _const(c)), wn),
                                                     f0)])
                   for c in range(C)]
        self.pf = builder.bitcast(builder.gep(xa.data, [p]), _I8P)
        self.lines = lines
        self.context = context
        self.b = (bty, b)
        self.z = (zty, z)
        self.j, self.zr = j, zr

    def _loads(self, at, mask):
        out = [self.ops.load(self.ops.at(ptr, at), mask) for ptr in (*self.xs, *self.ws)]
        return out[:self.R], out[self.R:]

    def _fmas(self, xv, wv, accs):
        return [self.builder.call(self.ops.fma, [xv[q], wv[c], accs[q * self.C + c]])
                for q in range(self.R) for c in range(self.C)]

    def _prefetch_lines(self, pos):
        """Prefetch ``lines`` lines from byte ``pos`` of the rows ahead; return the next pos."""
        return prefetch_lines(self.builder, self.pf, pos, self.lines)

    def emit(self):
        b = self.builder
        n, L = self.n, self.L
        whole = b.and_(n, _const(-L))
        # The whole vectors: loads, one prefetch step, R x C FMAs.
        pre, loop, tail = _enter_loop(b, whole, "ahead.loop")
        f = b.phi(_I64)
        pos = b.phi(_I64)
        accs = [b.phi(self.vec) for _ in range(self.R * self.C)]
        f.add_incoming(_const(0), pre)
        pos.add_incoming(_const(0), pre)
        for a in accs:
            a.add_incoming(self.zero, pre)
        xv, wv = self._loads(f, None)
        new_pos = self._prefetch_lines(pos)
        new = self._fmas(xv, wv, accs)
        f1 = b.add(f, _const(L))
        end = b.block
        f.add_incoming(f1, end)
        pos.add_incoming(new_pos, end)
        for a, v in zip(accs, new, strict=True):
            a.add_incoming(v, end)
        b.cbranch(b.icmp_signed("<", f1, whole), loop, tail)
        # The rest (fewer than L features): masked loads, zeros beyond n.
        b.position_at_end(tail)
        sums = []
        for k_ in range(self.R * self.C):
            s = b.phi(self.vec)
            s.add_incoming(self.zero, pre)
            s.add_incoming(new[k_], end)
            sums.append(s)
        last = b.phi(_I64)
        last.add_incoming(_const(0), pre)
        last.add_incoming(new_pos, end)
        mask = tail_mask(b, b.sub(n, whole), L)
        self._prefetch_lines(last)
        xv, wv = self._loads(whole, mask)
        sums = self._fmas(xv, wv, sums)
        self._store(sums)

    def _lane_sums(self, vecs):
        """One vector whose lane t is the sum of the lanes of vecs[t] (at most L vectors).

        A transposing tree: at each level, pairs of vectors swap halves of
        their blocks of lanes and add, so L vectors take log2(L) levels of
        2 shuffles and 1 add per pair (30 shuffles and 15 adds for 16
        float32 vectors, where reducing each vector alone takes 4 of each a
        vector). Each lane adds the same pairs, in the same order, as
        ``llvm.vector.reduce.fadd`` does: the sums are bit for bit those of
        the reductions. Missing vectors count as zeros.
        """
        b, L = self.builder, self.L
        u = list(vecs) + [self.zero] * (L - len(vecs))
        mask_t = ir.VectorType(_I32, L)
        s = L // 2
        while s >= 1:
            # Lanes [2 s g, 2 s g + s) of both vectors, then [2 s g + s, 2 s (g + 1)).
            first = [x for g in range(L // (2 * s))
                     for x in [*range(2 * s * g, 2 * s * g + s),
                               *range(L + 2 * s * g, L + 2 * s * g + s)]]
            lo = ir.Constant(mask_t, first)
            hi = ir.Constant(mask_t, [x + s for x in first])
            half = len(u) // 2
            u = [b.fadd(b.shuffle_vector(u[t], u[t + half], lo),
                        b.shuffle_vector(u[t], u[t + half], hi), flags=("reassoc", "nsz"))
                 for t in range(half)]
            s //= 2
        return u[0]

    def _store(self, sums):
        """z[zr + q, j + c] = the lanes of sums[q C + c] summed, plus b[j + c].

        Tiles of L / 2 accumulators or more (all but float32's 4 x 1) sum
        them L at a time by :meth:`_lane_sums`: lane c R + q of the tile's
        lanes holds row q of class c. Into a transposed z (Fortran order:
        the rows kernels' blocks, where a class's rows lie side by side)
        each class's R logits go as one vector store, into any other z lane
        by lane. Against a reduction per accumulator (4 x 3 tiles then) the
        float32 gradient took 0.84-0.97x the time at n = 20 ... 256 with k =
        5 ... 20, 0.97-1.02x at n = 784 or k = 2; the float64 Hessian
        product 0.82-0.98x at n = 20 ... 784, the float64 gradient
        0.98-1.02x (BENCHMARKS.md, "Twenty-seventh session").
        """
        b, context = self.builder, self.context
        bty, bval = self.b
        zty, zval = self.z
        ba = context.make_array(bty)(context, builder=b, value=bval)
        za = context.make_array(zty)(context, builder=b, value=zval)
        R, C, L = self.R, self.C, self.L

        def bias(c):
            return b.load(cgutils.get_item_pointer(context, b, bty, ba, [b.add(self.j, _const(c))]))

        def at(q, c):
            return cgutils.get_item_pointer(context, b, zty, za,
                                            [b.add(self.zr, _const(q)), b.add(self.j, _const(c))])

        if 2 * R * C < L:
            for q in range(R):
                for c in range(C):
                    s = b.call(self.reduce, [ir.Constant(self.fty, -0.0), sums[q * C + c]],
                               fastmath=("reassoc", "nsz"))
                    b.store(b.fadd(s, bias(c)), at(q, c))
            return
        ordered = [sums[q * C + c] for c in range(C) for q in range(R)]
        groups = [self._lane_sums(ordered[g:g + L]) for g in range(0, R * C, L)]
        if zty.layout == "F":  # z[zr:zr + R, j + c] contiguous
            # In pieces of up to L rows: 8 rows of float64 span two groups
            # of 32-byte vectors.
            w = min(R, L)
            rvec = ir.VectorType(self.fty, w)
            for c in range(C):
                one = b.insert_element(ir.Constant(rvec, None), bias(c), ir.Constant(_I32, 0))
                splat = b.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, w), [0] * w))
                for q0 in range(0, R, w):
                    g, o = divmod(c * R + q0, L)
                    part = b.shuffle_vector(groups[g], groups[g], ir.Constant(
                        ir.VectorType(_I32, w), list(range(o, o + w))))
                    b.store(b.fadd(part, splat), b.bitcast(at(q0, c), rvec.as_pointer()),
                            align=self.align)
            return
        for c in range(C):
            bc = bias(c)
            for q in range(R):
                g, o = divmod(c * R + q, L)
                s = b.extract_element(groups[g], ir.Constant(_I32, o))
                b.store(b.fadd(s, bc), at(q, c))


@intrinsic
def prefetch(typingctx, a, index):
    """Ask for the cache line of a[index] (``prefetcht1``: into L2); no effect on results.

    ``index`` is an integer (a 1-D array) or a tuple of one per dimension.
    For memory whose order the hardware cannot guess (the SGD epochs'
    shuffled rows), read a few steps ahead of the loop that needs it.
    """
    if not isinstance(a, types.Array):
        return None
    if isinstance(index, types.Integer):
        index_types = (index,)
    elif isinstance(index, types.BaseTuple) and all(
            isinstance(t, types.Integer) for t in index.types):
        index_types = tuple(index.types)
    else:
        return None
    if len(index_types) != a.ndim:
        return None
    sig = types.void(a, index)

    def codegen(context, builder, sig, args):
        aty = sig.args[0]
        ary = context.make_array(aty)(context, builder, args[0])
        if len(index_types) == 1 and isinstance(sig.args[1], types.Integer):
            raw = [args[1]]
        else:
            raw = cgutils.unpack_tuple(builder, args[1], len(index_types))
        idx = [context.cast(builder, v, t, types.intp)
               for v, t in zip(raw, index_types, strict=True)]
        ptr = cgutils.get_item_pointer(context, builder, aty, ary, idx)
        fn = _intrinsic_fn(builder.module, "llvm.prefetch.p0", ir.VoidType(),
                           [_I8P, _I32, _I32, _I32])
        builder.call(fn, [builder.bitcast(ptr, _I8P), ir.Constant(_I32, 0),
                          ir.Constant(_I32, _LOCALITY), ir.Constant(_I32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always", **JIT)
def prefetch_row(X, i, f0, f1):
    """Prefetch the lines of X[i, f0:f1] (f0 < f1) into L2."""
    step = _LINE // itemsize(X)
    for f in range(f0, f1, step):
        prefetch(X, (i, f))
    # The last line, where f0 is not on a line's start.
    prefetch(X, (i, f1 - 1))


def tile_codegen(emit):
    """Return an IR tile's codegen: ``emit(context, builder, sig, args)`` with integers as int64.

    The function the tile is compiled into is marked so that 512-bit
    vectors are legal in it (``_width._widen`` without the preference).
    """

    def codegen(context, builder, sig, args):
        _widen(builder.function, prefer=False)
        args = [context.cast(builder, a, t, types.int64) if isinstance(t, types.Integer) else a
                for a, t in zip(args, sig.args, strict=True)]
        emit(context, builder, sig, args)
        return context.get_dummy_value()

    return codegen


def _make_tile(R: int, C: int):
    """Return an R x C forward tile, ``tile(X, i, Wt, j, b, z, zr, p, lines)``.

    z[zr + q, j + c] = X[i + q] . Wt[j + c, :n] + b[j + c] for q < R,
    c < C (X (m, n) C-contiguous, rows i ... i + R - 1; Wt (k, n' >= n)
    C-contiguous; z any 2-D array of X's dtype: a transposed view writes
    the logits transposed). ``lines`` > 0: each step of the feature loop
    (a vector, 64 bytes, of each row) prefetches ``lines`` consecutive
    64-byte lines of X, the first at element offset p of X's data (p within
    X), the next step the ``lines`` after them, and so on: over its n / L
    steps a tile asks for about ``lines`` rows starting at element p.
    """

    def emit(context, builder, sig, args):
        X, i, Wt, j, b, z, zr, p, lines = args
        rows = [builder.add(i, _const(q)) for q in range(R)]
        types_ = (sig.args[0], sig.args[2], sig.args[4], sig.args[5])
        _TileCode(context, builder, types_, X, rows, Wt, j, b, z, zr, _const(0), None,
                  p, lines, C).emit()

    @intrinsic
    def tile(typingctx, X, i, Wt, j, b, z, zr, p, lines):
        return types.void(X, i, Wt, j, b, z, zr, p, lines), tile_codegen(emit)

    return tile


_tile_4x5 = _make_tile(4, 5)
_tile_4x3 = _make_tile(4, 3)
_tile_4x2 = _make_tile(4, 2)
_tile_4x1 = _make_tile(4, 1)
_tile_8x2 = _make_tile(8, 2)
_tile_8x1 = _make_tile(8, 1)


def _make_rows_tile(C: int):
    """Return a 4 x C forward tile, ``tile(X, i0, i1, i2, i3, Wt, j, b, z, zr, f0, f1)``.

    z[zr + q, j + c] = X[i_q, f0:f1] . Wt[j + c, f0:f1] + b[j + c] for q <
    4, c < C: :func:`_make_tile`'s sums for rows in any order (the SGD
    epochs' shuffled rows) over a range of the features (a batch split by
    features), without prefetches (the epochs prefetch their rows
    themselves).
    """

    def emit(context, builder, sig, args):
        X, i0, i1, i2, i3, Wt, j, b, z, zr, f0, f1 = args
        types_ = (sig.args[0], sig.args[5], sig.args[7], sig.args[8])
        _TileCode(context, builder, types_, X, [i0, i1, i2, i3], Wt, j, b, z, zr, f0, f1,
                  _const(0), _const(0), C).emit()

    @intrinsic
    def tile(typingctx, X, i0, i1, i2, i3, Wt, j, b, z, zr, f0, f1):
        return types.void(X, i0, i1, i2, i3, Wt, j, b, z, zr, f0, f1), tile_codegen(emit)

    return tile


_rows_tile_5 = _make_rows_tile(5)
_rows_tile_3 = _make_rows_tile(3)
_rows_tile_2 = _make_rows_tile(2)
_rows_tile_1 = _make_rows_tile(1)


@njit(inline="always", **JIT)
def logits4_cols(X, i0, i1, i2, i3, Wt, b, z, zr, f0, f1):
    """z[zr + q, j] = X[i_q, f0:f1] . Wt[j, f0:f1] + b[j] for the four rows i0 ... i3, every class.

    By the tiles here, blocked as :func:`_logits_ahead` blocks four rows.
    IN: X (m, n), Wt (k, n' >= f1), b (k,). OUT: z (any 2-D array; rows zr
    ... zr + 3).
    """
    k = Wt.shape[0]
    j = 0
    while j < k:
        c = _next_tile(k, j, 4)
        if c == 5:
            _rows_tile_5(X, i0, i1, i2, i3, Wt, j, b, z, zr, f0, f1)
        elif c == 3:
            _rows_tile_3(X, i0, i1, i2, i3, Wt, j, b, z, zr, f0, f1)
        elif c == 2:
            _rows_tile_2(X, i0, i1, i2, i3, Wt, j, b, z, zr, f0, f1)
        else:
            _rows_tile_1(X, i0, i1, i2, i3, Wt, j, b, z, zr, f0, f1)
        j += c


# The Hessian products' ``micro`` argument (``_hessp._hessp_rows_chunk``):
# None (these tiles and those of _backward) on AVX-512 hosts, True (Numba's
# tiles of _micro) elsewhere. On a Zen 3 host (AVX2) these tiles took
# 1.07-1.21x the time of Numba's at five of eight shapes with X in the
# caches, 0.77-0.86x at (200000, 100, 10) float32 (BENCHMARKS.md,
# "Fifty-first session"); the forward or the backward tiles alone on
# either side moved the Hessian product by no more than the host's spread
# ("Fifty-second session"). Numba prunes a branch on ``micro is None``
# before typing, where a constant such as the dtype is known only from
# typing on, so a kernel compiled for one kind of tiles holds no code of
# the other (BENCHMARKS.md, "Twenty-third session": the float32 rows
# kernel compiled in about 25 s instead of 33). The gradient's rows kernel
# runs these tiles on every host and takes no such argument.
HESSP_MICRO = None if WIDE_REGISTERS else True


@njit(inline="always", **JIT)
def _next_tile(k, j, nb):
    """Classes of the tile from class j in a block of nb rows.

    A rest of 6 classes goes as 3 + 3, not 5 + 1 (a 4 x 1 tile loads 5
    vectors for 4 FMAs); tiles of 5 classes only where ``TILE_CLASSES``
    says (AVX-512's registers).
    """
    left = k - j
    if nb == 8:
        return 2 if left >= 2 else 1
    if TILE_CLASSES >= 5 and left >= 5 and left != 6:
        return 5
    if left >= 3 and left != 4:
        return 3
    return 2 if left >= 2 else 1


@njit(inline="always", **JIT)
def _logits_ahead(X, i, nb, Wt, b, z, zr, ahead, stop):
    """z[zr + q, j] = X[i + q] . Wt[j] + b[j] for nb (4 or 8) rows from i, prefetching rows ahead.

    IN: X (m, n), Wt (k, n' >= n), b (k,); the rows [i + ahead, i + ahead
    + nb) ∩ [0, stop) are prefetched, their lines spread over the block's
    tiles. OUT: z (any 2-D array; rows zr ... zr + nb - 1, all k columns).
    """
    first = i + ahead
    rows = max(0, min(nb, stop - first)) if ahead > 0 else 0
    logits_prefetching(X, i, nb, Wt, b, z, zr, first, rows)


@njit(inline="always", **JIT)
def logits_prefetching(X, i, nb, Wt, b, z, zr, first, rows):
    """:func:`_logits_ahead` prefetching the rows [first, first + rows) of X (within X)."""
    k = Wt.shape[0]
    n = X.shape[1]
    tiles = 0
    j = 0
    while j < k:
        j += _next_tile(k, j, nb)
        tiles += 1
    j = 0
    t = 0
    done = 0
    while j < k:
        c = _next_tile(k, j, nb)
        take = (rows - done + tiles - t - 1) // (tiles - t)
        p = min(first + done, X.shape[0] - 1) * n
        if nb == 8:
            if c == 2:
                _tile_8x2(X, i, Wt, j, b, z, zr, p, take)
            else:
                _tile_8x1(X, i, Wt, j, b, z, zr, p, take)
        elif c == 5:
            _tile_4x5(X, i, Wt, j, b, z, zr, p, take)
        elif c == 3:
            _tile_4x3(X, i, Wt, j, b, z, zr, p, take)
        elif c == 2:
            _tile_4x2(X, i, Wt, j, b, z, zr, p, take)
        else:
            _tile_4x1(X, i, Wt, j, b, z, zr, p, take)
        done += take
        j += c
        t += 1
