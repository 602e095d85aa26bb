"""Public functions: the softmax family, the fused loss and gradient, Hessian products."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._data import loss_data
from ._kernels import _common as C
from ._kernels import _rowwise as K
from ._launch import launch_work, n_chunks, rowwise_kernel, status_arrays
from ._objective import call_objective
from ._sparse import as_csr
from ._threads import check_n_threads, kernel_call, thread_policy
from ._validation import (
    as_float_array,
    check_alpha,
    check_finite,
    check_weights,
    is_dask_collection,
    is_sparse,
)

__all__ = ["softmax", "log_softmax", "logsumexp", "loss_and_grad", "hessp"]

_STATUS_TEXT = {
    C.NAN: "contains NaN",
    C.POSINF: "contains +inf (softmax is undefined there)",
    C.ALL_NEGINF: "is entirely -inf, so it has no softmax",
}


def _raise_for(bad_row: np.ndarray, bad_code: np.ndarray, name: str) -> None:
    hits = np.flatnonzero(bad_row >= 0)
    if hits.size:
        c = hits[np.argmin(bad_row[hits])]
        raise ValueError(f"{name} row {int(bad_row[c])} {_STATUS_TEXT[int(bad_code[c])]}")


def _check_out(out: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(
            f"out must have shape {shape} and dtype {dtype}, "
            f"got shape {out.shape} and dtype {out.dtype}"
        )
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writeable C-contiguous array")
    return out


def _rowwise(mode, Z, out, n_threads, name):
    n_threads = check_n_threads(n_threads)
    Z = as_float_array(Z, name, ndim=(1, 2))
    shape = Z.shape
    Z2 = Z.reshape(1, -1) if Z.ndim == 1 else Z
    if Z2.shape[1] == 0:
        raise ValueError(f"{name} has rows of length 0: an empty row has no softmax")
    if out is not None:
        out = _check_out(out, shape, Z.dtype)
        if np.shares_memory(out, Z) and out is not Z:
            raise ValueError("out overlaps Z only partially; pass out=Z or a separate array")
    m = Z2.shape[0]
    # A small call runs on the calling thread (_launch.serial_call).
    with kernel_call(n_threads, launch_work(m, 0, Z2.shape[1]), blas=False):
        bad_row, bad_code = status_arrays(n_chunks(m))
        if out is None:
            # Our own buffer: compute and check in one pass; on a bad row the
            # partly written buffer is simply dropped.
            result = np.empty_like(Z2)
        else:
            # The caller's buffer: scan first, so a rejected call leaves it
            # untouched.
            K._check_logits(Z2, False, bad_row, bad_code)
            _raise_for(bad_row, bad_code, name)
            result = out.reshape(Z2.shape)
        if m:
            rowwise_kernel(Z2.shape[1])(Z2, mode, result, bad_row, bad_code)
            _raise_for(bad_row, bad_code, name)
    return result.reshape(shape) if out is None else out


def softmax(Z: Any, *, out: np.ndarray | None = None, n_threads: int | None = None) -> np.ndarray:
    """Row-wise softmax, computed stably.

    ``softmax(z)_j = exp(z_j - max z) / sum_i exp(z_i - max z)``.

    Parameters
    ----------
    Z : array_like of shape (m, k) or (k,)
        Logits, one row per sample; a 1-D array is one row. float32 stays
        float32, float64 stays float64, anything else becomes float64.
        Entries may be -inf (probability exactly 0).
    out : ndarray, optional
        C-contiguous array of Z's shape and working dtype to write into;
        ``out=Z`` works in place. Left untouched if the call is rejected.
    n_threads : int, optional
        Numba threads for this call only; None uses the current setting.

    Returns
    -------
    P : ndarray
        Probabilities in [0, 1], each row summing to 1.

    Raises
    ------
    ValueError
        If a row holds NaN or +inf, is entirely -inf, or has length 0.
    """
    return _rowwise(K.SOFTMAX, Z, out, n_threads, "Z")


def log_softmax(Z: Any, *, out: np.ndarray | None = None,
                n_threads: int | None = None) -> np.ndarray:
    """Row-wise log of the softmax, ``z_j - logsumexp(z)``.

    Computed without going through log(softmax(z)), so it stays finite and
    accurate where the probability underflows. Parameters, errors and dtype
    rules are those of :func:`softmax`; -inf entries give -inf.
    """
    return _rowwise(K.LOG_SOFTMAX, Z, out, n_threads, "Z")


def logsumexp(Z: Any, *, n_threads: int | None = None) -> np.ndarray | np.floating:
    """Row-wise ``log(sum_j exp(z_j))`` without overflow.

    Parameters
    ----------
    Z : array_like of shape (m, k) or (k,)
        Logits; -inf entries allowed, and an all -inf row gives -inf.
    n_threads : int, optional
        Numba threads for this call only.

    Returns
    -------
    ndarray of shape (m,), or a scalar for 1-D input, in Z's working dtype.

    Raises
    ------
    ValueError
        If a row holds NaN or +inf, or has length 0.
    """
    n_threads = check_n_threads(n_threads)
    Z = as_float_array(Z, "Z", ndim=(1, 2))
    Z2 = Z.reshape(1, -1) if Z.ndim == 1 else Z
    if Z2.shape[1] == 0:
        raise ValueError("Z has rows of length 0: logsumexp of an empty row is -inf by "
                         "convention but almost always a mistake here")
    m = Z2.shape[0]
    out = np.empty(m, dtype=Z.dtype)
    if m:
        with kernel_call(n_threads, launch_work(m, 0, Z2.shape[1]), blas=False):
            bad_row, bad_code = status_arrays(n_chunks(m))
            rowwise_kernel(Z2.shape[1])(Z2, K.LOGSUMEXP, out.reshape(m, 1), bad_row, bad_code)
        bad_row[bad_code == C.ALL_NEGINF] = -1
        _raise_for(bad_row, bad_code, "Z")
    return out[0] if Z.ndim == 1 else out


def _objective_X(X: Any) -> Any:
    """X for the objective's functions: a float array, or a CSR for scipy.sparse input."""
    if type(X) is not np.ndarray and is_sparse(X):  # an ndarray is not: no lookups
        return as_csr(X)
    return as_float_array(X, "X", ndim=(2,))


