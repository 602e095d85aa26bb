"""Outer-product register tiles in LLVM IR: a row block's two products without BLAS.

The GEMM strategy's gradient multiplies each block of rows twice: its
logits Zb = Xb W, then its part of the gradient, G += Xbᵀ Eb. BLAS does
both well for large operands; on a block of a few dozen rows and a few
dozen classes its packing and its kernels' edges weigh. The rows kernels'
tiles (:mod:`._ahead`, :mod:`._backward`) take dot products along the
features instead, whose accumulators end in horizontal sums: on rows of
about a hundred features those sums and each tile's set-up are a large
share of the work.

The tiles here are the form BLAS's own kernels take: vectors along the
classes, one entry of X broadcast against them. Forward, 4 rows x C
vectors of classes (C = 3: 12 accumulators, 3 loads of W and 4 broadcasts
per 12 FMAs, within AVX2's 16 registers), a loop over every feature, and
the accumulators stored as they are: no horizontal sum. Backward, 4
features x C vectors of classes, a loop over the block's rows: G's tile is
loaded and stored once per block (a chunk's first block stores it without
the load). The classes go 3 vectors at a time, a
rest of 4 as 2 + 2; row and feature counts that are not a multiple of four
take 1-row (1-feature) tiles for the rest. Tiles of 6 rows x 2 vectors,
prototyped first, ran as fast at even vector counts and up to 1.5x slower
at odd ones, where a 6 x 1 tile (6 chains of FMAs) took the last vector
(BENCHMARKS.md, "Fifty-eighth session").

With AVX-512's 32 registers the wide tiles take 8 rows (features), 24
accumulators, a rest of 4 or more by the 4-row tile: per FMA half the
loads of W (of E) and the W panel streamed from L2 half as often. On one
Zen 5 core (`benchmarks/outer_tiles.py`) the 8 x 3 forward tile ran at
263-269 GFLOP/s in float32 (128-134 in float64), the 4 x 3 one at 171-240
(82-123), the slowest on rows of 784 features, whose W panel is out of L1;
the backward 250-259 against 207-261 (124-133 against 96-130; BENCHMARKS.md,
"Sixtieth session").

Every step loads and every tile stores whole vectors of classes, none
masked: a masked load on every step made a tile 1.6-1.7x slower on a Zen 3
host (AVX2), and a masked store of each tile's last vector cost its
forward product 1.17x. So W and G are padded with zero columns to whole
vectors (Wp (n, kp), G (n, kp), kp = k rounded up to the vector's lanes),
and the block of logits and errors, Z (R, k), is not: a row's last vector
runs on into the next row's first entries. :func:`forward_block` writes
those entries before their own row's first vector is stored (the padded
classes' logits, zeros), and :func:`backward_block` reads them as extra
lanes that multiply into G's padded columns, which nothing reads. Z needs
:func:`spare_rows` rows beyond the block's last, so that the last row's
vector stays within it.

A padded vector costs what a whole one does: 100 float32 classes run as
112. Where the classes past the last whole vector are few
(:func:`rest_classes`), the gradient's kernel and the Hessian products'
run only the whole vectors here (:func:`forward_vectors`,
:func:`backward_vectors`) and leave the rest to the rows kernels' tiles
(``_fused._tiles_body``, ``_hessp._hessp_tiles_body``).
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ._ahead import _I8P, _I32, _I64, VectorOps, _const, _enter_loop, _intrinsic_fn, tile_codegen
from ._common import LANES_FROM
from ._config import JIT, VECTOR_BYTES, WIDE_REGISTERS, itemsize

# Rows (forward) and features (backward) of the wide tiles, and of the
# tiles for a rest of at least HALF_TILE rows (features): compile-time
# constants, the 8-row tiles' branches dropped on hosts without AVX-512.
TILE = 8 if WIDE_REGISTERS else 4
HALF_TILE = 4


def _splat(b, ops, x):
    """Return a vector of ops's lanes, each x."""
    one = b.insert_element(ir.Constant(ops.vec, None), x, ir.Constant(_I32, 0))
    return b.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, ops.L), [0] * ops.L))


