"""Row passes of the many-class kernels in explicit vectors, written in LLVM IR.

The softmax error of a row of k classes takes three passes over it: the
maximum (and whether every logit is finite), the shifted exp and its sum,
and the scaling into the error with its sum into the intercept's gradient.
Here each is one loop of explicit vectors (``_config.VECTOR_BYTES``: 16
float32 or 8 float64 lanes on AVX-512 hosts, half as many elsewhere) with
a masked last step:

- :func:`bias_max_finite_row`: z[j] += bias[j], then (max of z, whether
  every entry is finite) (:func:`max_finite_row` without the bias);
- :func:`exp_row`: out[j] = exp(z[j] - mx) (out may be z), returning the sum
  (:func:`._common._exp_shifted`'s scheme and constants, see
  ``_common._exp_loop``);
- :func:`scale_add_row`: z[j] *= f, then g[j] += z[j] (:func:`scale_row`
  without the sum).

and the two passes of a row's Hessian product (``_hessp``): :func:`bias_dot_row`
(u += cv, then <p, u>) and :func:`hvp_update_row` (u = d p (u - <p, u>),
added into g).

Why: LLVM vectorises the Numba loops at 8 float32 lanes, four vectors a
step, and the entries past the last whole step go through scalar code;
on rows of a hundred classes that remainder, an exp each, was a large
part of a row's time, and in 512-bit vectors through the loop vectoriser
it grew (BENCHMARKS.md, "Tenth session"). The maximum, as eight scalar
chains that LLVM's SLP vectoriser joined plus a separate count of the
finite entries, took more than half the exp's time.
Here no entry goes through scalar code. The callers run each pass over a
whole block of rows before the next (``_fused._block_error_lanes``), so
that a row's exp no longer waits on its own maximum's reduction, nor its
scaling on its sum: in cache, one thread, the error took 1.70-1.85 cycles
an entry at 100 classes against 2.35-2.44 before, 1.13-1.18 against 1.67
at 1000 (BENCHMARKS.md, "Twenty-ninth session").

One change of form against ``_exp_loop``, not of accuracy: n =
round(t log2 e) comes from the "magic number" addition (t log2 e + 1.5
2^23 in float32, 1.5 2^52 in float64, whose low mantissa bits then hold
n), which also gives 2^n by an integer add and shift of the same bits (no
rounding instruction, no conversion); n differs from floor(t log2 e + 1/2)
only at exact halves, where either keeps |r| <= ln2 / 2.

The maximum and the scaling run here on every host; the exp and the
Hessian product's two passes only on hosts with AVX-512 (:data:`ROW_VECTORS`),
where masked loads and stores are cheap and 32 vector registers hold the
exp's constants. On a Zen 3 host (AVX2), one thread, a block of 32 rows in
cache, the maximum here took 0.2-0.6x the time of the Numba loops (eight
chains and a count; 0.96x at 100 float32 classes) and the whole error
pass 0.46-0.93x in float32, 0.63-0.98x in float64 with the scaling here
too. The exp here was 1.1-1.3x slower in float64 (its constants spill
from AVX2's 16 registers); in float32 faster alone (0.5-1.0x) but not
inside the pass (the gradient 0.94-1.09x); the Hessian passes 0.3-1.0x
in float32 but 1.0-1.6x in float64 (BENCHMARKS.md, "Fifty-seventh
session").
Each calling function is marked so that 512-bit vectors are legal in it
(``_width._widen`` without the preference).
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ._ahead import _I32, _I64, VectorOps, _const, _intrinsic_fn, tail_mask
from ._common import (
    _EXP_LO32,
    _EXP_LO64,
    _EXP_POLY32,
    _EXP_POLY64,
    _LN2_HI32,
    _LN2_HI64,
    _LN2_LO32,
    _LN2_LO64,
    _LOG2E,
    _exp_shifted,
)
from ._config import JIT, WIDE_REGISTERS
from ._width import _widen

# The exp and the Hessian product's passes in explicit vectors (see the module).
ROW_VECTORS = WIDE_REGISTERS

_FLAGS = ("reassoc", "nsz", "contract", "afn", "arcp")
_I1 = ir.IntType(1)


def _splat(b, vec_t, v):
    """Return a vector of vec_t with every lane the scalar IR value v."""
    L = vec_t.count
    one = b.insert_element(ir.Constant(vec_t, ir.Undefined), v, ir.Constant(_I32, 0))
    return b.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, L), [0] * L))


def _row_loop(b, ops, n, carried, step):
    """Run ``step`` over the n entries of a row, a vector at a time, the last one masked.

    ``carried``: the loop's carried IR values at the start; ``step(f,
    mask, values)`` emits one step at element f (mask None for a whole
    vector, else the lanes within the row) and returns the new values.
    Returns the values after the last step.
    """
    L = ops.L
    whole = b.and_(n, _const(-L))
    start = b.block
    loop = b.append_basic_block("row.loop")
    tail = b.append_basic_block("row.tail")
    b.cbranch(b.icmp_signed(">", whole, _const(0)), loop, tail)
    b.position_at_end(loop)
    f = b.phi(_I64)
    vals = [b.phi(v.type) for v in carried]
    f.add_incoming(_const(0), start)
    for p, v in zip(vals, carried, strict=True):
        p.add_incoming(v, start)
    new = step(f, None, vals)
    f1 = b.add(f, _const(L))
    end = b.block
    f.add_incoming(f1, end)
    for p, v in zip(vals, new, strict=True):
        p.add_incoming(v, end)
    b.cbranch(b.icmp_signed("<", f1, whole), loop, tail)
    b.position_at_end(tail)
    out = []
    for v0, v1 in zip(carried, new, strict=True):
        p = b.phi(v0.type)
        p.add_incoming(v0, start)
        p.add_incoming(v1, end)
        out.append(p)
    # The masked step only where the row has a rest: on a row of whole
    # vectors it would cost a whole vector's work for nothing.
    rest = b.sub(n, whole)
    masked = b.append_basic_block("row.masked")
    done = b.append_basic_block("row.done")
    b.cbranch(b.icmp_signed(">", rest, _const(0)), masked, done)
    b.position_at_end(masked)
    last = step(whole, tail_mask(b, rest, L), out)
    from_masked = b.block
    b.branch(done)
    b.position_at_end(done)
    result = []
    for v0, v1 in zip(out, last, strict=True):
        p = b.phi(v0.type)
        p.add_incoming(v0, tail)
        p.add_incoming(v1, from_masked)
        result.append(p)
    return result


class _Row:
    """What an intrinsic's code needs of its arguments, in the first array's dtype.

    ``n``: the first array's length (the row's); ``ptrs``: the data pointer
    of each array argument, in order; ``vecs``: each scalar argument cast to
    the dtype and broadcast to a vector, in order. Marks the function the
    code goes into so that 512-bit vectors are legal there.
    """

    def __init__(self, context, b, sig, args):
        _widen(b.function, prefer=False)
        dtype = sig.args[0].dtype
        self.ops = VectorOps(context, b, dtype)
        self.ptrs, self.vecs = [], []
        for aty, a in zip(sig.args, args, strict=True):
            if isinstance(aty, types.Array):
                arr = context.make_array(aty)(context, b, a)
                self.ptrs.append(arr.data)
                if len(self.ptrs) == 1:
                    self.n = b.extract_value(arr.shape, 0)
            else:
                self.vecs.append(_splat(b, self.ops.vec, context.cast(b, a, aty, dtype)))
        self.sfx = f"v{self.ops.L}f{self.ops.itemsize * 8}"

    def fn(self, b, name, ret, args):
        """Return the LLVM intrinsic ``llvm.<name>.<vector suffix>``."""
        return _intrinsic_fn(b.module, f"llvm.{name}.{self.sfx}", ret, args)

    def lane_sum(self, b, v):
        """Return the sum of v's lanes (a tree: reassociation allowed)."""
        ops = self.ops
        reduce = self.fn(b, "vector.reduce.fadd", ops.fty, [ops.fty, ops.vec])
        return b.call(reduce, [ir.Constant(ops.fty, 0.0), v], fastmath=("reassoc", "nsz"))


