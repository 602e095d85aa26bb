"""The data the kernels read: one validated problem, in one object.

:class:`Dataset` holds X, the targets (integer class codes, or a matrix of
class probabilities), the row weights (sample weights times class weights)
and the weight total that normalises the loss. It is built once per fit by
:func:`training_data` (or per ``loss_and_grad`` call by :func:`loss_data`)
from the raw input, through the checks of :mod:`fastsoftmax._validation`;
from then on every solver, objective and epoch reads it and nothing goes
back to the estimator. A Dask row block is a Dataset too, built by the same
functions on the worker that holds it (:mod:`fastsoftmax._dask`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ._validation import (
    check_class_labels,
    check_finite,
    check_labels,
    check_n_classes,
    check_sample_weight,
    check_targets,
    check_X,
    class_weight_vector,
    encode_labels,
)

_EMPTY_CODES = np.empty(0, dtype=np.int64)


# The empty placeholders of unweighted data and of labels (no targets), by
# (dtype, classes): made once, as _EMPTY_CODES is, not per call (after an
# idle pause two allocations took 15-20 microseconds of a small call;
# BENCHMARKS.md, "Forty-ninth session"). They have no entry to write.
@functools.lru_cache(maxsize=64)
def _empty(dtype: np.dtype, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (sample weights (0,), targets (0, n_classes)) of ``dtype``, shared."""
    return np.empty(0, dtype=dtype), np.empty((0, n_classes), dtype=dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """One validated problem, as the kernels read it.

    Attributes
    ----------
    X : ndarray of shape (m, n), C-contiguous float32 or float64, finite;
        or, for scipy.sparse input, a :class:`fastsoftmax._sparse.CSR` of
        the same dtypes (never densified).
    labels : ndarray of shape (m,) int64 codes in 0..k-1, or empty when
        ``targets`` are given.
    targets : ndarray of shape (m, k) of X's dtype, rows probability
        vectors, or of shape (0, k) when ``labels`` are given.
    sample_weight : ndarray of shape (m,) of X's dtype, or empty (all 1).
    n_classes : int
    total_weight : float
        The normaliser of the loss, Σ w_i over the whole data set (for a
        Dask block, over every block).
    mean_weight : float
        Σ w_i / rows over the whole data set: SGD scales each row's step by
        w_i / mean_weight so that a mini-batch estimates the full objective.
    """

    X: np.ndarray
    labels: np.ndarray
    targets: np.ndarray
    sample_weight: np.ndarray
    n_classes: int
    total_weight: float
    mean_weight: float

    @property
    def sparse(self) -> bool:
        """X is a :class:`fastsoftmax._sparse.CSR` (scipy.sparse input)."""
        return not isinstance(self.X, np.ndarray)

    @property
    def soft(self) -> bool:
        return self.targets.shape[0] > 0

    @property
    def weighted(self) -> bool:
        return self.sample_weight.shape[0] > 0

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def dtype(self) -> np.dtype:
        return self.X.dtype

    def kernel_targets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool, bool]:
        """(labels, targets, sample_weight, soft, weighted): the kernels' target arguments."""
        return self.labels, self.targets, self.sample_weight, self.soft, self.weighted

    def rows(self, index: np.ndarray) -> Dataset:
        """Return the problem on a subset of the rows, with its own weight total."""
        X: Any
        if self.sparse:
            from ._sparse import as_csr

            X = as_csr(self.X.to_scipy()[index])  # type: ignore[attr-defined]
        else:
            X = np.ascontiguousarray(self.X[index])
        return make_dataset(X,
                            None if self.soft else self.labels[index],
                            self.targets[index] if self.soft else None,
                            self.sample_weight[index] if self.weighted else None,
                            self.n_classes)

    def split(self, fraction: float, seed: int) -> tuple[Dataset, Dataset]:
        """(training, held-out) rows for early stopping, stratified by class."""
        from sklearn.model_selection import StratifiedShuffleSplit

        splitter = StratifiedShuffleSplit(test_size=fraction, random_state=seed)
        try:
            train, held = next(splitter.split(np.zeros(self.n_rows), self.labels))
        except ValueError as exc:
            raise ValueError(
                f"early_stopping cannot hold out validation_fraction={fraction} of "
                f"{self.n_rows} rows with every class represented: {exc}") from None
        if self.weighted and not self.sample_weight[held].sum(dtype=np.float64) > 0:
            raise ValueError("early_stopping: the held-out rows all have weight 0")
        return self.rows(train), self.rows(held)

    def with_totals(self, total_weight: float, mean_weight: float) -> Dataset:
        """Return the same rows normalised by another total (a Dask block of a larger set)."""
        return dataclasses.replace(self, total_weight=float(total_weight),
                                   mean_weight=float(mean_weight))

    def objective(self, n_threads: int | None = None, newton: bool = False):
        """Return the fused objective a solver evaluates on this data (:mod:`._objective`).

        ``n_threads`` is accepted for the Dask layer's sake (its workers are
        told); in memory the caller's thread policy is in force. ``newton``:
        the solver is Newton's method (:class:`~._objective.Objective`).
        """
        from ._objective import Objective

        return Objective(self, warm=True, newton=newton)

    def sgd_runner(self, n_threads: int | None = None):
        """Return a runner of SGD epochs over this data (``_solvers.sgd.EpochRunner``)."""
        from ._solvers.sgd import EpochRunner

        return EpochRunner(self)