def _matrix(context, b, ty, value):
    """Return (the data pointer, the row length) of a C-contiguous 2-D array's IR value."""
    a = context.make_array(ty)(context, b, value)
    return a.data, b.extract_value(a.shape, 1)


def _loop(b, ops, count, accs_n, walks, step):
    """Emit a loop of ``count`` steps over accs_n vector accumulators; return their sums.

    ``walks``: (pointer, stride) pairs, each pointer advanced by its stride
    (elements, an IR value) every step; ``step(pointers, accs)`` emits one
    step at the pointers' current values and returns the new accumulators.
    Pointers carried from step to step, not recomputed from the step's
    index: with the index the loop multiplied and reloaded spilled
    pointers on every step. Zero steps: zeros.
    """
    pre, loop, done = _enter_loop(b, count, "outer.loop")
    t = b.phi(_I64)
    t.add_incoming(_const(0), pre)
    ptrs = [b.phi(p.type) for p, _ in walks]
    for phi, (p, _) in zip(ptrs, walks, strict=True):
        phi.add_incoming(p, pre)
    accs = [b.phi(ops.vec) for _ in range(accs_n)]
    for a in accs:
        a.add_incoming(ops.zero, pre)
    new = step(ptrs, accs)
    t1 = b.add(t, _const(1))
    end = b.block
    t.add_incoming(t1, end)
    for phi, (_, stride) in zip(ptrs, walks, strict=True):
        phi.add_incoming(b.gep(phi, [stride]), end)
    for a, v in zip(accs, new, strict=True):
        a.add_incoming(v, end)
    b.cbranch(b.icmp_signed("<", t1, count), loop, done)
    b.position_at_end(done)
    sums = []
    for v in new:
        s = b.phi(ops.vec)
        s.add_incoming(ops.zero, pre)
        s.add_incoming(v, end)
        sums.append(s)
    return sums


def _outer_step(b, ops, vectors_at, scalars_at, accs):
    """Emit one step of an outer-product tile; return the new accumulators.

    The len(accs) / len(scalars_at) vectors from ``vectors_at`` on, and
    for each pointer of ``scalars_at`` (a tile's row or feature) its entry
    broadcast and multiplied into them: accs[p V + v] += x_p * vector v.
    """
    V = len(accs) // len(scalars_at)
    vectors = [ops.load(ops.at(vectors_at, _const(v * ops.L))) for v in range(V)]
    out = []
    for p, at in enumerate(scalars_at):
        xb = _splat(b, ops, b.load(at))
        out += [b.call(ops.fma, [xb, vectors[v], accs[p * V + v]]) for v in range(V)]
    return out


def _tile_addresses(b, ops, base, row0, stride, j, rows, V):
    """Return the addresses of a tile's vectors: rows row0 ... of ``stride`` entries, from column j.

    Row by row, each row's V vectors in order (the order of
    :func:`_outer_step`'s accumulators).
    """
    return [ops.at(b.gep(base, [b.add(b.mul(b.add(row0, _const(q)), stride), j)]),
                   _const(v * ops.L))
            for q in range(rows) for v in range(V)]


# The backward tile asks for its lines of G before its loop over the
# block's rows, not at the loop's end, where it adds into them: the loads
# after the loop issue only once the loop has ended, and where G outgrows
# L2 (n kp entries a chunk, beside the block of X) each waits on L3 or
# memory. On two threads of the Zen 5 host (`benchmarks/against_commit.py
# --strategy gemm`, four to six rounds), the whole gradient took 0.94-0.97x
# the time in float64 at G of 2.5-24 MiB ((1000, 3000, 1000), (1000, 784,
# 1000), (1000, 3000, 100), (500, 1500, 1000)), 0.95-0.99x elsewhere;
# float32 0.97-1.01x; the Hessian products 0.89-0.97x in float64, 0.88-0.97x
# in float32 (BENCHMARKS.md, "Sixty-fifth session").
def _prefetch_for_write(b, ats):
    """Ask for the lines of ``ats`` (a tile's vectors) with the intent to write, into L1."""
    fn = _intrinsic_fn(b.module, "llvm.prefetch.p0", ir.VoidType(), [_I8P, _I32, _I32, _I32])
    for at in ats:
        b.call(fn, [b.bitcast(at, _I8P), ir.Constant(_I32, 1), ir.Constant(_I32, 3),
                    ir.Constant(_I32, 1)])