def loss_and_grad(
    X: Any,
    y: Any,
    W: Any,
    b: Any = None,
    *,
    alpha: float = 0.0,
    sample_weight: Any = None,
    n_threads: int | None = None,
) -> tuple[float, np.ndarray, np.ndarray | None]:
    """Softmax cross-entropy loss and its gradients, in one fused pass.

    ``J(W, b) = sum_i s_i [logsumexp(z_i) - <Y_i, z_i>] / sum_i s_i
    + alpha/2 ||W||²`` with ``z_i = x_i W + b``; the intercept is not
    penalised. The kernel reads X once and never allocates an (m, k) array.

    Parameters
    ----------
    X : array_like or scipy.sparse matrix/array of shape (m, n)
        Data, finite. float32 stays float32 (the whole computation runs in
        it); float64 stays float64; other numbers become float64. Sparse X
        runs the sparse kernels (CSR as it is; CSC, COO and the other
        formats converted to CSR once) and is never densified.
    y : array_like of shape (m,) or (m, k)
        Integer class labels in 0..k-1, or a matrix whose rows are class
        probabilities (one-hot or soft labels; each row sums to 1).
    W : array_like of shape (n, k)
        Weights, cast to X's working dtype.
    b : array_like of shape (k,), optional
        Intercept. None means no intercept, and grad_b is None.
    alpha : float, default 0
        L2 penalty strength on W.
    sample_weight : array_like of shape (m,), optional
        Non-negative row weights; the mean becomes a weighted mean.
    n_threads : int, optional
        Numba threads for this call only; None uses the current setting.

    Returns
    -------
    loss : float
    grad_W : ndarray of shape (n, k)
    grad_b : ndarray of shape (k,) or None

    Raises
    ------
    ValueError
        On mismatched shapes, labels outside 0..k-1, non-finite X, W or b,
        target rows that are not probabilities, negative sample weights, or
        logits that overflow.
    """
    n_threads = check_n_threads(n_threads)
    alpha = check_alpha(alpha)
    if is_dask_collection(X):
        from . import _dask  # the Dask layer (and the solvers it drives) on demand

        return _dask.loss_and_grad(X, y, W, b, alpha=alpha, sample_weight=sample_weight,
                                   n_threads=n_threads)
    X_arr = _objective_X(X)
    dense = isinstance(X_arr, np.ndarray)
    W_arr, b_arr = check_weights(W, b, X_arr.shape[1], X_arr.dtype, finite=not dense)
    # Dense X is not scanned for NaN/inf before the kernel runs (that scan
    # would be a second full read of X): a NaN or inf anywhere in a row of X
    # makes some logit of that row non-finite (x * w is NaN or inf for every
    # w, x * 0 included), and the fused kernel tests every logit. So does
    # one in W or b, which every row's logits meet (w * 0 is NaN too): the
    # scan of W, a pass over n k entries, waits for the kernel's verdict as
    # well (1 ms of a 40 ms call at 3000 x 1000 weights, BENCHMARKS.md,
    # "Twenty-fifth session"). A sparse row meets only the rows of W of its
    # stored features, so W is scanned first there. Only when the kernel
    # reports a bad row are W, b and X scanned, to name the exact entry; if
    # they are finite the logits overflowed and that error stands. Nothing
    # the caller can see is written before the error.
    data = loss_data(X_arr, y, W_arr.shape[1], sample_weight)
    try:
        # BLAS is held at one thread only where the kernels call it (the
        # GEMM strategy): the rows and sparse kernels skip that cost.
        with (thread_policy(n_threads, blas=False), call_objective(data) as objective,
              objective.blas_hold()):
            # W.T: coef layout (k, n) as a view; the GEMM strategy takes W as is.
            loss, g_coef, g_b = objective.loss_grad(W_arr.T, b_arr, alpha)
    except ValueError as exc:
        overflow = exc
    else:
        return loss, np.ascontiguousarray(g_coef.T), g_b
    if dense:  # sparse values were checked by as_csr, and W by check_weights
        check_finite(W_arr, "W")
        if b_arr is not None:
            check_finite(b_arr, "b")
        check_finite(X_arr, "X")
    raise overflow