def _rows_of(*arrays) -> bool:
    """Whether every argument is a 1-D C-contiguous float array of the first one's dtype."""
    return all(isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C"
               and a.dtype in (types.float32, types.float64) and a.dtype == arrays[0].dtype
               for a in arrays)


class _Exp:
    """exp(x - mx) of one vector, as ``_common._exp_loop`` computes it (see the module)."""

    def __init__(self, b, ops):
        self.b, self.ops = b, ops
        L, vec = ops.L, ops.vec
        wide = ops.itemsize == 8
        ivec = ir.VectorType(ir.IntType(ops.itemsize * 8), L)
        lo, hi, lo2, poly = ((_EXP_LO64, _LN2_HI64, _LN2_LO64, _EXP_POLY64) if wide
                             else (_EXP_LO32, _LN2_HI32, _LN2_LO32, _EXP_POLY32))
        magic = 1.5 * 2.0 ** (52 if wide else 23)
        magic_bits = 0x4338000000000000 if wide else 0x4B400000
        bias, shift = (1023, 52) if wide else (127, 23)

        def splat(v):
            return ir.Constant(vec, [float(v)] * L)

        self.ivec = ivec
        self.lo, self.neg_one, self.one = splat(lo), splat(-1.0), splat(1.0)
        self.log2e, self.magic = splat(_LOG2E), splat(magic)
        self.ln2_hi, self.ln2_lo = splat(-hi), splat(-lo2)
        self.poly = [splat(c) for c in poly]
        self.exp_bias = ir.Constant(ivec, [bias - magic_bits] * L)
        self.shift = ir.Constant(ivec, [shift] * L)
        sfx = f"v{L}f{ops.itemsize * 8}"
        self.maxnum = _intrinsic_fn(b.module, f"llvm.maxnum.{sfx}", vec, [vec, vec])

    def _poly(self, r, r2):
        """Return the polynomial at r in ``_common._exp_poly``'s form.

        Horner's for float32, Estrin's for float64, grouped as there.
        """
        b, fma = self.b, self.ops.fma
        if self.ops.itemsize == 4:
            p = self.poly[0]
            for c in self.poly[1:]:
                p = b.call(fma, [p, r, c])
            return p
        terms = self.poly[::-1]  # lowest degree first
        power = r
        while len(terms) > 1:
            # a + c x for each pair, with x = r, r^2, r^4, ...; an odd one out carried up.
            pairs = [b.call(fma, [terms[i + 1], power, terms[i]])
                     for i in range(0, len(terms) - 1, 2)]
            terms = pairs + terms[len(pairs) * 2:]
            power = r2 if power is r else b.fmul(power, power)
        return terms[0]

    def __call__(self, z, mxv):
        b, fma = self.b, self.ops.fma
        x = b.fsub(z, mxv, flags=_FLAGS)
        keep = b.fcmp_ordered(">=", x, self.lo)
        t = b.call(self.maxnum, [x, self.lo])
        kf = b.call(fma, [t, self.log2e, self.magic])
        nf = b.fsub(kf, self.magic)
        # (t - n hi) - n lo, grouped as in _exp_loop: the max with -1 (a
        # no-op) keeps the rounding of n ln2 out.
        r = b.call(self.maxnum, [b.call(fma, [nf, self.ln2_hi, t]), self.neg_one])
        r = b.call(fma, [nf, self.ln2_lo, r])
        r2 = b.fmul(r, r)
        p = b.fadd(b.call(fma, [self._poly(r, r2), r2, r]), self.one)
        bits = b.shl(b.add(b.bitcast(kf, self.ivec), self.exp_bias), self.shift)
        p = b.fmul(p, b.bitcast(bits, self.ops.vec))
        return b.select(keep, p, self.ops.zero)