def _set_or_add(b, ops, first, ats, sums):
    """Store each vector of ``sums`` at its address of ``ats``, or add it into what is there.

    ``first`` (an IR boolean): set (the memory not read), else add.
    """
    with b.if_else(b.icmp_unsigned("!=", first, ir.Constant(first.type, 0))) as (set_, add):
        with set_:
            for at, total in zip(ats, sums, strict=True):
                ops.store(total, at)
        with add:
            for at, total in zip(ats, sums, strict=True):
                ops.store(b.fadd(ops.load(at), total), at)


def _forward_emit(R: int, V: int):
    """Return the IR emitter of R rows x V vectors of logits (:func:`_make_forward`).

    ``tile(X, i, Wp, j, Z, zr, f0, count, first)``: Z[zr + q, j + c] (+)=
    X[i + q, f0:f0 + count] . Wp[f0:f0 + count, j + c] for q < R and the
    classes j + c < kp of V whole vectors, stored from Z[zr + q, j] on in
    Z's flat memory: past k, into the next rows (see the module's
    docstring); where ``first`` (a boolean) Z's tile is set to the sum,
    else the sum is added into it (a panel of features after the first).
    X (m, n) C-contiguous; Wp (n, kp) C-contiguous, kp a whole number of
    vectors, zero-padded; Z (., k) C-contiguous. No bias: the error pass
    adds it.
    """

    def emit(context, b, sig, args):
        X, i, Wp, j, Z, zr, f0, count, first = args
        xty, _, wty, _, zty, *_ = sig.args
        ops = VectorOps(context, b, xty.dtype)
        (x, n), (w, kp), (z, k) = (_matrix(context, b, t, v)
                                   for t, v in ((xty, X), (wty, Wp), (zty, Z)))
        # Every row's entry from one pointer (X[i, f]) at offsets q n, and
        # W's row from its own: two pointers, not R + 1, held in the loop.
        offsets = [b.mul(_const(q), n) for q in range(R)]

        def step(ptrs, accs):
            xf, wrow = ptrs
            return _outer_step(b, ops, wrow, [b.gep(xf, [o]) for o in offsets], accs)

        walks = [(b.gep(x, [b.add(b.mul(i, n), f0)]), _const(1)),
                 (b.gep(w, [b.add(b.mul(f0, kp), j)]), kp)]
        sums = _loop(b, ops, count, R * V, walks, step)
        # Rows in order, each row's vectors in order: a row's last vector,
        # which runs on into the next row, is stored before that row's own.
        _set_or_add(b, ops, first, _tile_addresses(b, ops, z, zr, k, j, R, V), sums)

    return emit


def _backward_emit(F: int, V: int):
    """Return the IR emitter of F features x V vectors of G (:func:`_make_backward`).

    ``tile(X, r0, rows, E, j, G, f0, first)``: G[f0 + p, j + c] +=
    Σ_{q < rows} X[r0 + q, f0 + p] E[q, j + c] for p < F and the classes
    j + c < kp of V whole vectors, E's row q read from E[q, j] on in its
    flat memory (past k: the next rows' entries, into G's padding); where
    ``first`` (a boolean), G's tile is set to the sum, not read. X (m, n),
    E (R, k) and G (n, kp) C-contiguous, kp a whole number of vectors.
    """

    def emit(context, b, sig, args):
        X, r0, rows, E, j, G, f0, first = args
        xty, _, _, ety, _, gty, *_ = sig.args
        ops = VectorOps(context, b, xty.dtype)
        (x, n), (e, k), (g, kp) = (_matrix(context, b, t, v)
                                   for t, v in ((xty, X), (ety, E), (gty, G)))

        def step(ptrs, accs):
            xrow, erow = ptrs
            return _outer_step(b, ops, erow, [b.gep(xrow, [_const(p)]) for p in range(F)], accs)

        ats = _tile_addresses(b, ops, g, f0, kp, j, F, V)
        _prefetch_for_write(b, ats)
        walks = [(b.gep(x, [b.add(b.mul(r0, n), f0)]), n), (b.gep(e, [j]), k)]
        sums = _loop(b, ops, rows, F * V, walks, step)
        # A chunk's first block sets G: no pass zeroing it before, no read.
        _set_or_add(b, ops, first, ats, sums)

    return emit


