"""Helpers shared by the kernels: row chunks, a vector exp, row softmax, row status codes.

Status codes returned by the row-wise kernels (and interpreted by the
launch layer): ``OK``; ``NAN`` a row holds NaN; ``POSINF`` a row holds +inf
(the shift by the row maximum would give inf - inf); ``ALL_NEGINF`` a row
is entirely -inf, so no entry can carry probability.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload
from numba.np.numpy_support import as_dtype

from ._config import JIT, itemsize

OK = 0
NAN = 1
POSINF = 2
ALL_NEGINF = 3


@njit(inline="always", **JIT)
def _chunk(m, n_chunks, c):
    """Bounds [start, stop) of the c-th of n_chunks near-equal row ranges."""
    # prange indices can be typed unsigned; mixing uint64 with int64 would
    # promote the bounds to float64, so everything is made int64 first.
    c = np.int64(c)
    q, r = divmod(np.int64(m), np.int64(n_chunks))
    start = c * q + min(c, r)
    return start, start + q + (1 if c < r else 0)


# A vectorisable exp for the row kernels. Numba has no vector math library
# here (no SVML), so np.exp is one libm call per element and the loops
# around it stay scalar; on (100000, 100) that call was most of softmax's
# time. Cody-Waite scheme: x = n ln2 + r with |r| <= ln2/2 (ln2 split in a
# high part exact in a few bits plus a low correction), exp(r) by a
# polynomial (Cephes' expf minimax polynomial in float32; the degree-12
# Taylor polynomial in float64, truncation below 2e-16 on that interval),
# and 2^n built in its exponent bits by a bit cast (_pow2), all in one
# loop. Only arguments x <= 0 occur (everything is shifted by the row
# maximum). Below the normal range the result is flushed to 0, so
# exp(-inf) = 0 exactly; elsewhere it is within 2 ulp of np.exp (measured
# over the whole range, as the tests do).
# The loops are branch-free so LLVM vectorises them.
_LOG2E = 1.4426950408889634
_LN2_HI32 = 0.693359375
_LN2_LO32 = -2.12194440e-4
_LN2_HI64 = 6.93145751953125e-1
_LN2_LO64 = 1.42860682030941723212e-6
# Smallest arguments whose exp is still a normal number (2^-126, 2^-1022).
_EXP_LO32 = -87.33654
_EXP_LO64 = -708.3964185322641


# Polynomial coefficients of exp(r) on |r| <= ln2/2, highest degree first,
# without the final 1 + r (added separately).
_EXP_POLY32 = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
               1.6666665459e-1, 5.0000001201e-1)
_EXP_POLY64 = (1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
               1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0,
               1.0 / 6.0, 0.5)


@intrinsic
def _pow2(typingctx, nf):
    """2**nf for a float nf holding an integer of the normal exponent range.

    The integer goes straight into the exponent field and the bits are read
    back as a float: a bit cast, which Numba has no operator for on scalars
    (an array view would need the bits stored to memory and loaded again).
    The integer itself comes from the low bits of nf + 1.5 2^52 (2^23 in
    float32), exact for such an nf, not from a conversion: AVX2 has no
    vector conversion of float64 to int64, so LLVM took each lane apart
    and the float64 exp loop ran 1.3-1.5x slower on a Zen 3 host
    (BENCHMARKS.md, "Fifty-second session"); the value is the same.
    """
    if not isinstance(nf, types.Float):
        return None
    width = nf.bitwidth
    bias, shift = (127, 23) if width == 32 else (1023, 52)
    magic = 1.5 * 2.0 ** shift
    magic_bits = 0x4B400000 if width == 32 else 0x4338000000000000

    def codegen(context, builder, sig, args):
        it = ir.IntType(width)
        ft = context.get_value_type(nf)
        n = builder.bitcast(builder.fadd(args[0], ir.Constant(ft, magic)), it)
        bits = builder.shl(builder.add(n, ir.Constant(it, bias - magic_bits)),
                           ir.Constant(it, shift))
        return builder.bitcast(bits, ft)

    return nf(nf), codegen


def _exp_poly(r, poly):
    """p(r) for coefficients ``poly``, highest degree first, in r's dtype (compiled code only)."""
    raise NotImplementedError("_exp_poly is called from compiled code only")


