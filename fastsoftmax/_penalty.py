"""The L2 penalty α/2 ‖coef‖²: the one definition every objective uses.

The dense engine and the Dask objective add it with these functions after
their pass over X; the sparse kernels add the same term inside their
column pass (:func:`fastsoftmax._sparse.loss_and_grad`), summing ‖W‖² in
float64 as :func:`l2_penalty` does, and are tested against it.
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
    w64 = coef.ravel(order="K").astype(np.float64, copy=False)
    with np.errstate(over="ignore", invalid="ignore"):
        return 0.5 * alpha * float(np.dot(w64, w64))


def penalize(loss: float, grad_coef: np.ndarray, coef: np.ndarray,
             alpha: float) -> float:
    """Add the L2 term to a data loss and, in place, to its coef gradient."""
    if alpha:
        grad_coef += grad_coef.dtype.type(alpha) * coef
    return loss + l2_penalty(coef, alpha)