def hessp(
    X: Any,
    y: Any,
    W: Any,
    b: Any,
    V: Any,
    c: Any = None,
    *,
    alpha: float = 0.0,
    sample_weight: Any = None,
    n_threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Hessian-vector product of :func:`loss_and_grad`'s objective, in one fused pass.

    The Hessian of ``J`` at (W, b) applied to a direction (V, c): for each
    row, ``u_i = x_i V + c`` and ``s_i = w_i / Σw (p_i ⊙ u_i - p_i <p_i, u_i>)``
    with ``p_i = softmax(x_i W + b)``; then ``H (V, c) = (Xᵀ S + alpha V,
    Σ_i s_i)``. The name is scipy.optimize's for this callable (``hessp``).
    Dense X is read once: the probabilities are recomputed in the same
    sweep as ``X V``, and no (m, k) array is allocated. Sparse X is read
    twice, and the probabilities (m, k) are held for the call: a gradient
    pass computes them first (the sparse kernels' product needs them
    stored). Newton's method (``SoftmaxRegression(solver="newton")``) keeps
    the probabilities between products instead.

    Parameters
    ----------
    X, y, W, b, alpha, sample_weight, n_threads
        As in :func:`loss_and_grad`; ``y`` is checked the same way, although
        the Hessian does not depend on the targets.
    V : array_like of shape (n, k)
        The direction's weight part, in W's layout.
    c : array_like of shape (k,), optional
        The direction's intercept part; None means 0. Must be None when ``b``
        is None (no intercept).

    Returns
    -------
    HV : ndarray of shape (n, k)
    Hc : ndarray of shape (k,) or None
        None when ``b`` is None.

    Raises
    ------
    ValueError
        On everything :func:`loss_and_grad` rejects, on a V or c of the
        wrong shape or not finite, and on an intercept direction without an
        intercept.
    """
    n_threads = check_n_threads(n_threads)
    alpha = check_alpha(alpha)
    X_arr = _objective_X(X)
    W_arr, b_arr = check_weights(W, b, X_arr.shape[1], X_arr.dtype)
    V_arr, c_arr = check_weights(V, c, X_arr.shape[1], X_arr.dtype, names=("V", "c"))
    if V_arr.shape != W_arr.shape:
        raise ValueError(f"V must have W's shape {W_arr.shape}, got {V_arr.shape}")
    if c_arr is not None and b_arr is None:
        raise ValueError("c (an intercept direction) was given but b is None (no intercept)")
    data = loss_data(X_arr, y, W_arr.shape[1], sample_weight)
    try:
        with (thread_policy(n_threads, blas=False),  # as in loss_and_grad
              call_objective(data) as objective, objective.blas_hold()):
            HV, Hc = objective.hessp(W_arr.T, b_arr, V_arr.T, c_arr, alpha)
    except ValueError as exc:  # as in loss_and_grad: name a NaN or inf of X first
        overflow = exc
    else:
        return np.ascontiguousarray(HV.T), Hc
    if isinstance(X_arr, np.ndarray):  # sparse values were checked by as_csr
        check_finite(X_arr, "X")
    raise overflow
