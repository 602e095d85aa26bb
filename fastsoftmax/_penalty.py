"""The L2 penalty α/2 ‖coef‖²: the one definition every objective uses.

The Dask objective and the dense engine's split pass add it with these
functions after their pass over X; the dense engine's other kernels add
the same term in the pass that sums the threads' partial gradients
(``_kernels._fused._sum_chunks``, through the row loop these functions'
compiled passes share, ``_kernels._vector.add_scaled_row``), and the
sparse kernels inside their column pass
(:func:`fastsoftmax._sparse.loss_and_grad`), summing ‖W‖² in float64 as
:func:`l2_penalty` does, and are tested against it.
"""

from __future__ import annotations

import numpy as np


def l2_penalty(coef: np.ndarray, alpha: float) -> float:
    """α/2 ‖coef‖², summed in float64.

    Overflow to inf is returned as inf, not warned about: callers treat a
    non-finite objective as divergence.
    """
    if not alpha:
        return 0.0
    # Memory order, and no copy of float64 data: only a float32 coef is
    # widened (the sum of squares of many float32 numbers needs float64).
    # einsum's own loop, not BLAS's dot: callers that run no BLAS kernel
    # do not hold BLAS at one thread (_threads.thread_policy), and a BLAS
    # dot of 10,000 entries or more may wake its threads. einsum's loop
    # sets no floating-point error, so no np.errstate is needed around it
    # (a context of Python calls: after an idle pause tens of microseconds
    # of a small call; the test of an overflow checks that none warns).
    w64 = coef.ravel(order="K").astype(np.float64, copy=False)
    return 0.5 * alpha * float(np.einsum("i,i->", w64, w64))


# From this many weights the L2 term goes through one compiled pass
# (``_kernels._vector._add_scaled``: the gradient's term and the sum of
# squares together, split over the threads). NumPy's three passes and the
# temporary alpha * coef took 3.9 ms of a 50 ms loss_and_grad at 3000 x 1000
# float32 weights (BENCHMARKS.md, "Twenty-fifth session"). Below this size
# one thread's loop does both (``_add_scaled_one``): a parallel pass would
# wake the workers for microseconds of work.
_KERNEL_FROM = 1 << 16


def _flat_pair(grad_coef: np.ndarray, coef: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Both arrays as 1-D views in one memory order (entry i of each the same weight), or None."""
    if grad_coef.dtype != coef.dtype:
        return None
    if grad_coef.flags.c_contiguous and coef.flags.c_contiguous:
        return grad_coef.reshape(-1), coef.reshape(-1)
    if grad_coef.flags.f_contiguous and coef.flags.f_contiguous:
        return grad_coef.T.reshape(-1), coef.T.reshape(-1)
    return None


def add_l2(grad_coef: np.ndarray, coef: np.ndarray, alpha: float) -> float | None:
    """grad_coef += alpha coef, in place; return Σ coef² (float64) where that came free, else None.

    From :data:`_KERNEL_FROM` entries, with both arrays in one memory order,
    one compiled parallel pass does both; below, a compiled loop on the
    calling thread where grad_coef is 2-D and contiguous and coef of its
    dtype (the engines' gradients); otherwise NumPy adds and nothing is
    summed.
    """
    if grad_coef.size < _KERNEL_FROM:
        # One compiled call in place of NumPy's temporary, two ufuncs and
        # the sum of squares: after an idle pause those took 60-100
        # microseconds of a small call (BENCHMARKS.md, "Forty-ninth session").
        if grad_coef.ndim == 2 and grad_coef.dtype == coef.dtype:
            g, w = grad_coef, coef
            if not g.flags.c_contiguous and g.flags.f_contiguous:
                g, w = g.T, w.T
            if g.flags.c_contiguous:
                from ._kernels._vector import _add_scaled_one

                return float(_add_scaled_one(g, w, g.dtype.type(alpha)))
        grad_coef += grad_coef.dtype.type(alpha) * coef
        return None
    pair = _flat_pair(grad_coef, coef)
    if pair is None:
        grad_coef += grad_coef.dtype.type(alpha) * coef
        return None
    from ._kernels._vector import _add_scaled
    from ._launch import n_chunks

    g, w = pair
    parts = np.empty((n_chunks(g.shape[0]), 2))
    _add_scaled(g, w, g.dtype.type(alpha), parts)
    return float(parts[:, 0].sum())


def penalize(loss: float, grad_coef: np.ndarray, coef: np.ndarray,
             alpha: float) -> float:
    """Add the L2 term to a data loss and, in place, to its coef gradient."""
    if not alpha:
        return loss
    squares = add_l2(grad_coef, coef, alpha)
    if squares is None:
        return loss + l2_penalty(coef, alpha)
    return loss + 0.5 * alpha * squares  # Python floats: an overflow is inf
