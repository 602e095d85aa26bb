"""The edge: the one place that checks and coerces input.

Public functions and the estimator call these helpers first, before
anything is written, so a rejected call leaves every output buffer and
model untouched. Kernels then run on arrays that are known to be
C-contiguous, of one float dtype, finite where they must be, and of
matching shapes. The Dask layer runs the same checks on every row block,
with ``offset`` set to the block's first row so that errors name the row
of the whole data set.

Dtype policy: float32 stays float32 and float64 stays float64; any other
real numeric input (integers, booleans, float16) becomes float64.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any

import numpy as np

from ._launch import first_bad, n_chunks
from ._threads import kernel_call

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def float_dtype_of(a: Any) -> np.dtype:
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
    if (type(a) is np.ndarray and a.ndim in ndim
            and (a.dtype in FLOAT_DTYPES if dtype is None else a.dtype == dtype)
            and _contiguous_writable(a.flags)):
        # What the kernels read already, as the steps below would return it:
        # one test, where those steps run several Python calls (after an
        # idle pause tens of microseconds of a small call).
        return a
    if hasattr(a, "dtypes") and hasattr(a, "to_numpy"):  # pandas objects
        a = a.to_numpy()
    if hasattr(a, "tocsr") and hasattr(a, "nnz"):
        raise TypeError(f"{name} must be a dense array here, got a scipy.sparse "
                        f"{type(a).__name__}")
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
    return kernel_view(np.ascontiguousarray(arr, dtype=target))


def _contiguous_writable(flags) -> bool:
    """C-contiguous and writable, from one ``ndarray.flags`` (each access makes a new object)."""
    return flags.c_contiguous and flags.writeable


# Below this many entries NumPy's test (a boolean array of ``a``'s size)
# takes the compiled scan's place: a process's first small fit or
# prediction waits neither for the scan's compile (on an empty cache) nor
# for its cache load, and below about half this size NumPy's test is the
# faster one anyway (BENCHMARKS.md, "Thirty-eighth session").
SCAN_FROM = 1 << 16


def first_nonfinite_row(a: np.ndarray, n_threads: int | None = None) -> int:
    """Index of the first row of ``a`` holding NaN or inf, or -1.

    From :data:`SCAN_FROM` entries, a compiled parallel scan that reads
    ``a`` once and allocates one int per thread, nothing of ``a``'s size.
    """
    if a.size == 0:
        return -1
    a2 = a.reshape(a.shape[0], -1)
    if a.size < SCAN_FROM:
        finite = np.isfinite(a2).all(axis=1)
        return -1 if finite.all() else int(np.argmin(finite))
    from ._kernels._checks import _first_nonfinite_row  # Numba on first use

    # A scan of a few million entries runs on the calling thread, as a
    # small kernel call does (_launch.serial_call): after an idle spell a
    # parallel scan waits for the workers to wake (BENCHMARKS.md,
    # "Forty-fifth session"). An entry counts as a multiply-add.
    with kernel_call(n_threads, a.size, blas=False, ends_call=False):
        bad_row = np.empty(n_chunks(a2.shape[0]), dtype=np.int64)
        _first_nonfinite_row(a2, bad_row)
    return first_bad(bad_row)


def check_finite(a: np.ndarray, name: str, *, offset: int = 0) -> None:
    """Raise ValueError naming the first NaN or inf in ``a`` (1-D or 2-D)."""
    i = first_nonfinite_row(a)
    if i < 0:
        return
    a2 = a.reshape(a.shape[0], -1)
    if a.ndim == 1:
        raise ValueError(f"{name} contains {_describe(a[i])} at index {i + offset}; "
                         "it must be finite")
    j = int(np.flatnonzero(~np.isfinite(a2[i]))[0])
    raise ValueError(
        f"{name} contains {_describe(a2[i, j])} at row {i + offset}, column {j}; "
        "it must be finite"
    )


def _describe(v: float) -> str:
    return "NaN" if np.isnan(v) else ("inf" if v > 0 else "-inf")


def check_X(X: Any, *, dtype: Any = None, offset: int = 0,
            allow_empty: bool = False, finite: bool = True) -> Any:
    """Training or prediction data: 2-D, at least one row and one feature, finite.

    Dense input: scikit-learn's ``check_array`` does the conversion, so the
    messages for 1-D, empty, complex and object input are the ones its
    users know (a float ndarray of the wanted dtype has nothing to convert
    and skips it); the finiteness scan is ours (one parallel read, naming
    the row). Returns a C-contiguous float32/float64 array, read-only input
    as :func:`kernel_view` gives it.

    scipy.sparse input (matrix or array, any format): returned as a
    :class:`fastsoftmax._sparse.CSR` (CSC, COO and the others converted
    once, an O(nnz) copy; never densified), checked for NaN/inf values,
    out-of-range indices and malformed index arrays, naming the row.

    ``allow_empty`` accepts 0 rows (a Dask block may have none).
    ``finite=False`` skips the scan of dense X for NaN and inf (the caller
    checks what its own pass computes); a value that the cast to ``dtype``
    took out of range is still named.
    """
    if is_sparse(X):
        return _check_sparse_X(X, dtype, offset, allow_empty)
    source = X
    if not _plain_float_matrix(X, dtype, allow_empty):
        from sklearn.utils import check_array

        # A float64 value beyond float32's range becomes inf in the cast to
        # a float32 model's dtype: named below, not warned about here.
        with np.errstate(over="ignore"):
            X = check_array(X, dtype=[np.float64, np.float32] if dtype is None else dtype,
                            order="C", ensure_all_finite=False,
                            ensure_min_samples=0 if allow_empty else 1)
    X = kernel_view(np.ascontiguousarray(X))
    if not finite:
        _name_out_of_range(source, X, offset)
        return X
    try:
        check_finite(X, "X", offset=offset)
    except ValueError:
        _name_out_of_range(source, X, offset)
        raise
    return X


def _name_out_of_range(source: Any, X: np.ndarray, offset: int) -> None:
    """Raise ValueError for the first entry that is finite in ``source`` but not in X (a cast)."""
    if not isinstance(source, np.ndarray) or source.shape != X.shape or source is X:
        return
    if source.dtype.kind not in "biuf":  # objects: their values as float64
        try:
            source = np.asarray(source, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            return
    with np.errstate(invalid="ignore"):
        lost = ~np.isfinite(X) & np.isfinite(source)
    if lost.any():
        i, j = (int(v) for v in np.argwhere(lost)[0])
        raise ValueError(
            f"X[{i + offset}, {j}] = {float(source[i, j])!r} is outside the range of "
            f"{X.dtype.name} (the working dtype here); rescale X")


def _plain_float_matrix(X: Any, dtype: Any, allow_empty: bool) -> bool:
    """X is already what ``check_array`` would return up to its memory order.

    A 2-D float32/float64 ndarray (not np.matrix) of the wanted dtype, with
    rows (or ``allow_empty``) and columns: nothing for scikit-learn's
    ``check_array`` to convert or reject, so it is not called (nor imported,
    which takes about a second in a fresh process).
    """
    if not isinstance(X, np.ndarray) or isinstance(X, np.matrix) or X.ndim != 2:
        return False
    if X.dtype not in (np.float32, np.float64):
        return False
    if dtype is not None and X.dtype != np.dtype(dtype):
        return False
    return X.shape[1] >= 1 and (X.shape[0] >= 1 or allow_empty)


class _Alias:
    """Holds an array interface (and the array it describes) for :func:`kernel_view`."""

    def __init__(self, base: np.ndarray):
        iface = dict(base.__array_interface__)
        iface["data"] = (iface["data"][0], False)
        self.__array_interface__ = iface
        self.base = base


def kernel_view(a: np.ndarray) -> np.ndarray:
    """Return ``a`` itself, or for a read-only array a view of it typed writable.

    Numba compiles a separate specialisation of every kernel for read-only
    arrays (a memory-mapped file, an array with ``writeable=False``): a
    second cold compile of each kernel a fit touches, and a second body
    whose rounding can differ from the first (when one was loaded from the
    cache and the other compiled in this process, it did, measured). The
    kernels only ever read their input arrays (the tests check that no
    input changes, read-only ones included), so the data goes to them as
    one writable-typed view of the same memory: one specialisation per
    dtype. The view keeps ``a`` alive and is never handed back to the caller.
    """
    if a.flags.writeable:
        return a
    return np.asarray(_Alias(a))


def is_dask_collection(x: Any) -> bool:
    """Return True for dask arrays, DataFrames and Series, without importing dask."""
    return type(x).__module__.split(".")[0] in ("dask", "dask_expr") and hasattr(
        x, "__dask_graph__")


def is_sparse(X: Any) -> bool:
    """X is a scipy.sparse matrix or array, or an already checked CSR."""
    # No CSR exists before fastsoftmax._sparse is imported, and no
    # scipy.sparse object before scipy.sparse is: dense input pays for
    # neither import (the first loads Numba, about 0.2 s; the second 0.1 s).
    ours = sys.modules.get("fastsoftmax._sparse")
    if ours is not None and isinstance(X, ours.CSR):
        return True
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and bool(sparse.issparse(X))


def _check_sparse_X(X: Any, dtype: Any, offset: int, allow_empty: bool):
    from ._sparse import as_csr

    if getattr(X, "ndim", 2) != 2:
        raise ValueError(f"X must be 2-D, got a sparse array of shape {X.shape}")
    m, n = X.shape
    if m == 0 and not allow_empty:
        raise ValueError(f"Found array with 0 sample(s) (shape=({m}, {n})) while a "
                         "minimum of 1 is required.")
    if n == 0:
        raise ValueError(f"Found array with 0 feature(s) (shape=({m}, {n})) while a "
                         "minimum of 1 is required.")
    return as_csr(X, dtype, offset=offset)


_INT64 = np.dtype(np.int64)


def check_labels(y: Any, m: int, k: int, name: str = "y") -> np.ndarray:
    """Integer class indices in 0..k-1, one per row; returned as int64."""
    if (type(y) is np.ndarray and y.dtype is _INT64 and y.ndim == 1 and y.shape[0] == m
            and _contiguous_writable(y.flags)):
        # What the steps below return for it, without NumPy's conversions
        # (after an idle pause each call into NumPy costs a small call
        # microseconds; BENCHMARKS.md, "Forty-ninth session").
        labels = y
    else:
        labels = _labels_array(y, m, k, name)
    from ._kernels._checks import _first_bad_label  # Numba, loaded by the kernels' callers

    i = _first_bad_label(labels, k)
    if i >= 0:
        raise ValueError(
            f"{name}[{i}] = {labels[i]} is not a class index in 0..{k - 1} "
            f"(W has {k} columns)"
        )
    return labels


def _labels_array(y: Any, m: int, k: int, name: str) -> np.ndarray:
    """``y`` as a writable C-contiguous int64 array of m labels (not yet range-checked)."""
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
    return kernel_view(np.ascontiguousarray(arr, dtype=np.int64))


def check_targets(Y: Any, m: int, k: int, dtype: np.dtype, name: str = "y") -> np.ndarray:
    """Check Y is an (m, k) matrix whose rows are probability vectors; return it in ``dtype``."""
    arr = as_float_array(Y, name, ndim=(2,), dtype=dtype)
    if arr.shape != (m, k):
        raise ValueError(
            f"{name} as a target matrix must have shape ({m}, {k}) "
            f"(rows of X, columns of W), got {arr.shape}"
        )
    from ._kernels._checks import _first_bad_distribution_row  # Numba on first use

    tol = float(np.sqrt(np.finfo(dtype).eps))
    # A scan of a few million entries on the calling thread, as in
    # first_nonfinite_row.
    with kernel_call(None, arr.size, blas=False, ends_call=False):
        bad_row = np.empty(n_chunks(m), dtype=np.int64)
        _first_bad_distribution_row(arr, tol, bad_row)
    i = first_bad(bad_row)
    if i >= 0:
        row = arr[i]
        raise ValueError(
            f"{name} row {i} is not a probability vector (entries in [0, 1] "
            f"summing to 1 within {tol:.1e}): min {row.min()}, sum {row.sum(dtype=np.float64)}"
        )
    return arr


def check_sample_weight(sw: Any, m: int, dtype: np.dtype, *, offset: int = 0,
                        require_positive_total: bool = True) -> np.ndarray:
    """Non-negative finite weights, one per row, not all zero.

    A Dask block checks its rows with ``require_positive_total`` False: only
    the total over all blocks must be positive.
    """
    arr = as_float_array(sw, "sample_weight", ndim=(1,), dtype=dtype)
    if arr.shape[0] != m:
        raise ValueError(f"sample_weight has {arr.shape[0]} entries but X has {m} rows")
    check_finite(arr, "sample_weight", offset=offset)
    if m and arr.min() < 0:
        i = int(np.argmin(arr))
        raise ValueError(f"sample_weight[{i + offset}] = {arr[i]} is negative")
    if require_positive_total and m and not arr.sum(dtype=np.float64) > 0:
        raise ValueError("sample_weight sums to zero: at least one row must have weight")
    return arr


def check_alpha(alpha: Any) -> float:
    """Check the L2 strength is a finite number >= 0; return it as a float."""
    # A Python float (the usual case) needs neither the ABC check nor NumPy:
    # after an idle pause each costs tens of microseconds of a small call
    # (BENCHMARKS.md, "Forty-sixth session").
    if type(alpha) is not float and (isinstance(alpha, bool)
                                     or not isinstance(alpha, numbers.Real)):
        raise TypeError(f"alpha must be a real number, got {type(alpha).__name__}")
    value = float(alpha)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    return value


def _check_finite_small(a: np.ndarray, name: str) -> None:
    """NumPy's isfinite first (no parallel launch for a small array); the scan only to word it."""
    if not np.isfinite(a).all():
        check_finite(a, name)


