"""Register-blocked micro-kernels: logits and gradient accumulation.

The forward product z = x . Wt[j] + b[j] and the backward accumulation
G[j] += e[j] * x for blocks of 4 rows (given by index, so that the full
gradient's consecutive rows and the SGD epoch's shuffled rows share the
code) and for single rows. Weights are stored transposed, (k, n), so that
the feature loops run along contiguous memory and vectorise. The 4 x 3,
4 x 2 and 4 x 1 blocks repeat one pattern by design: each is a register
tile that LLVM keeps in vector registers.
"""

from numba import njit

from ._config import JIT, WIDE_REGISTERS, itemsize

# The forward product's 4 x 5 block (20 accumulators, 4 x-vectors and a
# w-vector: 25 vector registers) needs AVX-512's 32 registers; with 16 it
# spills, and the 4 x 3 block stays the widest. A constant folded in at
# compile time: the kernels of one host are compiled, and cached, for its
# features.
_TILE5 = WIDE_REGISTERS
# The same holds for eight-row blocks (8 x 2 tiles: 26 vector registers),
# which the forward tiles of _ahead compute on those hosts.
_TILE8 = WIDE_REGISTERS
# Where the rows kernels take their logits eight rows at a time (float32,
# _TILE8): n in EIGHT_ROWS_N, k up to EIGHT_ROWS_MAX_K. Whole gradient
# passes on two threads against the four-row blocks (BENCHMARKS.md,
# "Fourteenth session"): 0.71-0.95x at n = 64 ... 256 with k = 3 ... 20,
# 0.98-1.01x at k = 2 and 5 (n = 128); 0.98x at n = 384, 1.03-1.05x at
# n = 784 and 3000, 1.10-1.12x at n = 20 and 32, 1.03-1.04x at k = 32
# and 48.
EIGHT_ROWS_N = (48, 256)
EIGHT_ROWS_MAX_K = 24


@njit(inline="always", **JIT)
def _eight_rows(X, k):
    """Whether the rows kernels take X's logits eight rows at a time.

    Float32 on AVX-512 hosts (compile-time constants: other kernels compile
    without the eight-row path), n in EIGHT_ROWS_N and k up to
    EIGHT_ROWS_MAX_K. The eight-row blocks are the 8 x 2 and 8 x 1 tiles of
    ``_ahead`` (which run wherever this holds): per step of the feature
    loop the weights are loaded once for 16 FMAs, where a 4 x 3 block loads
    them for 12. The backward stays at 4 rows: an 8 x 1 accumulation ran
    1.06-1.23x slower at n = 784 and 3000 (BENCHMARKS.md, "Fourteenth
    session").
    """
    n = X.shape[1]
    return (_TILE8 and itemsize(X) == 4 and EIGHT_ROWS_N[0] <= n <= EIGHT_ROWS_N[1]
            and k <= EIGHT_ROWS_MAX_K)


@njit(inline="always", **JIT)
def _logits4(X, i0, i1, i2, i3, Wt, b, z4):
    """z4[q, j] = X[iq] . Wt[j] + b[j] for the four rows i0..i3.

    IN: X (m, n), row indices i0..i3, Wt (k, n' >= n: only the first n
    entries of a row are read), b (k,). OUT: z4 (4, k).
    """
    _logits4_cols(X, i0, i1, i2, i3, Wt, b, z4, 0, X.shape[1])


