"""The edge: the one place that checks and coerces input.

Public functions call these helpers first, before anything is written, so a
rejected call leaves every output buffer and model untouched. Kernels then
run on arrays that are known to be C-contiguous, of one float dtype, finite
where they must be, and of matching shapes.

Dtype policy: float32 stays float32 and float64 stays float64; any other
real numeric input (integers, booleans, float16) becomes float64.
"""

from __future__ import annotations

import numbers
from typing import Any

import numba
import numpy as np

from ._kernels._checks import _first_bad_distribution_row, _first_nonfinite_row
from ._threads import numba_threads

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _n_chunks(m: int) -> int:
    return max(1, min(m, numba.get_num_threads()))


def _first(bad_row: np.ndarray) -> int:
    hits = bad_row[bad_row >= 0]
    return int(hits.min()) if hits.size else -1


def float_dtype_of(a: np.ndarray) -> np.dtype:
    """Return the working dtype for an array: its own if float32/64, else float64."""
    return a.dtype if a.dtype in FLOAT_DTYPES else np.dtype(np.float64)


def as_float_array(
    a: Any, name: str, *, ndim: tuple[int, ...], dtype: np.dtype | None = None
) -> np.ndarray:
    """Convert ``a`` to a C-contiguous float array of one of the given ranks.

    With ``dtype`` None the working dtype follows the policy in the module
    docstring; otherwise the array is cast to ``dtype``. The caller's array
    is never modified: at most it is returned as is, to be read.
    """
    if hasattr(a, "dtypes") and hasattr(a, "to_numpy"):  # pandas objects
        a = a.to_numpy()
    try:
        arr = np.asarray(a)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be array-like of numbers: {exc}") from None
    if arr.dtype.kind not in "biuf":
        raise TypeError(
            f"{name} must hold real numbers, got dtype {arr.dtype}"
            + (" (complex)" if arr.dtype.kind == "c" else "")
        )
    if arr.ndim not in ndim:
        want = " or ".join(f"{d}-D" for d in ndim)
        raise ValueError(f"{name} must be {want}, got an array of shape {arr.shape}")
    target = float_dtype_of(arr) if dtype is None else np.dtype(dtype)
    return np.ascontiguousarray(arr, dtype=target)


def first_nonfinite_row(a: np.ndarray, n_threads: int | None = None) -> int:
    """Index of the first row of ``a`` holding NaN or inf, or -1.

    A compiled parallel scan that reads ``a`` once and allocates one int per
    thread, nothing of ``a``'s size.
    """
    if a.size == 0:
        return -1
    a2 = a.reshape(a.shape[0], -1)
    with numba_threads(n_threads):
        bad_row = np.empty(_n_chunks(a2.shape[0]), dtype=np.int64)
        _first_nonfinite_row(a2, bad_row)
    return _first(bad_row)


def check_finite(a: np.ndarray, name: str) -> None:
    """Raise ValueError naming the first NaN or inf in ``a`` (1-D or 2-D)."""
    i = first_nonfinite_row(a)
    if i < 0:
        return
    a2 = a.reshape(a.shape[0], -1)
    if a.ndim == 1:
        raise ValueError(f"{name} contains {_describe(a[i])} at index {i}; it must be finite")
    j = int(np.flatnonzero(~np.isfinite(a2[i]))[0])
    raise ValueError(
        f"{name} contains {_describe(a2[i, j])} at row {i}, column {j}; it must be finite"
    )


def _describe(v: float) -> str:
    return "NaN" if np.isnan(v) else ("inf" if v > 0 else "-inf")


def check_labels(y: Any, m: int, k: int, name: str = "y") -> np.ndarray:
    """Integer class indices in 0..k-1, one per row; returned as int64."""
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D labels, got shape {arr.shape}")
    if arr.shape[0] != m:
        raise ValueError(f"{name} has {arr.shape[0]} labels but X has {m} rows")
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            i = int(np.flatnonzero(~np.isfinite(arr) | (arr != np.round(arr)))[0])
            raise ValueError(
                f"{name} must hold integer class labels; {name}[{i}] = {arr[i]}"
            )
    elif arr.dtype.kind not in "iu":
        raise TypeError(
            f"{name} must hold integer class labels 0..{k - 1}, got dtype {arr.dtype}"
        )
    labels = np.ascontiguousarray(arr, dtype=np.int64)
    if m:
        outside = (labels < 0) | (labels >= k)
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            raise ValueError(
                f"{name}[{i}] = {labels[i]} is not a class index in 0..{k - 1} "
                f"(W has {k} columns)"
            )
    return labels


def check_targets(Y: Any, m: int, k: int, dtype: np.dtype, name: str = "y") -> np.ndarray:
    """Check Y is an (m, k) matrix whose rows are probability vectors; return it in ``dtype``."""
    arr = as_float_array(Y, name, ndim=(2,), dtype=dtype)
    if arr.shape != (m, k):
        raise ValueError(
            f"{name} as a target matrix must have shape ({m}, {k}) "
            f"(rows of X, columns of W), got {arr.shape}"
        )
    tol = float(np.sqrt(np.finfo(dtype).eps))
    with numba_threads(None):
        bad_row = np.empty(_n_chunks(m), dtype=np.int64)
        _first_bad_distribution_row(arr, tol, bad_row)
    i = _first(bad_row)
    if i >= 0:
        row = arr[i]
        raise ValueError(
            f"{name} row {i} is not a probability vector (entries in [0, 1] "
            f"summing to 1 within {tol:.1e}): min {row.min()}, sum {row.sum(dtype=np.float64)}"
        )
    return arr


def check_sample_weight(sw: Any, m: int, dtype: np.dtype) -> np.ndarray:
    """Non-negative finite weights, one per row, not all zero."""
    arr = as_float_array(sw, "sample_weight", ndim=(1,), dtype=dtype)
    if arr.shape[0] != m:
        raise ValueError(f"sample_weight has {arr.shape[0]} entries but X has {m} rows")
    check_finite(arr, "sample_weight")
    if m and arr.min() < 0:
        i = int(np.argmin(arr))
        raise ValueError(f"sample_weight[{i}] = {arr[i]} is negative")
    if m and not arr.sum(dtype=np.float64) > 0:
        raise ValueError("sample_weight sums to zero: at least one row must have weight")
    return arr


def check_alpha(alpha: Any) -> float:
    """Check the L2 strength is a finite number >= 0; return it as a float."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number, got {type(alpha).__name__}")
    value = float(alpha)
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    return value
