"""Fused updates of the Newton solver's conjugate-gradient vectors, and the L2 term of large models.

One conjugate-gradient step updates four vectors of the model's size
(the step d, the residual r, the direction p) and needs two of their norms
and the curvature along p (a dot product with its Hessian product).
On wide models (millions of weights) NumPy's one operation per pass read
and wrote them about twenty times per step, as much time as the Hessian
product itself; these kernels do it in two passes, split over the threads.
Sums are float64 per chunk, added by the caller in chunk order.

Each chunk's loop runs over slices of the vectors from index 0: over
``range(lo, hi)`` LLVM cannot prove the index non-negative, keeps Numba's
wrap-around of negative indices, and vectorises the loads as gathers
(3.4x slower for the dot product, measured on 2.6 million entries).
"""

import numpy as np
from numba import njit, prange

from ._common import _chunk
from ._config import JIT, PJIT


@njit(**PJIT)
def _cg_update(d, r, p, Hu, step, step_r, parts):
    """Add step p to d and take step_r Hu from r; per chunk, parts[c] = (r . r, |r|_1).

    IN/OUT d, r (size,) float64; IN p, Hu (size,); OUT parts (n_chunks, 2).
    """
    size = d.shape[0]
    n_chunks = parts.shape[0]
    for c in prange(n_chunks):
        lo, hi = _chunk(size, n_chunks, c)
        dc, rc, pc, hc = d[lo:hi], r[lo:hi], p[lo:hi], Hu[lo:hi]
        rr = 0.0
        r1 = 0.0
        for i in range(hi - lo):
            dc[i] += step * pc[i]
            v = rc[i] - step_r * hc[i]
            rc[i] = v
            rr += v * v
            r1 += abs(v)
        parts[c, 0] = rr
        parts[c, 1] = r1


@njit(**PJIT)
def _cg_direction(p, r, beta, parts):
    """Make p the next direction r + beta p; per chunk, parts[c, 0] = p . p.

    IN/OUT p (size,) float64; IN r (size,); OUT parts (n_chunks, 2), column 0.
    """
    size = p.shape[0]
    n_chunks = parts.shape[0]
    for c in prange(n_chunks):
        lo, hi = _chunk(size, n_chunks, c)
        pc, rc = p[lo:hi], r[lo:hi]
        pp = 0.0
        for i in range(hi - lo):
            v = rc[i] + beta * pc[i]
            pc[i] = v
            pp += v * v
        parts[c, 0] = pp


@njit(**PJIT)
def _dot_scaled(a, b, s, parts):
    """Per chunk, parts[c, 0] = sum of (s a_i) b_i: the dot of s a with b, without s a.

    IN a, b (size,) float64, s; OUT parts (n_chunks, 2), column 0. The
    scale meets each a_i before b_i does, so a huge a (|a| |b| beyond
    float64's range) with a small s does not overflow.
    """
    size = a.shape[0]
    n_chunks = parts.shape[0]
    for c in prange(n_chunks):
        lo, hi = _chunk(size, n_chunks, c)
        ac, bc = a[lo:hi], b[lo:hi]
        acc = 0.0
        for i in range(hi - lo):
            acc += (s * ac[i]) * bc[i]
        parts[c, 0] = acc


@njit(inline="always", **JIT)
def add_scaled_row(g, w, alpha, n):
    """Add alpha w[:n] to g[:n]; return Σ w[j]² in float64: one row (or slice) of the L2 term.

    g and w 1-D, indexed from 0 (see the module's docstring). The loop of
    :func:`_add_scaled_one`, :func:`_add_scaled` and of the chunks' sum
    that adds the term (``_fused._sum_chunks``).
    """
    acc = 0.0
    for j in range(n):
        v = w[j]
        g[j] += alpha * v
        v64 = np.float64(v)
        acc += v64 * v64
    return acc


@njit(**JIT)
def _add_scaled_one(g, w, alpha):
    """Add alpha w to g; return Σ w² in float64: :func:`_add_scaled` on the calling thread.

    IN/OUT g (r, c), C-contiguous; IN w (r, c) of g's dtype in any memory
    order, alpha of that dtype. For small weights, where a parallel pass
    would wake the workers for a few microseconds of work.
    """
    acc = 0.0
    for i in range(g.shape[0]):
        acc += add_scaled_row(g[i], w[i], alpha, g.shape[1])
    return acc


@njit(**PJIT)
def _add_scaled(g, w, alpha, parts):
    """Add alpha w to g; per chunk, parts[c, 0] = sum of w_i² in float64: the L2 term in one pass.

    IN/OUT g (size,); IN w (size,) of g's dtype, alpha of that dtype; OUT
    parts (n_chunks, 2), column 0. The gradient's L2 term and the
    penalty's sum of squares (``fastsoftmax._penalty.penalize``).
    """
    size = g.shape[0]
    n_chunks = parts.shape[0]
    for c in prange(n_chunks):
        lo, hi = _chunk(size, n_chunks, c)
        parts[c, 0] = add_scaled_row(g[lo:hi], w[lo:hi], alpha, hi - lo)