@overload(_exp_poly, inline="always")
def _exp_poly_forms(r, poly):
    # Float64's polynomial of degree 10 in Estrin's scheme: pairs
    # a_2j + a_2j+1 r, then pairs of those with r^2, r^4 and r^8. Horner's
    # form is one chain of ten multiply-adds, each waiting for the one
    # before, and the float64 exp loop ran at that chain's latency, not at
    # the FMA units' rate: 0.83x its time in Estrin's form, at the same
    # largest error; the fused gradient 0.94-0.98x at 3 and 10 classes,
    # 1.01x at 100 (seven alternating rounds). Float32's polynomial of
    # degree 5 keeps Horner's form: there the gradient took 0.99-1.09x the
    # time with Estrin's (2-vCPU Zen 3 host; BENCHMARKS.md, "Seventy-fourth
    # session").
    if not isinstance(r, types.Float) or not isinstance(poly, types.UniTuple):
        return None
    cast = as_dtype(r).type
    if poly.count == len(_EXP_POLY64):
        def estrin(r, poly):
            a10, a9, a8, a7, a6, a5, a4, a3, a2, a1, a0 = poly
            r2 = r * r
            r4 = r2 * r2
            low = (cast(a0) + cast(a1) * r) + (cast(a2) + cast(a3) * r) * r2
            mid = (cast(a4) + cast(a5) * r) + (cast(a6) + cast(a7) * r) * r2
            high = (cast(a8) + cast(a9) * r) + cast(a10) * r2
            return (low + mid * r4) + high * (r4 * r4)
        return estrin
    if poly.count == len(_EXP_POLY32):
        # Written out: a loop over the tuple, inlined from an overload, left
        # a variable out of scope in Numba's IR (its assumption warning).
        def horner(r, poly):
            a5, a4, a3, a2, a1, a0 = poly
            p = cast(a5) * r + cast(a4)
            p = p * r + cast(a3)
            p = p * r + cast(a2)
            p = p * r + cast(a1)
            return p * r + cast(a0)
        return horner
    return None


@njit(inline="always", **JIT)
def _exp_loop(z, mx, out, lo, ln2_hi, ln2_lo, poly):
    """out[j] = exp(z[j] - mx); returns the sum of the out[j]. ``out`` may be ``z``."""
    dt = z.dtype.type
    log2e = dt(_LOG2E)
    half = dt(0.5)
    zero = dt(0)
    one = dt(1)
    s = zero
    for j in range(z.shape[0]):
        x = z[j] - mx
        keep = x >= lo
        t = max(x, lo)
        nf = np.floor(t * log2e + half)
        # (t - n hi) - n lo, as written: with "reassoc" and "nsz" LLVM
        # regrouped it as t - n (hi + lo), and the rounding of n ln2 cost up
        # to 200 ulp in float64 near the bottom of the range (4 in float32;
        # measured). The max, a no-op here (|t - n hi| < 0.35), is a barrier
        # it cannot regroup through.
        r = max(t - nf * ln2_hi, -one) - nf * ln2_lo
        p = (_exp_poly(r, poly) * (r * r) + r + one) * _pow2(nf)
        e = p if keep else zero
        out[j] = e
        s += e
    return s


@njit(inline="always", **JIT)
def _exp_row(z, mx, out):
    """:func:`_exp_loop` with the constants of z's dtype."""
    dt = z.dtype.type
    if itemsize(z) == 4:
        return _exp_loop(z, mx, out, dt(_EXP_LO32), dt(_LN2_HI32), dt(_LN2_LO32),
                         _EXP_POLY32)
    return _exp_loop(z, mx, out, dt(_EXP_LO64), dt(_LN2_HI64), dt(_LN2_LO64), _EXP_POLY64)


@njit(inline="always", **JIT)
def _exp_shifted(z, mx, out):
    """out[j] = exp(z[j] - mx) for one row; returns the row sum.

    ``out`` may be ``z`` (in place). Arguments below the normal range give
    exactly 0.
    """
    return _exp_row(z, mx, out)


@njit(inline="always", **JIT)
def _exp_flat(z):
    """z[j] = exp(z[j]) in place, for arguments z[j] <= 0 (-inf gives 0).

    For a block of rows shifted by their own maxima and stored end to end
    (or transposed): one vector loop over all of them (the fused kernels'
    :func:`._fused._error4` and :func:`._fused._block_error_t`).
    """
    _exp_row(z, z.dtype.type(0), z)


# A running max(mx, v) is one chain of compare-and-selects, which LLVM does
# not vectorise without the "nnan" fast-math flag (which the kernels must not
# have: see _config): about 2.7 cycles an entry, most of the softmax error's
# time on rows of a hundred classes or more (measured). Rows of LANES_FROM
# classes or more take their maximum in whole vectors instead
# (``_rowvec.max_finite_row``; once eight interleaved chains that LLVM's SLP
# vectoriser joined, 2.3-4.3x faster than one chain from 40 entries on).
# Shorter rows keep the single chain, as fast or faster there (BENCHMARKS.md,
# "Seventh session"). The choice is made once per block of rows, not per
# row: a test and a second code path inside the loop over short rows made it
# 4-10 % slower at k = 2 and 10 (measured).
LANES_FROM = 32