@intrinsic
def _exp_row_ir(typingctx, z, mx, out):
    """out[j] = exp(z[j] - mx) (z, out 1-D C-contiguous; out may be z); returns the sum."""
    if not _rows_of(z, out):
        return None

    def codegen(context, b, sig, args):
        row = _Row(context, b, sig, args)
        ops, (zp, op), (mxv,) = row.ops, row.ptrs, row.vecs
        exp = _Exp(b, ops)

        def step(f, mask, vals):
            e = exp(ops.load(ops.at(zp, f), mask), mxv)
            ops.store(e, ops.at(op, f), mask)
            if mask is not None:
                e = b.select(mask, e, ops.zero)
            return [b.fadd(vals[0], e, flags=_FLAGS)]

        total, = _row_loop(b, ops, row.n, [ops.zero], step)
        return row.lane_sum(b, total)

    return z.dtype(z, mx, out), codegen


def _fmax(b, x, y):
    """Return x > y ? x : y (one ``vmaxps``; where either is NaN, y).

    Not ``llvm.maxnum``, whose NaN rule (the other operand) costs a compare
    and a blend beside the max where neither operand is a constant, nor
    ``llvm.vector.reduce.fmax``, which x86 lowers lane by lane to scalar
    maxima with a NaN check each: a chain of 15 (float32, AVX-512) in every
    row's maximum. The maxima here are of rows checked for finite entries
    (a row with NaN is reported, its maximum unused), and without NaN the
    two rules agree.
    """
    return b.select(b.fcmp_ordered(">", x, y), x, y)