def check_weights(W: Any, b: Any, n_features: int, dtype: np.dtype,
                  names: tuple[str, str] = ("W", "b"),
                  finite: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Public-layout weights W (n, k) and intercept b (k,) or None, in ``dtype``, finite.

    ``names`` words the errors for another pair of the same shapes (a
    direction V, c). ``finite=False`` leaves the NaN/inf scan to the
    caller (``loss_and_grad`` on dense X, whose kernel meets every weight).
    """
    nw, nb = names
    W_arr = as_float_array(W, nw, ndim=(2,), dtype=dtype)
    if W_arr.shape[0] != n_features:
        raise ValueError(
            f"{nw} has {W_arr.shape[0]} rows but X has {n_features} features; "
            f"{nw} must be (n_features, n_classes)"
        )
    k = W_arr.shape[1]
    if k == 0:
        raise ValueError(f"{nw} has 0 columns: at least one class is needed")
    if finite:
        _check_finite_small(W_arr, nw)
    b_arr = None
    if b is not None:
        b_arr = as_float_array(b, nb, ndim=(1,), dtype=dtype)
        if b_arr.shape[0] != k:
            raise ValueError(f"{nb} has {b_arr.shape[0]} entries but {nw} has {k} columns")
        if finite:
            _check_finite_small(b_arr, nb)
    return W_arr, b_arr


# ------------------------------------------------------------- class labels
def check_class_labels(y: Any) -> np.ndarray:
    """Class labels of a classifier: 1-D, no NaN, a classification target.

    The messages are scikit-learn's (``column_or_1d``,
    ``check_classification_targets``), which its estimator checks expect.
    """
    if isinstance(y, np.ndarray) and y.ndim == 1 and y.dtype.kind in "biuU":
        # Booleans, integers or strings in one dimension: scikit-learn's
        # checks below accept every such array (a "binary" or "multiclass"
        # target) and change nothing, so they (and importing scikit-learn)
        # are skipped.
        return y
    from sklearn.utils import assert_all_finite
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import column_or_1d

    if y is None:
        raise ValueError("this estimator requires y to be passed, but the target y is None")
    y = column_or_1d(y, warn=True)
    if y.dtype.kind in "fc":
        assert_all_finite(y, input_name="y")
    elif y.dtype.kind == "O":
        for i, v in enumerate(y):
            if isinstance(v, (float, np.floating)) and not np.isfinite(v):
                raise ValueError(f"y[{i}] = {v!r} is not a class label")
    # scikit-learn's target-type check casts to int64 to look for integral
    # floats; that cast must not surface as a RuntimeWarning.
    with np.errstate(invalid="ignore", over="ignore"):
        check_classification_targets(y)
    return y


def check_n_classes(classes: np.ndarray) -> None:
    """Softmax regression needs at least two classes."""
    if len(classes) < 2:
        got = f": {classes[0].tolist()!r}" if len(classes) else ""
        raise ValueError(
            f"softmax regression needs at least 2 classes in y; got {len(classes)} class{got}"
        )


def encode_labels(y: np.ndarray, classes: np.ndarray, m: int, *, offset: int = 0,
                  hint: str = "") -> np.ndarray:
    """Integer codes of y in the sorted ``classes``; a clear error for an unseen label."""
    if y.shape[0] != m:
        raise ValueError(f"y has {y.shape[0]} labels but X has {m} rows")
    codes = np.searchsorted(classes, y)
    inside = np.minimum(codes, len(classes) - 1)
    unseen = classes[inside] != y
    if np.any(unseen):
        i = int(np.flatnonzero(unseen)[0])
        raise ValueError(
            f"y[{i + offset}] = {y[i].tolist()!r} is not one of the classes "
            f"{classes.tolist()}{hint}"
        )
    return codes.astype(np.int64)


def class_weight_vector(class_weight: Any, classes: np.ndarray,
                        counts: np.ndarray) -> np.ndarray | None:
    """Weight per class (float64, one per entry of ``classes``), or None.

    ``counts`` are the number of rows of each class (not weighted by the
    sample weights, as scikit-learn counts them). "balanced" gives
    m / (present classes * count) to every class present and 1 to absent
    ones (partial_fit's classes may not all be in one chunk).
    """
    if class_weight is None:
        return None
    if isinstance(class_weight, str) and class_weight == "balanced":
        present = counts > 0
        cw = np.ones(len(classes))
        cw[present] = counts.sum() / (present.sum() * counts[present])
        return cw
    known = set(classes.tolist())
    unknown = [c for c in class_weight if c not in known]
    if unknown:
        raise ValueError(f"class_weight names labels not in y: {unknown}")
    cw = np.array([float(class_weight.get(c, 1.0)) for c in classes.tolist()])
    if not np.all(np.isfinite(cw)) or np.any(cw < 0):
        raise ValueError("class_weight values must be finite and >= 0")
    return cw