def _make_forward(R: int, V: int):
    """Return ``tile(X, i, Wp, j, Z, zr, f0, count, first)``, :func:`_forward_emit`'s alone.

    Any R x V, not only :data:`SHAPES`: ``benchmarks/outer_tiles.py``
    measures shapes the kernels do not run.
    """

    @intrinsic
    def tile(typingctx, X, i, Wp, j, Z, zr, f0, count, first):
        return (types.void(X, i, Wp, j, Z, zr, f0, count, first),
                tile_codegen(_forward_emit(R, V)))

    return tile


def _make_backward(F: int, V: int):
    """Return ``tile(X, r0, rows, E, j, G, f0, first)``: :func:`_backward_emit`'s, any F x V."""

    @intrinsic
    def tile(typingctx, X, r0, rows, E, j, G, f0, first):
        return types.void(X, r0, rows, E, j, G, f0, first), tile_codegen(_backward_emit(F, V))

    return tile


# The tiles a block runs: TILE, HALF_TILE and 1 rows (features) by 3, 2
# and 1 vectors of classes; without AVX-512 TILE is HALF_TILE and the
# 8-row tiles are not emitted.
SHAPES = tuple((t, c) for t in sorted({TILE, HALF_TILE, 1}, reverse=True) for c in (3, 2, 1))


def _switch(make):
    """Return the codegen of a tile whose last two arguments, t and c, choose its shape.

    One LLVM switch on (t, c) over :data:`SHAPES`, each case the tile
    ``make(t, c)`` emits on the other arguments; a shape not in SHAPES
    runs nothing.
    """

    def emit(context, b, sig, args):
        *rest, t, c = args
        shape = b.add(b.mul(t, _const(4)), c)
        done = b.append_basic_block("tile.done")
        switch = b.switch(shape, done)
        for R, V in SHAPES:
            case = b.append_basic_block(f"tile.{R}x{V}")
            switch.add_case(_const(4 * R + V), case)
            b.position_at_end(case)
            make(R, V)(context, b, sig, rest)
            b.branch(done)
        b.position_at_end(done)

    return tile_codegen(emit)


@intrinsic
def forward_tile(typingctx, X, i, Wp, j, Z, zr, f0, count, first, t, c):
    """Run the forward tile of t rows (TILE, HALF_TILE or 1) x c vectors (3, 2 or 1) at (i, j)."""
    return (types.void(X, i, Wp, j, Z, zr, f0, count, first, t, c),
            _switch(_forward_emit))


@intrinsic
def backward_tile(typingctx, X, r0, rows, E, j, G, f0, first, t, c):
    """Run the backward tile of t features (TILE, HALF_TILE or 1) x c vectors at (f0, j)."""
    return types.void(X, r0, rows, E, j, G, f0, first, t, c), _switch(_backward_emit)


@njit(inline="always", **JIT)
def lanes(X):
    """Return the lanes of a tile's vector for X's dtype (a compile-time constant)."""
    return VECTOR_BYTES // itemsize(X)