def _halving(b, v, combine):
    """Return v's lanes combined by halves, ``combine(lo, hi)`` on vectors half as wide.

    One order of the operations wherever the code is inlined (the sums: strict
    adds, so the same rounding in every kernel that sums a row this way).
    """
    width = v.type.count
    while width > 1:
        width //= 2
        lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, width), list(range(width))))
        hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, width),
                                                list(range(width, 2 * width))))
        v = combine(lo, hi)
    return b.extract_element(v, ir.Constant(_I32, 0))


def _halving_max(b, v):
    """Return the maximum of v's lanes (:func:`_fmax` by halves)."""
    return _halving(b, v, lambda x, y: _fmax(b, x, y))


def _halving_sum(b, v):
    """Return the sum of v's lanes by halves, strict adds: one order wherever it is inlined."""
    return _halving(b, v, b.fadd)


def _make_max(bias: bool):
    """Return ``max_finite(z, b)``: (max of z, every entry finite).

    Where ``bias``, z[j] += b[j] first. (z a row of at least one entry; b
    as long, and not read without ``bias``.)
    """

    @intrinsic
    def max_finite(typingctx, z, bz):
        if not _rows_of(z, bz):
            return None
        ret = types.Tuple((z.dtype, types.boolean))

        def codegen(context, b, sig, args):
            row = _Row(context, b, sig, args)
            ops, (ptr, bp) = row.ops, row.ptrs
            L, vec = ops.L, ops.vec
            fabs = row.fn(b, "fabs", vec, [vec])
            mask_t = ir.VectorType(_I1, L)
            big = ir.Constant(vec, [_big(sig.args[0].dtype)] * L)
            low = ir.Constant(vec, [float("-inf")] * L)

            def step(f, mask, vals):
                vp = ops.at(ptr, f)
                v = ops.load(vp, mask)
                if bias:
                    v = b.fadd(v, ops.load(ops.at(bp, f), mask))
                    ops.store(v, vp, mask)
                fin = b.fcmp_ordered("<=", b.call(fabs, [v]), big)
                if mask is not None:
                    v = b.select(mask, v, low)
                    fin = b.or_(fin, b.not_(mask))
                return [_fmax(b, vals[0], v), b.and_(vals[1], fin)]

            mx, fin = _row_loop(b, ops, row.n, [low, ir.Constant(mask_t, [1] * L)], step)
            rand = _intrinsic_fn(b.module, f"llvm.vector.reduce.and.v{L}i1", _I1, [mask_t])
            return context.make_tuple(b, ret, [_halving_max(b, mx), b.call(rand, [fin])])

        return ret(z, bz), codegen

    return max_finite