@njit(inline="always", **JIT)
def _logits4_cols(X, i0, i1, i2, i3, Wt, b, z4, f0, f1):
    """z4[q, j] = X[iq, f0:f1] . Wt[j, f0:f1] + b[j] for the four rows i0..i3.

    IN: X (m, n), row indices i0..i3, Wt (k, n' >= f1), b (k,), the
    features [f0, f1). OUT: z4 (4, k). (:func:`_logits4` is the whole row;
    the SGD epoch's feature-split batches take a share of the features
    per thread.)

    The rows are given by index, so that the full gradient (consecutive
    rows) and the SGD epoch (rows in shuffled order) share this code.

    Register blocking 4 rows x 3 classes: each step of the feature loop loads
    4 x-vectors and 3 w-vectors for 12 FMAs (the 4 x 1 blocking needed 5
    loads per 4 FMAs and was load-bound), and the 12 independent
    accumulators cover the FMA latency (4 cycles on 2 ports). LLVM
    vectorises the feature loop (reassoc) with one vector per accumulator;
    4 x 3 is the largest block that keeps the spills to a handful with
    AVX2's 16 vector registers (it beat 4 x 1, 4 x 2 and 3 x 4 side by
    side). Leftover classes (k mod 3) take a 4 x 2 or 4 x 1 block.

    In float64 on an AVX-512 host (:data:`_TILE5`) blocks of 4 x 5 come
    first: 9 loads for 20 FMAs. Side by side on Zen 4 (both versions in one
    process, interleaved) they made the logits-and-accumulate sweep 5-8 %
    faster for n = 784 (k = 10 and 48) and left n <= 300 unchanged
    (BENCHMARKS.md, "Sixth session"); in float32 they gained nothing and
    lost up to 4 % at k = 12 and 48, so float32 keeps the 4 x 3 blocks.
    The backward sweep (:func:`_accumulate4`) has no 4 x 5 block: with five
    rows of G loaded and stored per step it ran 1.7x slower at k = 10 (Zen
    4). The rows kernels' gradient takes both sweeps from the tiles written
    in LLVM IR instead (:mod:`._ahead`, :mod:`._backward`; 4 x 5 on
    AVX-512 hosts, 4 x 3 elsewhere), and so do the Hessian products on
    AVX-512 hosts (``_ahead.HESSP_MICRO``).
    """
    k = Wt.shape[0]
    nf = f1 - f0
    zero = X.dtype.type(0)
    x0 = X[i0, f0:f1]
    x1 = X[i1, f0:f1]
    x2 = X[i2, f0:f1]
    x3 = X[i3, f0:f1]
    j = 0
    # A remainder of 6 classes goes as 3 + 3, not 5 + a load-bound 4 x 1.
    # (itemsize(X) is a compile-time constant: LLVM drops this loop from float32.)
    while _TILE5 and itemsize(X) == 8 and k - j >= 5 and k - j != 6:
        w0 = Wt[j, f0:f1]
        w1 = Wt[j + 1, f0:f1]
        w2 = Wt[j + 2, f0:f1]
        w3 = Wt[j + 3, f0:f1]
        w4 = Wt[j + 4, f0:f1]
        a00 = zero
        a01 = zero
        a02 = zero
        a03 = zero
        a04 = zero
        a10 = zero
        a11 = zero
        a12 = zero
        a13 = zero
        a14 = zero
        a20 = zero
        a21 = zero
        a22 = zero
        a23 = zero
        a24 = zero
        a30 = zero
        a31 = zero
        a32 = zero
        a33 = zero
        a34 = zero
        for f in range(nf):
            c0 = x0[f]
            c1 = x1[f]
            c2 = x2[f]
            c3 = x3[f]
            u0 = w0[f]
            u1 = w1[f]
            u2 = w2[f]
            u3 = w3[f]
            u4 = w4[f]
            a00 += c0 * u0
            a01 += c0 * u1
            a02 += c0 * u2
            a03 += c0 * u3
            a04 += c0 * u4
            a10 += c1 * u0
            a11 += c1 * u1
            a12 += c1 * u2
            a13 += c1 * u3
            a14 += c1 * u4
            a20 += c2 * u0
            a21 += c2 * u1
            a22 += c2 * u2
            a23 += c2 * u3
            a24 += c2 * u4
            a30 += c3 * u0
            a31 += c3 * u1
            a32 += c3 * u2
            a33 += c3 * u3
            a34 += c3 * u4
        b0 = b[j + 0]
        b1 = b[j + 1]
        b2 = b[j + 2]
        b3 = b[j + 3]
        b4 = b[j + 4]
        z4[0, j] = a00 + b0
        z4[0, j + 1] = a01 + b1
        z4[0, j + 2] = a02 + b2
        z4[0, j + 3] = a03 + b3
        z4[0, j + 4] = a04 + b4
        z4[1, j] = a10 + b0
        z4[1, j + 1] = a11 + b1
        z4[1, j + 2] = a12 + b2
        z4[1, j + 3] = a13 + b3
        z4[1, j + 4] = a14 + b4
        z4[2, j] = a20 + b0
        z4[2, j + 1] = a21 + b1
        z4[2, j + 2] = a22 + b2
        z4[2, j + 3] = a23 + b3
        z4[2, j + 4] = a24 + b4
        z4[3, j] = a30 + b0
        z4[3, j + 1] = a31 + b1
        z4[3, j + 2] = a32 + b2
        z4[3, j + 3] = a33 + b3
        z4[3, j + 4] = a34 + b4
        j += 5
    # k = 3q + 1 ends in two 4 x 2 blocks rather than a load-bound 4 x 1.
    while j + 3 <= k and k - j != 4:
        w0 = Wt[j, f0:f1]
        w1 = Wt[j + 1, f0:f1]
        w2 = Wt[j + 2, f0:f1]
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
        for f in range(nf):
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
        w0 = Wt[j, f0:f1]
        w1 = Wt[j + 1, f0:f1]
        a00 = zero
        a01 = zero
        a10 = zero
        a11 = zero
        a20 = zero
        a21 = zero
        a30 = zero
        a31 = zero
        for f in range(nf):
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
        w0 = Wt[j, f0:f1]
        a00 = zero
        a10 = zero
        a20 = zero
        a30 = zero
        for f in range(nf):
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

    IN: X (m, n), row indices i0..i3, z4 (4, k) error rows. IN/OUT: G (k, n).
    """
    _accumulate4_cols(X, i0, i1, i2, i3, z4, G, 0, X.shape[1])


@njit(inline="always", **JIT)
def _accumulate4_cols(X, i0, i1, i2, i3, z4, G, f0, f1):
    """G[j, f0:f1] += sum_q z4[q, j] * X[iq, f0:f1] for the four rows i0..i3.

    IN: X (m, n), row indices i0..i3, z4 (4, k) error rows, the features
    [f0, f1). IN/OUT: G (k, n' >= f1).

    The same 4 rows x 3 classes blocking as :func:`_logits4`: per step of
    the feature loop, 4 x-loads (from L1: the block was just read by the
    forward sweep), 3 loads and 3 stores of G for 12 FMAs. G is this chunk's
    partial Eᵀ X; in float32 it accumulates up to m / n_chunks rows in
    float32 -- precision traded for keeping G (k x n) small enough for L1/L2;
    the tests bound the resulting error against the float64-exact reference.
    """
    k = G.shape[0]
    nf = f1 - f0
    x0 = X[i0, f0:f1]
    x1 = X[i1, f0:f1]
    x2 = X[i2, f0:f1]
    x3 = X[i3, f0:f1]
    j = 0
    while j + 3 <= k and k - j != 4:
        g0 = G[j, f0:f1]
        g1 = G[j + 1, f0:f1]
        g2 = G[j + 2, f0:f1]
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
        for f in range(nf):
            c0 = x0[f]
            c1 = x1[f]
            c2 = x2[f]
            c3 = x3[f]
            g0[f] += e00 * c0 + e10 * c1 + e20 * c2 + e30 * c3
            g1[f] += e01 * c0 + e11 * c1 + e21 * c2 + e31 * c3
            g2[f] += e02 * c0 + e12 * c1 + e22 * c2 + e32 * c3
        j += 3
    while k - j >= 2:
        g0 = G[j, f0:f1]
        g1 = G[j + 1, f0:f1]
        e00 = z4[0, j]
        e10 = z4[1, j]
        e20 = z4[2, j]
        e30 = z4[3, j]
        e01 = z4[0, j + 1]
        e11 = z4[1, j + 1]
        e21 = z4[2, j + 1]
        e31 = z4[3, j + 1]
        for f in range(nf):
            c0 = x0[f]
            c1 = x1[f]
            c2 = x2[f]
            c3 = x3[f]
            g0[f] += e00 * c0 + e10 * c1 + e20 * c2 + e30 * c3
            g1[f] += e01 * c0 + e11 * c1 + e21 * c2 + e31 * c3
        j += 2
    while j < k:
        g0 = G[j, f0:f1]
        e00 = z4[0, j]
        e10 = z4[1, j]
        e20 = z4[2, j]
        e30 = z4[3, j]
        for f in range(nf):
            g0[f] += e00 * x0[f] + e10 * x1[f] + e20 * x2[f] + e30 * x3[f]
        j += 1


@njit(inline="always", **JIT)
def _logits1(x, Wt, b, z):
    """z[j] = x . Wt[j] + b[j] for one row x (the leftover rows, SGD with B = 1).

    IN: x (n,), Wt (k, n), b (k,). OUT: z (k,).

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
    """G[j] += e[j] * x for one row x. IN: x (n,), e (k,). IN/OUT: G (k, n)."""
    n = x.shape[0]
    k = G.shape[0]
    for j in range(k):
        g = G[j]
        ej = e[j]
        for f in range(n):
            g[f] += ej * x[f]