def make_dataset(X: np.ndarray, labels: np.ndarray | None, targets: np.ndarray | None,
                 sample_weight: np.ndarray | None, n_classes: int) -> Dataset:
    """Assemble a Dataset from checked parts; totals from its own weights."""
    m = X.shape[0]
    no_weights, no_targets = _empty(X.dtype, n_classes)
    sw = no_weights if sample_weight is None else sample_weight
    total = float(sw.sum(dtype=np.float64)) if sample_weight is not None else float(m)
    return Dataset(
        X=X,
        labels=_EMPTY_CODES if labels is None else labels,
        targets=no_targets if targets is None else targets,
        sample_weight=sw,
        n_classes=int(n_classes),
        total_weight=total,
        mean_weight=total / m if m else 1.0,
    )


def row_weights(codes: np.ndarray, sample_weight: Any, class_weight: np.ndarray | None,
                m: int, dtype: np.dtype, *, offset: int = 0,
                require_positive_total: bool = True) -> np.ndarray | None:
    """Sample weights times class weights, checked; None when every row weighs 1."""
    sw = None if sample_weight is None else check_sample_weight(
        sample_weight, m, dtype, offset=offset, require_positive_total=require_positive_total)
    if class_weight is None:
        return sw
    row_w = class_weight[codes].astype(dtype)
    sw = row_w if sw is None else sw * row_w
    if require_positive_total and not sw.sum(dtype=np.float64) > 0:
        raise ValueError("class_weight and sample_weight leave every row with weight 0")
    return sw


def training_data(X: Any, y: Any, sample_weight: Any, *, class_weight: Any,
                  classes: np.ndarray | None = None,
                  dtype: Any = None) -> tuple[Dataset, np.ndarray]:
    """Pass raw (X, y, weights) through the estimator's edge: return (Dataset, sorted classes).

    ``classes`` None takes the classes from y (``fit``); given, they are
    fixed and a label outside them is an error (``partial_fit``). ``dtype``
    None keeps float32 and float64 and turns anything else into float64.
    """
    y = check_class_labels(y)
    X = check_X(X, dtype=dtype)
    m = X.shape[0]
    if classes is None:
        if y.shape[0] != m:
            raise ValueError(f"y has {y.shape[0]} labels but X has {m} rows")
        classes, codes = np.unique(y, return_inverse=True)
        check_n_classes(classes)
        codes = codes.astype(np.int64)
    else:
        codes = encode_labels(y, classes, m, hint=" fixed by the first partial_fit "
                              "(pass every class in `classes`)")
    k = len(classes)
    counts = np.bincount(codes, minlength=k)
    sw = row_weights(codes, sample_weight, class_weight_vector(class_weight, classes, counts),
                     m, X.dtype)
    return make_dataset(X, codes, None, sw, k), classes


def loss_data(X: Any, y: Any, n_classes: int, sample_weight: Any) -> Dataset:
    """``loss_and_grad``'s edge: X already converted; y codes 0..k-1 or a target matrix.

    X's finiteness is not scanned here: the fused kernel tests every logit
    (see :func:`fastsoftmax.loss_and_grad`); if y or the weights are
    rejected, X is scanned first so that a non-finite X is still the error
    reported.
    """
    m, n = X.shape
    if m == 0:
        raise ValueError("X has no rows: the loss of an empty sample is undefined")
    if n == 0:
        raise ValueError("X has no features (0 columns)")
    k = n_classes
    try:
        y_arr = y.to_numpy() if hasattr(y, "to_numpy") else np.asarray(y)
        if y_arr.ndim == 2:
            labels, targets = None, check_targets(y_arr, m, k, X.dtype)
        elif y_arr.ndim == 1:
            labels, targets = check_labels(y_arr, m, k), None
        else:
            raise ValueError(
                f"y must be labels of shape ({m},) or targets of shape ({m}, {k}), "
                f"got shape {y_arr.shape}"
            )
        sw = None if sample_weight is None else check_sample_weight(sample_weight, m, X.dtype)
    except (TypeError, ValueError):
        if isinstance(X, np.ndarray):  # sparse values were checked by as_csr
            check_finite(X, "X")
        raise
    return make_dataset(X, labels, targets, sw, k)