_bias_max_finite_ir = _make_max(True)
_max_finite_ir = _make_max(False)


def _big(dtype) -> float:
    return float(np.finfo(str(dtype)).max)


def _make_scale(add: bool):
    """Return ``scale(z, f, g)``: z[j] *= f, and where ``add``, g[j] += z[j] after.

    (z, g 1-D C-contiguous; g at least as long as z. Without ``add``, g is
    not read: any row of the dtype.)
    """

    @intrinsic
    def scale(typingctx, z, f, g):
        if not _rows_of(z, g):
            return None

        def codegen(context, b, sig, args):
            row = _Row(context, b, sig, args)
            ops, (zp, gp), (fv,) = row.ops, row.ptrs, row.vecs

            def step(at, mask, vals):
                vz = ops.at(zp, at)
                e = b.fmul(ops.load(vz, mask), fv, flags=_FLAGS)
                ops.store(e, vz, mask)
                if add:
                    vg = ops.at(gp, at)
                    ops.store(b.fadd(ops.load(vg, mask), e, flags=_FLAGS), vg, mask)
                return []

            _row_loop(b, ops, row.n, [], step)
            return context.get_dummy_value()

        return types.void(z, f, g), codegen

    return scale


_scale_add_ir = _make_scale(True)
_scale_ir = _make_scale(False)


@intrinsic
def _bias_dot_ir(typingctx, u, cv, p):
    """u[j] += cv[j]; returns the sum of p[j] u[j] (u, cv, p 1-D C-contiguous, as long as u)."""
    if not _rows_of(u, cv, p):
        return None

    def codegen(context, b, sig, args):
        row = _Row(context, b, sig, args)
        ops, (up, cp, pp) = row.ops, row.ptrs

        def step(at, mask, vals):
            vu = ops.at(up, at)
            u_ = b.fadd(ops.load(vu, mask), ops.load(ops.at(cp, at), mask))
            ops.store(u_, vu, mask)
            # Masked lanes load as zeros: they add 0 to the sum.
            return [b.call(ops.fma, [ops.load(ops.at(pp, at), mask), u_, vals[0]])]

        total, = _row_loop(b, ops, row.n, [ops.zero], step)
        return row.lane_sum(b, total)

    return u.dtype(u, cv, p), codegen


@intrinsic
def _hvp_update_ir(typingctx, u, p, pu, d, g):
    """u[j] = d p[j] (u[j] - pu), then g[j] += u[j] (u, p, g 1-D C-contiguous)."""
    if not _rows_of(u, p, g):
        return None

    def codegen(context, b, sig, args):
        row = _Row(context, b, sig, args)
        ops, (up, pp, gp), (puv, dv) = row.ops, row.ptrs, row.vecs

        def step(at, mask, vals):
            vu, vg = ops.at(up, at), ops.at(gp, at)
            dp = b.fmul(dv, ops.load(ops.at(pp, at), mask), flags=_FLAGS)
            s_ = b.fmul(dp, b.fsub(ops.load(vu, mask), puv, flags=_FLAGS), flags=_FLAGS)
            ops.store(s_, vu, mask)
            ops.store(b.fadd(ops.load(vg, mask), s_, flags=_FLAGS), vg, mask)
            return []

        _row_loop(b, ops, row.n, [], step)
        return context.get_dummy_value()

    return types.void(u, p, pu, d, g), codegen


# Rows of at most ERROR_PAIR_VECTORS whole or partial vectors take the
# softmax error two rows at a time in registers (:func:`_error_pair_ir`).
ERROR_PAIR_VECTORS = 8