@njit(inline="always", **JIT)
def padded_classes(X, k):
    """kp: k rounded up to whole vectors of X's dtype."""
    L = lanes(X)
    return -(-k // L) * L


# Every block of logits (errors, products) in a chunk's scratch starts on
# a cache line: the tiles load and store a block's rows a vector at a
# time, and a vector across two lines costs two. The block rows, the spare
# rows and the rest's rows each come in whole multiples of row_unit(k)
# rows, and the scratch is allocated aligned (``_dense``); a row of k
# entries then starts on a line every row_unit(k) rows. On two threads of
# the Zen 5 host (`benchmarks/against_commit.py --strategy gemm`, four
# rounds, two runs) the whole float64 gradient took 0.90-0.96x the time at
# 100-3,000 features and 100 or 1,000 classes (every row, or every second
# row, on a line); float32, where rows of 100 or 1,000 classes start on a
# line every fourth or second row, 0.97-1.12x, within the host's spread
# (one cell 1.12x and 0.98x in two runs); the Hessian products 0.97-1.02x
# in both dtypes (BENCHMARKS.md, "Sixty-sixth session").
LINE_BYTES = 64


@njit(inline="always", **JIT)
def _row_unit(k, size):
    """Rows of k entries of ``size`` bytes that make whole cache lines (a power of two)."""
    u = 1
    while (u * k * size) % LINE_BYTES != 0:
        u *= 2
    return u


def row_unit(k: int, itemsize: int) -> int:
    """Return :func:`_row_unit` (its Python form: nothing compiled)."""
    return _row_unit.py_func(k, itemsize)


def whole_rows(rows: int, k: int, itemsize: int) -> int:
    """Return ``rows`` rounded up to a multiple of :func:`row_unit`."""
    u = row_unit(k, itemsize)
    return -(-rows // u) * u


@njit(inline="always", **JIT)
def spare_rows(X, k):
    """Rows a block of logits needs beyond its last: a vector's lanes, at least.

    In whole cache lines (:func:`_row_unit`): a block of rows in whole lines
    and its spare rows leave the next block's start on a line.
    """
    u = _row_unit(k, itemsize(X))
    return -(-lanes(X) // (k * u)) * u


@njit(inline="always", **JIT)
def _tile_rows(left):
    """Rows (features) of the next tile, of ``left``: TILE, else HALF_TILE, else 1."""
    if TILE > HALF_TILE and left >= TILE:
        return TILE
    return HALF_TILE if left >= HALF_TILE else 1


@njit(inline="always", **JIT)
def _vectors(left):
    """Vectors of classes of the next tile, of ``left``: 3, but a rest of 4 as 2 + 2."""
    if left >= 3 and left != 4:
        return 3
    return 2 if left >= 2 else 1


@njit(**JIT)
def forward_block(X, r0, rows, Wp, Z):
    """OUT Z[q] = X[r0 + q] @ Wp[:, :k] for q < rows (k = Z.shape[1] <= Wp.shape[1]).

    :func:`forward_vectors` over every vector of Z's classes.
    """
    forward_vectors(X, r0, rows, Wp, Z, -(-Z.shape[1] // lanes(X)))


@njit(**JIT)
def forward_vectors(X, r0, rows, Wp, Z, vectors):
    """OUT Z[q, :vectors L] = X[r0 + q, :n] @ Wp[:, :vectors L] for q < rows (L: :func:`lanes`).

    n = Wp's rows: X may be a packed block (:func:`pack_block`), its rows
    longer than n.

    The first ``vectors`` whole vectors of classes; where they cover Z's k
    classes or more, the last one runs on into the next row (below).

    Z (rows + :func:`spare_rows`, k) at least: the entries past row rows - 1
    are overwritten. Not inlined: the kernels of one dtype (gradient and
    Hessian products, one or two calls each) share one compiled copy.

    Strips of classes outer, the block's row tiles inner: each strip of Wp
    (n x 3 vectors) is read from memory once per block and from L2 by the
    block's other tiles, where row tiles outer read the whole of Wp once a
    tile: from memory where Wp outgrows L3 beside the chunks' partial
    sums. On two threads of the Zen 5 host, the whole gradient against
    row tiles outer (``benchmarks/gradient_variants.py strips --rounds 5``,
    both dtypes): 0.75-0.82x the time where Wp takes 23-69 MiB ((1000,
    3000, 1000) float64, (300, 3000, 3000) both), 0.92-0.96x at 1-11 MiB
    in float32, 0.95-1.06x elsewhere (the runs' spread: the same cells
    0.97-1.00x in a run of nine rounds; BENCHMARKS.md, "Sixty-first
    session").

    Panels of features outermost where the block's rows of X and a strip
    of Wp outgrow :data:`FORWARD_PANEL_BYTES` (:func:`_panel_features`): each panel's
    tiles add into the logits the panel before stored. In a later panel a
    row's last vector adds its padded lanes, zeros for finite X, into the
    next row's first entries (a non-finite entry of X makes its own row's
    logits non-finite, and that row comes first).
    """
    n = Wp.shape[0]
    L = lanes(X)
    panel = _panel_features(X, rows, n)
    f0 = 0
    while f0 < n:
        count = min(panel, n - f0)
        first = f0 == 0
        # The last vectors first: the tiles of vector 0, which write each
        # row's first entries, run after the others have run on into them.
        v = vectors
        while v > 0:
            c = _vectors(v)
            v -= c
            j = v * L
            q = 0
            while q < rows:
                t = _tile_rows(rows - q)
                forward_tile(X, r0 + q, Wp, j, Z, q, f0, count, first, t, c)
                q += t
        f0 += count


# The forward product's panels of features: at most this many bytes of the
# block's rows of X and of a strip of Wp (three vectors a feature) per
# panel, so that both stay in L2 while every strip of classes passes over
# the panel, each strip read by every row tile; X's features in as few
# panels as that allows, of equal size. On two threads of the Zen 5 host
# (1 MiB of L2 a core), blocks of 192 rows, the forward product alone at
# (1000, 3000, 1000) float64 (4.6 MiB of X a block) took 0.86-0.92x the
# time in panels of 256-1,024 features (BENCHMARKS.md, "Sixty-third
# session"), when panels counted X alone, one panel up to two panels'
# worth. Counting the strip too, and splitting 1,025-2,048 features
# worth into two: in float32 the whole gradient at (1000, 3000, 100)
# (blocks of 48 rows, 576 KiB of X and as much of a strip, now two
# panels) took 0.88-0.91x the time in three runs, at (1000, 3000, 300)
# and (1000, 3000, 1000) 0.96-0.97x; float64 0.97-1.02x at 1,500 and
# 3,000 features (`benchmarks/against_commit.py --strategy gemm`, four
# rounds; "Sixty-fifth session").
FORWARD_PANEL_BYTES = 768 << 10


@njit(inline="always", **JIT)
def _panel_features(X, rows, n):
    """Features a panel of :func:`forward_block`: X's n in the fewest equal panels.

    Each of at most :data:`FORWARD_PANEL_BYTES` of the block's rows of X
    and a strip of Wp, or of 64 features.
    """
    panel = max(FORWARD_PANEL_BYTES // (max(rows, 1) * itemsize(X) + 3 * VECTOR_BYTES), 64)
    return -(-n // -(-n // panel))


# The backward product's panels of classes: at most this many bytes of the
# block's error E (rows x a panel's vectors) per panel, so that E stays in
# L2 while every feature tile of X passes over it (a panel of whole strips,
# three vectors at least). One panel wherever the block's E fits.
PANEL_BYTES = 256 << 10


@njit(**JIT)
def backward_block(X, r0, rows, E, G, first):
    """INOUT G (n, kp) += X[r0:r0 + rows]ᵀ E[:rows] (in G[:, :k]; k = E.shape[1]).

    :func:`backward_vectors` over every vector of G's columns.
    """
    backward_vectors(X, r0, rows, E, G, first, G.shape[1] // lanes(X))


@njit(**JIT)
def backward_vectors(X, r0, rows, E, G, first, vectors):
    """INOUT G[:, :vectors L] (+)= X[r0:r0 + rows, :n]ᵀ E[:rows, :vectors L] (L: :func:`lanes`).

    n = G's rows: X may be a packed block (:func:`pack_block`).

    Where ``first``, G = that product instead (G not read: a chunk's first
    block). E (rows + :func:`spare_rows`, k) at least, its entries past row
    rows - 1 finite; G's columns from k on take the extra lanes. Not inlined, as
    :func:`forward_block`. :func:`backward_features` over every feature.
    """
    backward_features(X, r0, rows, E, G, first, vectors, 0, G.shape[0])


# Rows of X whose length is a whole multiple of ALIAS_BYTES put a block's
# entries of one feature in one set of L1 (its sets repeat every 4 KiB;
# of L2 every 64 KiB), whose ways cannot hold the block's rows: the
# backward product, which walks the block's rows once for each tile of
# features, finds the lines the tile before it read gone. On AVX2 hosts
# the gradient's and the Hessian products' tiles therefore copy each such
# block into rows a cache line longer (pack_buffer, pack_block) and run
# both products there. On the 2-core Zen 3 host, against the whole block
# read in place (`benchmarks/against_commit.py --strategy gemm`, three
# rounds, five where a first read stood out): the gradient 0.60x the time
# at (4000, 3072, 30) float64, 0.77x at (4368, 3072, 10), 0.89-0.97x at
# 512, 1,024 and 1,536 features; float32 0.67-0.83x at 1,024-4,096
# features; the Hessian products (``--what products``) 0.62-0.89x in
# float64, 0.78-0.80x in float32; rows of other lengths read in place as
# before (0.94-1.08x, the runs' spread). The copy costs a pass over the
# block: where rows do not alias, about a quarter of the two products'
# time in a scratch script. Walking each cache line's features over 8
# rows at a time instead, with no copy, gained less (two threads: the copy
# took 0.80-0.91x its time at float64 rows of 1,024 and 3,072 features,
# 0.76-0.90x in float32; BENCHMARKS.md, "Sixty-ninth session"). Hosts with AVX-512
# read every block in place (not measured there).
ALIAS_BYTES = 4096


@njit(inline="always", **JIT)
def _aliasing_rows(X):
    """Whether X's rows are a whole multiple of :data:`ALIAS_BYTES` long (AVX2 hosts)."""
    return not WIDE_REGISTERS and X.shape[1] * itemsize(X) % ALIAS_BYTES == 0


@njit(inline="always", **JIT)
def pack_buffer(X, rows):
    """SCRATCH for :func:`pack_block`: (rows, n + a line) where X's rows alias, else (0, 0)."""
    if _aliasing_rows(X):
        return np.empty((rows, X.shape[1] + LINE_BYTES // itemsize(X)), dtype=X.dtype)
    return np.empty((0, 0), dtype=X.dtype)


@njit(inline="always", **JIT)
def pack_block(X, r0, rows, buf):
    """Return (Xb, rb), X[r0:r0 + rows] as Xb[rb:rb + rows]: copied into ``buf`` unless it is empty.

    The products take the features from Wp and G (n rows), the row
    stride from Xb: the copy's last line of each row is not read.
    """
    if buf.shape[0] == 0:
        return X, r0
    n = X.shape[1]
    for q in range(rows):
        for f in range(n):
            buf[q, f] = X[r0 + q, f]
    return buf, 0


@njit(**JIT)
def backward_features(X, r0, rows, E, G, first, vectors, f_lo, f_hi):
    """:func:`backward_vectors` on G's rows (X's features) f_lo <= f < f_hi alone.

    Panels of classes outer (:data:`PANEL_BYTES`), then the feature tiles,
    then the panel's strips: each feature tile of X is read once per panel,
    the panel's part of E from L2.
    """
    L = lanes(X)
    per_panel = max(3, PANEL_BYTES // (max(rows, 1) * L * itemsize(X)) // 3 * 3)
    p0 = 0
    while p0 < vectors:
        p1 = min(vectors, p0 + per_panel)
        if vectors - p1 < 3:  # no panel of a lone rest
            p1 = vectors
        f0 = f_lo
        while f0 < f_hi:
            t = _tile_rows(f_hi - f0)
            v = p0
            while v < p1:
                c = _vectors(p1 - v)
                backward_tile(X, r0, rows, E, v * L, G, f0, first, t, c)
                v += c
            f0 += t
        p0 = p1


# The rest (rest_classes) on rows of at least this many features: the rows
# kernels' tiles end each dot product in a horizontal sum, and on short
# rows those sums outweigh the vector they save. Below LANES_FROM classes
# (the tiles' kernel with the error transposed), a rest of at most
# REST_FEW_CLASSES classes past whole vectors of REST_MIN_WHOLE_CLASSES
# or more, on rows of REST_FEW_MIN_FEATURES or more.
REST_MIN_FEATURES = 96
REST_FEW_CLASSES = 2
REST_MIN_WHOLE_CLASSES = 16
REST_FEW_MIN_FEATURES = 384


@njit(inline="always", **JIT)
def _rest_rule(k, n, L):
    """Return :func:`rest_classes`'s r for k classes, n features, L lanes a vector."""
    r = k % L
    if k >= LANES_FROM:
        ok = 4 * r <= L and n >= REST_MIN_FEATURES
    else:
        ok = (k - r >= REST_MIN_WHOLE_CLASSES and r <= REST_FEW_CLASSES
              and n >= REST_FEW_MIN_FEATURES)
    return r if ok else 0


@njit(inline="always", **JIT)
def rest_classes(X, k):
    """r: the last classes past whole vectors that the tiles leave to a chunk's rest (0: none).

    On the tiles, a vector's padded lanes cost what its classes do: k =
    100 float32 classes run as 112. r classes along the features instead
    (dot products with r rows of Wᵀ, as the rows kernels' tiles take them)
    cost r / L of a vector's multiply-adds, and their horizontal sums. So
    from ``_common.LANES_FROM`` classes where r is at most a quarter of a
    vector and rows have :data:`REST_MIN_FEATURES` features or more. On
    two threads of the Zen 5 host, the whole gradient against all classes
    on the tiles (``benchmarks/against_commit.py``, GEMM strategy, four
    rounds): float32 0.86-0.92x the time at 200-784 features (k = 36 and
    100), 0.94-0.97x at 100 and 3,000; with every rest of up to half a
    vector, 0.99x at 64 features and 1.09-1.23x at 20-50, 0.99-1.02x with
    r = 8 of 16 (k = 1000); float64 0.96-0.99x with r = 2 of 8 (k = 98),
    0.99-1.00x with 4 of 8 (BENCHMARKS.md, "Sixty-fourth session").

    Below LANES_FROM classes, by the rule above the gradient took 0.88x
    the time in float32 at k = 18 on 500-784 features and 0.87-0.99x at
    17 on 96, but at k = 20 (r = 4) 0.97-1.11x on 100-500 features (0.88x
    at 1,500); float64 0.85x at k = 26 on 784 features, 0.94x on 500, 0.99x
    on 200, 0.99-1.01x at k = 18 and 1.00-1.08x at 9 and 10 (one whole
    vector). Hence :data:`REST_FEW_CLASSES`, :data:`REST_MIN_WHOLE_CLASSES`
    and :data:`REST_FEW_MIN_FEATURES` there; the Hessian products as the
    gradient ("Sixty-fifth session").
    """
    return _rest_rule(k, X.shape[1], lanes(X))


@njit(inline="always", **JIT)
def no_rest(X, k):
    """:func:`rest_classes` of the kernels compiled without a rest: 0, every class on the tiles."""
    return 0


@njit(inline="always", **JIT)
def rest_rows(X, k, r, arrays):
    """Rows of k entries a chunk's scratch holds beyond its blocks' for a rest of r classes.

    ``arrays`` (r, n) arrays: 2 for the gradient (W's rest and G's), 3
    for the Hessian products (W's, the direction's and the product's).
    Whole cache lines (:func:`_row_unit`), none where there is no rest.
    """
    u = _row_unit(k, itemsize(X))
    return -(-arrays * r * X.shape[1] // (k * u)) * u


def rest_rows_for(k: int, n: int, itemsize: int, arrays: int) -> int:
    """Return :func:`rest_rows` for k classes, n features of ``itemsize`` bytes."""
    u = row_unit(k, itemsize)
    return -(-arrays * rest_classes_for(k, n, itemsize) * n // (k * u)) * u


def rest_classes_for(k: int, n: int, itemsize: int) -> int:
    """Return :func:`rest_classes` for k classes, n features of ``itemsize`` bytes.

    (:func:`_rest_rule`'s Python form: nothing compiled.)
    """
    return _rest_rule.py_func(k, n, VECTOR_BYTES // itemsize)


def padded_width(k: int, itemsize: int) -> int:
    """Return kp, k classes rounded up to whole vectors: the width of Wp and G."""
    lanes_ = VECTOR_BYTES // itemsize
    return -(-k // lanes_) * lanes_


def spare_rows_for(k: int, itemsize: int) -> int:
    """Return :func:`spare_rows` for k classes of ``itemsize`` bytes (the scratch's extra rows)."""
    u = row_unit(k, itemsize)
    return -(-(VECTOR_BYTES // itemsize) // (k * u)) * u
