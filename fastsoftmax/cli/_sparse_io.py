"""Sparse data on the command line: svmlight/libsvm text and sparse ``.npz``, kept sparse.

Both readers return a ``scipy.sparse.csr_matrix`` that travels to
:meth:`SoftmaxRegression.fit` and ``predict`` as it is: the estimator takes
scipy.sparse input end to end, so a file with millions of mostly empty
columns costs memory for its stored entries only, never rows x features.

- svmlight/libsvm text (scikit-learn's reader). The width is the largest
  feature index seen unless ``n_features`` asks for more (trailing columns
  no row mentions); :func:`check_n_features` rejects a smaller one.
- ``.npz`` written by ``scipy.sparse.save_npz`` (arrays ``data``,
  ``indices``, ``indptr``, ``shape``, ``format``), any format scipy can
  load, converted to CSR once; for training the labels are an extra array
  ``y`` in the same file::

      np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr,
               shape=X.shape, format=X.format, y=y)

``--standardize`` on sparse data scales and never centres (centring would
fill every empty entry): :func:`sparse_scaler` returns a zero mean and the
columns' population standard deviations, so the model file says
``scaler_mean = 0`` and prediction applies the same (:func:`scale_rows`).

Chunked reading (``--chunksize``) is not offered for these formats: it is
for tables bigger than memory, while a sparse file is usually small next to
its dense equivalent and is read whole.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ._common import CLIError

# The arrays scipy.sparse.save_npz writes for every format it supports.
SPARSE_NPZ_KEYS = ("data", "shape", "format")


def is_sparse(X: Any) -> bool:
    """X is a scipy.sparse matrix or array."""
    # None exists before scipy.sparse is imported: dense files never import it.
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and bool(sparse.issparse(X))


def read_svmlight(path: str, *, n_features: int | None = None,
                  zero_based: bool | None = None) -> tuple[Any, np.ndarray, bool]:
    """(X as CSR float64, labels as read, whether indices were zero-based).

    ``zero_based`` None decides from the file, as scikit-learn's "auto"
    would, and the caller remembers the answer in the model so that a
    prediction file missing feature 0 is read the same way. ``n_features``
    widens X to that many columns when the file's largest index is
    smaller; when it is larger X keeps its own width, for the caller to
    report (:func:`check_n_features`, or predict's feature-count check).
    """
    import scipy.sparse
    from sklearn.datasets import load_svmlight_file

    try:
        # Read zero-based in every case: indices as written, so one-based
        # files keep an empty column 0, dropped below.
        X, y = load_svmlight_file(path, zero_based=True)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path}: not a valid svmlight/libsvm file ({exc})") from None
    if zero_based is None:
        zero_based = bool(X.nnz == 0 or X.indices.min() == 0)
    if not zero_based:
        if X.nnz and X.indices.min() == 0:
            # The model says one-based (or, not saying, svmlight's own rule).
            raise CLIError(f"{path}: feature index 0 in a file read as one-based")
        # Column slicing of a CSR matrix copies the stored entries only.
        X = X[:, 1:] if X.shape[1] > 0 else X
    X = scipy.sparse.csr_matrix(X, dtype=np.float64)
    if n_features is not None and n_features > X.shape[1]:
        X = scipy.sparse.csr_matrix((X.data, X.indices, X.indptr),
                                    shape=(X.shape[0], n_features))
    return X, y, zero_based


def check_n_features(path: str, n_features: int, X: Any, zero_based: bool | None) -> None:
    """Reject ``--n-features`` smaller than the columns an svmlight file uses."""
    if n_features >= X.shape[1]:
        return
    largest = X.shape[1] - 1 if zero_based else X.shape[1]
    base = "zero-based" if zero_based else "one-based"
    raise CLIError(f"{path}: --n-features {n_features} is less than the {X.shape[1]} "
                   f"features the file uses (largest feature index {largest}, {base})")


def has_sparse_arrays(files: set[str]) -> bool:
    """Tell whether an ``.npz`` holds the arrays ``scipy.sparse.save_npz`` writes."""
    return all(key in files for key in SPARSE_NPZ_KEYS)


def read_sparse_npz(path: str) -> Any:
    """Read the matrix of a ``save_npz`` file as CSR (float32 kept, else float64)."""
    import scipy.sparse

    try:
        X = scipy.sparse.load_npz(path)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as exc:  # unknown format string, inconsistent arrays, pickles
        raise CLIError(f"{path}: not a readable scipy.sparse matrix (arrays data, indices, "
                       f"indptr, shape, format as scipy.sparse.save_npz writes) ({exc})"
                       ) from None
    if X.ndim != 2:
        raise CLIError(f"{path}: the sparse matrix must be 2-D, got shape {X.shape}")
    if X.dtype.kind not in "biuf":
        raise CLIError(f"{path}: the sparse matrix must be numeric, got dtype {X.dtype}")
    X = scipy.sparse.csr_matrix(X)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    return X


def as_dtype(X: Any, dtype: Any) -> Any:
    """X in ``dtype`` (its stored values only; no copy when it already is)."""
    return X if X.dtype == np.dtype(dtype) else X.astype(dtype)


def sparse_scaler(X: Any) -> tuple[np.ndarray, np.ndarray]:
    """(zeros, population standard deviation of each column; 1 where it is 0).

    In float64 from the stored entries: the mean from the column sums, then
    the squared deviations of the stored entries from it plus one squared
    mean for every entry not stored. Summing deviations, rather than taking
    the mean of squares minus the square of the mean, spares the
    cancellation that would leave a constant column with a spurious tiny
    spread. The mean is returned as zeros because the data are scaled,
    never centred.
    """
    import scipy.sparse

    m, n = X.shape
    X = scipy.sparse.csr_matrix(X, dtype=np.float64, copy=True)
    X.sum_duplicates()  # one stored entry per cell, so the counts below are cells
    mean = np.bincount(X.indices, weights=X.data, minlength=n) / m
    deviations = np.square(X.data - mean[X.indices])
    m2 = np.bincount(X.indices, weights=deviations, minlength=n)
    stored = np.bincount(X.indices, minlength=n)
    m2 += (m - stored) * np.square(mean)
    scale = np.sqrt(m2 / m)
    scale[~(scale > 0)] = 1.0  # empty or constant columns: left as they are
    return np.zeros(n), scale


def scale_rows(X: Any, scale: np.ndarray) -> Any:
    """``X / scale`` column by column on a copy, touching only the stored entries.

    Dividing (rather than multiplying by the reciprocal) gives the very
    numbers the dense path computes for the same entries.
    """
    import scipy.sparse

    out = scipy.sparse.csr_matrix(X, dtype=np.float64, copy=True)
    out.data /= scale[out.indices]
    return out


def first_nonfinite_row(X: Any) -> int:
    """Index of the first row with a NaN or infinite stored value, or -1."""
    finite = np.isfinite(X.data)
    if finite.all():
        return -1
    entry = int(np.argmin(finite))
    return int(np.searchsorted(X.indptr, entry, side="right")) - 1


def describe(X: Any) -> str:
    """", sparse, nnz=N" for a sparse X, else nothing: for the training summary."""
    return f", sparse, nnz={X.nnz}" if is_sparse(X) else ""
