"""Helpers shared by the kernels: row chunks, a vector exp, row status codes.

Status codes returned by the row-wise kernels (and interpreted by the
launch layer): ``OK``; ``NAN`` a row holds NaN; ``POSINF`` a row holds +inf
(the shift by the row maximum would give inf - inf); ``ALL_NEGINF`` a row
is entirely -inf, so no entry can carry probability.
"""

import numpy as np
from numba import njit

from ._config import JIT

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
# and 2^n built in the exponent bits of a scratch row through an integer
# view. Only arguments x <= 0 occur (everything is shifted by the row
# maximum). Below the normal range the result is flushed to 0, so
# exp(-inf) = 0 exactly; elsewhere it is within 3 ulp of np.exp in float32
# and 2 ulp in float64 (measured over the whole range; the tests compare
# against np.exp). The loops are branch-free so LLVM vectorises them.
_LOG2E = 1.4426950408889634
_LN2_HI32 = 0.693359375
_LN2_LO32 = -2.12194440e-4
_LN2_HI64 = 6.93145751953125e-1
_LN2_LO64 = 1.42860682030941723212e-6
# Smallest arguments whose exp is still a normal number (2^-126, 2^-1022).
_EXP_LO32 = -87.33654
_EXP_LO64 = -708.3964185322641


@njit(inline="always", **JIT)
def _exp_shifted(z, mx, out, scale):
    """out[j] = exp(z[j] - mx) for one row; returns the row sum.

    ``scale`` is a scratch row of the same length and dtype. ``out`` may be
    ``z`` (in place). Arguments below the normal range give exactly 0.
    """
    k = z.shape[0]
    dt = z.dtype.type
    log2e = dt(_LOG2E)
    half = dt(0.5)
    zero = dt(0)
    one = dt(1)
    if z.itemsize == 4:
        lo = dt(_EXP_LO32)
        hi_c = dt(_LN2_HI32)
        lo_c = dt(_LN2_LO32)
        bits = scale.view(np.int32)
        for j in range(k):
            x = z[j] - mx
            keep = x >= lo
            t = max(x, lo)
            nf = np.floor(t * log2e + half)
            r = (t - nf * hi_c) - nf * lo_c
            p = dt(1.9875691500e-4)
            p = p * r + dt(1.3981999507e-3)
            p = p * r + dt(8.3334519073e-3)
            p = p * r + dt(4.1665795894e-2)
            p = p * r + dt(1.6666665459e-1)
            p = p * r + dt(5.0000001201e-1)
            p = p * (r * r) + r + one
            out[j] = p if keep else zero
            bits[j] = (np.int32(nf) + np.int32(127)) << np.int32(23)
    else:
        lo = dt(_EXP_LO64)
        hi_c = dt(_LN2_HI64)
        lo_c = dt(_LN2_LO64)
        bits64 = scale.view(np.int64)
        for j in range(k):
            x = z[j] - mx
            keep = x >= lo
            t = max(x, lo)
            nf = np.floor(t * log2e + half)
            r = (t - nf * hi_c) - nf * lo_c
            p = dt(1.0 / 479001600.0)
            p = p * r + dt(1.0 / 39916800.0)
            p = p * r + dt(1.0 / 3628800.0)
            p = p * r + dt(1.0 / 362880.0)
            p = p * r + dt(1.0 / 40320.0)
            p = p * r + dt(1.0 / 5040.0)
            p = p * r + dt(1.0 / 720.0)
            p = p * r + dt(1.0 / 120.0)
            p = p * r + dt(1.0 / 24.0)
            p = p * r + dt(1.0 / 6.0)
            p = p * r + half
            p = p * (r * r) + r + one
            out[j] = p if keep else zero
            bits64[j] = (np.int64(nf) + np.int64(1023)) << np.int64(52)
    s = zero
    for j in range(k):
        e = out[j] * scale[j]
        out[j] = e
        s += e
    return s


@njit(inline="always", **JIT)
def _row_max(z):
    """Row maximum and a status code; one read of the row."""
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