@njit(inline="always", **JIT)
def _max_chain(z):
    """Maximum of a short row as one chain (see :data:`LANES_FROM`)."""
    mx = z[0]
    for j in range(z.shape[0]):
        mx = max(mx, z[j])
    return mx


@njit(inline="always", **JIT)
def _max_finite(z):
    """(max of z, whether every entry is finite), in one branch-free sweep.

    ``|v| <= big`` is false for NaN and +-inf; without "nnan"/"ninf" in
    the fast-math flags LLVM keeps the comparison. For short rows; long
    ones go through ``_rowvec.max_finite_row``.
    """
    big = np.finfo(z.dtype).max
    mx = z[0]
    fin = True
    for j in range(z.shape[0]):
        v = z[j]
        mx = max(mx, v)
        fin = fin & (abs(v) <= big)
    return mx, fin


@njit(inline="always", **JIT)
def _row_max(z):
    """Row maximum and a status code (NAN, POSINF, ALL_NEGINF or OK); one read of the row."""
    mx = -np.inf
    status = OK
    for j in range(z.shape[0]):
        v = z[j]
        if v != v:
            return mx, NAN
        if v > mx:
            mx = v
    if mx == np.inf:
        status = POSINF
    elif mx == -np.inf:
        status = ALL_NEGINF
    return mx, status


@njit(inline="always", **JIT)
def _max_status(mx):
    """Return the status code of a row without NaN whose maximum is mx."""
    if mx == np.inf:
        return POSINF
    if mx == -np.inf:
        return ALL_NEGINF
    return OK


# Parallel kernels turn every array expression (a[:] = 0, a += b) into a
# parallel region of its own; these explicit loops keep such work serial.
@njit(inline="always", **JIT)
def _zero1(a):
    """OUT a: set to 0."""
    zero = a.dtype.type(0)
    for j in range(a.shape[0]):
        a[j] = zero


@njit(inline="always", **JIT)
def _zero2(A):
    """OUT A: set to 0."""
    zero = A.dtype.type(0)
    for j in range(A.shape[0]):
        for f in range(A.shape[1]):
            A[j, f] = zero


@njit(inline="always", **JIT)
def _chunk_partials(c, m, G, g):
    """Start chunk c of a pass that sums per chunk: its rows [start, stop).

    Returns (start, stop, G[c], g[c]) with the two partial sums zeroed; G
    (n_chunks, a, b) and g (n_chunks, k) hold one sum per chunk of the m rows.
    """
    start, stop = _chunk(m, G.shape[0], c)
    Gc = G[c]
    gc = g[c]
    _zero2(Gc)
    _zero1(gc)
    return start, stop, Gc, gc


@njit(inline="always", **JIT)
def _chunk_partials_set(c, m, G, g):
    """:func:`_chunk_partials` for passes whose first block's product sets G[c].

    g[c] zeroed; G[c] only where the chunk has no rows (no block to set it).
    """
    start, stop = _chunk(m, G.shape[0], c)
    Gc = G[c]
    gc = g[c]
    if start >= stop:
        _zero2(Gc)
    _zero1(gc)
    return start, stop, Gc, gc


@njit(inline="always", **JIT)
def _softmax_row(z, mx, o, row_exp):
    """OUT o = softmax(z) for one row of maximum mx; ``o`` may be ``z``.

    ``row_exp(z, mx, o)`` writes o = exp(z - mx) and returns its sum:
    :func:`_exp_shifted`, or ``_rowvec.exp_row`` for long rows. The row
    sum is >= 1 (the maximum contributes exp(0) = 1), so the division is
    safe.
    """
    inv = z.dtype.type(1) / row_exp(z, mx, o)
    for j in range(z.shape[0]):
        o[j] *= inv


@njit(inline="always", **JIT)
def _log_softmax_row(z, mx, o, ex, row_exp):
    """OUT o = z - logsumexp(z) for one row of maximum mx; ``o`` may be ``z``.

    SCRATCH ex (k,): the exp terms (``row_exp`` as in :func:`_softmax_row`).
    z - max is stored first and log(s)
    subtracted in a second pass: z - (max + log(s)) would round
    max + log(s) at the magnitude of max and then cancel, losing the
    relative accuracy of log p ~ 0 (the likeliest classes). With "reassoc"
    an expression (z - max) - log(s) may be regrouped into exactly that, so
    the split goes through memory.
    """
    ls = np.log(row_exp(z, mx, ex))
    k = z.shape[0]
    for j in range(k):
        o[j] = z[j] - mx
    for j in range(k):
        o[j] -= ls


@njit(inline="always", **JIT)
def _softmax_inplace(z):
    """INOUT z: finite logits -> softmax(z), in place.

    The same arithmetic as the probabilities the gradient pass stores
    (max, the vector exp, times 1 / sum; the sum is >= 1: the largest term
    is exp(0)).
    """
    mx = z[0]
    for j in range(z.shape[0]):
        mx = max(mx, z[j])
    _softmax_row(z, mx, z, _exp_shifted)