@intrinsic
def _error_pair_ir(typingctx, z0, z1, bias, gb, p0, p1, fw0, fw1, store_p):
    """Two rows' error in one pass, in registers.

    For each row of (z0, z1), 1-D C-contiguous rows of k classes (at most
    :data:`ERROR_PAIR_VECTORS` vectors; more: zeros returned, nothing
    written), bias, gb and p0, p1 as long (p0, p1 any such rows where not
    ``store_p``), fw0 and fw1 taken in float64: t = z + bias, M =
    max t, e = exp(t - M) (:class:`_Exp`), S = sum e (strict adds, lanes by
    halves); the row becomes its scaled error without the target, z = e
    fw / S (fw / S in float64, as ``_fused._block_error_lanes``' factor),
    added into gb; where ``store_p`` (a boolean), p = e / S (the softmax).
    Returns (M0, S0, F0, M1, S1, F1), F 1 where every entry of t is
    finite, else 0 (the row's other outputs are then meaningless). Both
    rows are loaded before either is stored, the second row stored first:
    z1 may be z0 (an odd last row, with fw1 = 0: gb gets the row once, z0
    its own error).
    The row stays in registers from the load to the store: one read and
    one write of each entry, where the three sweeps of
    ``_fused._block_error_lanes`` read each entry three times and write it
    three times; two rows in one body give the core a second chain of
    reductions (max, then sum) to overlap.
    """
    if not _rows_of(z0, z1, bias, gb, p0, p1) or not isinstance(store_p, types.Boolean):
        return None
    ret = types.UniTuple(z0.dtype, 6)

    def codegen(context, b, sig, args):
        row = _Row(context, b, sig, args)
        ops = row.ops
        L, vec, fty = ops.L, ops.vec, ops.fty
        zp0, zp1, bp, gp, pp0, pp1 = row.ptrs
        fws = [context.cast(b, a, t, types.float64) for a, t in zip(args[6:8], sig.args[6:8],
                                                                      strict=True)]
        # P's stores alone behind store_p, after every value they store is
        # computed: the error's code is one path with P and without.
        store_p = args[8]
        fabs = row.fn(b, "fabs", vec, [vec])
        big = ir.Constant(vec, [_big(sig.args[0].dtype)] * L)
        low = ir.Constant(vec, [float("-inf")] * L)
        mask_t = ir.VectorType(_I1, L)
        rand = _intrinsic_fn(b.module, f"llvm.vector.reduce.and.v{L}i1", _I1, [mask_t])
        exp = _Exp(b, ops)
        one = ir.Constant(fty, 1.0)
        vectors = b.udiv(b.add(row.n, _const(L - 1)), _const(L))
        rest = b.sub(row.n, b.mul(b.sub(vectors, _const(1)), _const(L)))
        done = b.append_basic_block("pair.done")
        start = b.block
        switch = b.switch(vectors, done)
        results = []  # (block, values) per case

        def tree(op, vs):
            while len(vs) > 1:
                vs = [op(vs[i], vs[i + 1]) if i + 1 < len(vs) else vs[i]
                      for i in range(0, len(vs), 2)]
            return vs[0]

        for V in range(1, ERROR_PAIR_VECTORS + 1):
            case = b.append_basic_block(f"pair.v{V}")
            switch.add_case(_const(V), case)
            b.position_at_end(case)
            tail = tail_mask(b, rest, L)
            masks = [None] * (V - 1) + [tail]
            bs = [ops.load(ops.at(bp, _const(v * L)), masks[v]) for v in range(V)]
            rows_t = []
            for zp in (zp0, zp1):
                rows_t.append([b.fadd(ops.load(ops.at(zp, _const(v * L)), masks[v]), bs[v])
                               for v in range(V)])
            out = []
            es_rows = []
            for t in rows_t:
                fin = tree(b.and_, [b.fcmp_ordered("<=", b.call(fabs, [x]), big)
                                    for x in t[:-1]]
                           + [b.or_(b.fcmp_ordered("<=", b.call(fabs, [t[-1]]), big),
                                    b.not_(tail))])
                last = b.select(tail, t[-1], low)
                mx = _halving_max(b, tree(lambda x, y: _fmax(b, x, y), t[:-1] + [last]))
                mxv = _splat(b, vec, mx)
                es = [exp(x, mxv) for x in t]
                es[-1] = b.select(tail, es[-1], ops.zero)
                # Strict adds (here, the halving sum, into gb): the same order
                # wherever the code is inlined.
                acc = ops.zero
                for e in es:
                    acc = b.fadd(acc, e)
                total = _halving_sum(b, acc)
                es_rows.append((es, total))
                finf = b.uitofp(b.call(rand, [fin]), fty)
                out += [mx, total, finf]
            errs = []
            # The second row stored first: where it is the first (z1 = z0,
            # fw1 = 0), the first row's stores come last.
            for (es, total), zp, pp, fw in reversed(list(zip(
                    es_rows, (zp0, zp1), (pp0, pp1), fws, strict=True))):
                # fw / S in fw's type (float64), then in the dtype: as the
                # three sweeps' caller computes its factor.
                f = b.fdiv(fw, b.fpext(total, fw.type) if fw.type != fty else total)
                f = _splat(b, vec, b.fptrunc(f, fty) if fw.type != fty else f)
                err = [b.fmul(e, f) for e in es]
                with b.if_then(store_p):
                    inv = _splat(b, vec, b.fdiv(one, total))
                    for v, e in enumerate(es):
                        ops.store(b.fmul(e, inv), ops.at(pp, _const(v * L)), masks[v])
                for v, x in enumerate(err):
                    ops.store(x, ops.at(zp, _const(v * L)), masks[v])
                errs.append(err)
            for v in range(V):
                at = ops.at(gp, _const(v * L))
                add = b.fadd(errs[1][v], errs[0][v])  # (errs: the second row's first)
                ops.store(b.fadd(ops.load(at, masks[v]), add), at, masks[v])
            results.append((b.block, out))
            b.branch(done)
        b.position_at_end(done)
        values = []
        for i in range(6):
            phi = b.phi(fty)
            phi.add_incoming(ir.Constant(fty, 0.0), start)
            for blk, out in results:
                phi.add_incoming(out[i], blk)
            values.append(phi)
        return context.make_tuple(b, ret, values)

    return ret(z0, z1, bias, gb, p0, p1, fw0, fw1, store_p), codegen


