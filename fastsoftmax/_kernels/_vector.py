"""Fused updates of the Newton solver's conjugate-gradient vectors.

One conjugate-gradient step updates four vectors of the model's size
(the step d, the residual r, the direction p) and needs two of their norms.
On wide models (millions of weights) NumPy's one operation per pass read
and wrote them about twenty times per step, as much time as the Hessian
product itself; these kernels do it in two passes, split over the threads.
Sums are float64 per chunk, added by the caller in chunk order.
"""

from numba import njit, prange

from ._common import _chunk
from ._config import PJIT


@njit(**PJIT)
def _cg_update(d, r, p, Hu, step, step_r, parts):
    """Add step p to d and take step_r Hu from r; per chunk, parts[c] = (r . r, |r|_1).

    IN/OUT d, r (size,) float64; IN p, Hu (size,); OUT parts (n_chunks, 2).
    """
    size = d.shape[0]
    n_chunks = parts.shape[0]
    for c in prange(n_chunks):
        lo, hi = _chunk(size, n_chunks, c)
        rr = 0.0
        r1 = 0.0
        for i in range(lo, hi):
            d[i] += step * p[i]
            v = r[i] - step_r * Hu[i]
            r[i] = v
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
        pp = 0.0
        for i in range(lo, hi):
            v = r[i] + beta * p[i]
            p[i] = v
            pp += v * v
        parts[c, 0] = pp