# Reading X ahead of the register tiles (the rows kernels of the gradient
# and of the Hessian products). The tiles read four or eight consecutive
# rows side by side: short interleaved streams, which the hardware
# prefetcher follows badly, so tiles that read their rows from memory wait
# for line after line. Read first in order, one sequential stream per
# block, the same rows arrive at the memory's rate, and the tiles then find
# them in L1/L2: the pass costs the stream plus the in-cache arithmetic,
# less than the two interleaved.
#
# Only for rows of TOUCH_ROW_BYTES (eight cache lines) or more in float32
# and TOUCH_ROW_BYTES_64 in float64: at 200-400 bytes the gain did not
# hold from run to run, and float64 rows of 64 features (512 bytes) made
# the Hessian products slower, where 72 features and more made them faster
# (BENCHMARKS.md, "Eighteenth session"). Only for X of TOUCH_X_BYTES or
# more: a smaller X stays in the caches between calls, where the extra
# pass costs more than it saves. Float32 rows of TOUCH_SHORT_ROW_BYTES to
# TOUCH_ROW_BYTES (96-127 features) are read ahead from a larger X,
# TOUCH_SHORT_X_BYTES: on 2 cores their gradient then took 0.73-1.02x the
# time at 80-134 MB of X (2-48 classes, four runs) and their Hessian
# products 0.80-1.00x, but 1.09-1.25x at 18-24 MB, where the long rows
# gain (BENCHMARKS.md, "Nineteenth session"). A block read ahead stays
# within TOUCH_BYTES, so that it is still in L2 when the tiles come. Not
# for the GEMM strategy (BLAS packs its blocks itself; reading them ahead
# gained nothing) nor for SGD's batches of random rows (read in order one
# row at a time, fewer lines are in flight than under the tiles' four,
# and the epoch ran slower). A software prefetch (llvm.prefetch) of the
# next rows instead of the reads was slower still, issued in bursts
# between the tiles (BENCHMARKS.md, "Seventeenth session"); spread over
# the tiles' own feature loops it is faster than reading ahead, and on
# AVX-512 hosts the forward tiles of _ahead do that instead (from the
# chunk's first block on: only that block is read here).
TOUCH_ROW_BYTES = 512
TOUCH_ROW_BYTES_64 = 576
TOUCH_X_BYTES = 1 << 24
TOUCH_SHORT_ROW_BYTES = 384
TOUCH_SHORT_X_BYTES = 1 << 26
TOUCH_BYTES = 1 << 18
TOUCH_MAX_ROWS = 64


@njit(inline="always", **JIT)
def reads_ahead(m, n, itemsize):
    """Whether the rows kernels read the rows of an (m, n) X ahead of their tiles.

    Also called from Python (``reads_ahead.py_func``): for a shape whose
    rows are not read ahead, the strategy's lookup avoids a grid cell whose
    rows were (``_calibration.grid_cell``).
    """
    row = n * itemsize
    size = m * row
    if itemsize != 4:
        return row >= TOUCH_ROW_BYTES_64 and size >= TOUCH_X_BYTES
    if row >= TOUCH_ROW_BYTES:
        return size >= TOUCH_X_BYTES
    return row >= TOUCH_SHORT_ROW_BYTES and size >= TOUCH_SHORT_X_BYTES


@njit(inline="always", **JIT)
def _touches(X):
    """Whether the rows kernels read X's rows ahead of their tiles (:func:`_touch`)."""
    return reads_ahead(X.shape[0], X.shape[1], itemsize(X))


@njit(inline="always", **JIT)
def _touch_rows(X):
    """Rows read ahead at a time: up to TOUCH_MAX_ROWS, within TOUCH_BYTES (L2)."""
    return max(4, min(TOUCH_MAX_ROWS, TOUCH_BYTES // (X.shape[1] * itemsize(X))))


@njit(inline="always", **JIT)
def _ahead_share(nxt, lo, hi, stop, ahead):
    """(first, rows): the rows [nxt + lo, nxt + hi) of a chunk ending at ``stop``, to prefetch.

    ``ahead`` zero (X not read ahead): none.
    """
    first = nxt + lo
    return first, (max(0, min(hi - lo, stop - first)) if ahead > 0 else 0)


@njit(inline="always", **JIT)
def _touch(X, i0, i1):
    """Read rows [i0, i1) of X in order and return their sum.

    The caller stores the sum where it outlives the kernel (a scratch
    entry), so that the reads are not optimised away; its value is unused.
    """
    n = X.shape[1]
    t = X.dtype.type(0)
    for i in range(i0, i1):
        x = X[i]
        for f in range(n):
            t += x[f]
    return t