@njit(inline="always", **JIT)
def error_pair(z0, z1, bias, gb, p0, p1, fw0, fw1, store_p):
    """Two rows' error in one pass (see :func:`_error_pair_ir`); p0, p1 written if store_p."""
    return _error_pair_ir(z0, z1, bias, gb, p0, p1, fw0, fw1, store_p)


@njit(inline="always", **JIT)
def exp_row(z, mx, out):
    """out[j] = exp(z[j] - mx) (out may be z); returns the row sum (see the module)."""
    if ROW_VECTORS:
        return _exp_row_ir(z, mx, out)
    return _exp_shifted(z, mx, out)


@njit(inline="always", **JIT)
def bias_max_finite_row(z, bias):
    """z[j] += bias[j]; returns (max of z, whether every entry is finite)."""
    return _bias_max_finite_ir(z, bias)


@njit(inline="always", **JIT)
def max_finite_row(z):
    """(max of z, whether every entry is finite)."""
    return _max_finite_ir(z, z)


@njit(inline="always", **JIT)
def scale_add_row(z, f, g):
    """z[j] *= f, then g[j] += z[j] for j < len(z)."""
    _scale_add_ir(z, f, g)


@njit(inline="always", **JIT)
def scale_row(z, f):
    """z[j] *= f."""
    _scale_ir(z, f, z)


@njit(inline="always", **JIT)
def bias_dot_row(u, cv, p):
    """u[j] += cv[j]; returns the sum of p[j] u[j] (for j < len(u))."""
    if ROW_VECTORS:
        return _bias_dot_ir(u, cv, p)
    pu = u.dtype.type(0)
    for j in range(u.shape[0]):
        u[j] += cv[j]
        pu += p[j] * u[j]
    return pu


@njit(inline="always", **JIT)
def hvp_update_row(u, p, pu, d, g):
    """u[j] = d p[j] (u[j] - pu), then g[j] += u[j] (for j < len(u))."""
    if ROW_VECTORS:
        _hvp_update_ir(u, p, pu, d, g)
    else:
        for j in range(u.shape[0]):
            s = d * p[j] * (u[j] - pu)
            u[j] = s
            g[j] += s
