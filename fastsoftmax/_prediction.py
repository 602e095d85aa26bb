"""Prediction with a fitted model: the launches behind the estimator's predict methods.

:class:`~fastsoftmax._model.SoftmaxModel` keeps thin methods (the
dask dispatch, then one call here). Each function takes the fitted
estimator, checks X for it once (:func:`prepared`), and runs one pass over
X in the model's dtype under the estimator's thread policy:

* labels of dense X: one BLAS matrix product per block of rows and the
  arg-max of each row (:func:`labels`), in NumPy: nothing else is needed,
  and no compiled kernel is loaded (a process that only predicts, such as
  ``fastsoftmax predict``, skips Numba's one-time set-up). The blocks run
  on Python threads with BLAS at one thread each
  (:func:`fastsoftmax._threads.blas_map`), so that no BLAS pool is left
  spinning to slow the next fit;
* logits, probabilities or log-probabilities of dense X: the row-block
  kernels of :mod:`fastsoftmax._kernels._predict`, which finish each block
  (the exps and normalisation) on every core, or for a small batch on the
  calling thread alone, as every small kernel call runs
  (:func:`fastsoftmax._launch.serial_call`);
* CSR X: the sparse launchers :func:`fastsoftmax._sparse.logits` (then the
  row-wise softmax or the finiteness check in place) and
  :func:`fastsoftmax._sparse.predict_labels`.

Two classes: the decision function is the (m,) log-odds, formed from the
difference of the two weight rows without the (m, 2) logits.
"""

from __future__ import annotations

import numpy as np

from ._blas_choice import kernel_library, use_chosen
from ._launch import first_bad, launch_work, n_chunks, rowwise_kernel, sparse_launch_work
from ._threads import blas_map, check_n_threads, kernel_call, load_kernel_blas, thread_policy
from ._validation import check_finite, check_X, first_nonfinite_row, kernel_view

# The compiled kernels and the sparse launchers are imported by the functions
# that use them: dense labels need neither, nor Numba (see the docstring).

__all__ = ["MODES", "prepared", "scores", "decision_function", "labels"]

MODES = ("logits", "proba", "log_proba")

def prepared(est, X, finite=True):
    """Return X checked for prediction with the fitted ``est``, in the model's dtype.

    ``finite=False`` leaves dense X's finiteness to the caller (its pass
    over X checks each row's logits, which every entry of the row reaches).
    """
    est._check_fitted()
    # O(k n): a model whose weights were made non-finite (by hand, or by
    # code outside fit) would otherwise predict class 0 everywhere.
    if not (np.isfinite(est.coef_).all() and np.isfinite(est.intercept_).all()):
        raise ValueError(
            "this model's coef_ or intercept_ holds NaN or inf, so it cannot "
            "predict; refit it (with a smaller eta0 if training diverged)")
    X_checked = check_X(X, dtype=est.coef_.dtype, finite=finite)
    est._check_features(X)
    return X_checked


def _overflow(row, dtype):
    return ValueError(
        f"the logits X @ coef_.T + intercept_ overflow {dtype.name} at row {row}: "
        "the features are too large for this model (rescale X)")


def scores(est, X, mode):
    """Return the logits, probabilities or log-probabilities, (m, k), in one pass.

    ``mode`` is one of :data:`MODES`.
    """
    from . import _sparse
    from ._kernels._common import LANES_FROM
    from ._kernels._predict import LOG_PROBA, LOGITS, PROBA, _scores, _scores_lanes
    from ._kernels._rowwise import LOG_SOFTMAX, SOFTMAX, _check_logits

    code = {"logits": LOGITS, "proba": PROBA, "log_proba": LOG_PROBA}[mode]
    X = prepared(est, X)
    n_threads = check_n_threads(est.n_threads)
    m = X.shape[0]
    out = np.empty((m, est.coef_.shape[0]), dtype=X.dtype)
    if m:
        W = np.ascontiguousarray(est.coef_.T)
        # BLAS held for dense X only, the one library the kernel's products
        # call: the sparse kernels call none.
        blas: bool | str = False
        if isinstance(X, np.ndarray):
            load_kernel_blas()
            use_chosen(X.dtype)
            blas = kernel_library(X.dtype) or False
        with kernel_call(n_threads, _work(X, W.shape[1]), blas=blas):
            bad_row = np.empty(n_chunks(m), dtype=np.int64)
            if isinstance(X, np.ndarray):
                # (the kernels' row passes take contiguous rows: a user's
                # intercept_ can be a strided view)
                kernel = _scores_lanes if W.shape[1] >= LANES_FROM else _scores
                kernel(X, W, kernel_view(np.ascontiguousarray(est.intercept_)), code, out,
                       bad_row)
            else:
                _sparse.logits(X, W, est.intercept_, out)
                bad_code = np.empty_like(bad_row)
                if code == LOGITS:
                    _check_logits(out, False, bad_row, bad_code)
                else:
                    rowwise_kernel(out.shape[1])(out, SOFTMAX if code == PROBA
                                                 else LOG_SOFTMAX, out, bad_row, bad_code)
        row = first_bad(bad_row)
        if row >= 0:
            raise _overflow(row, X.dtype)
    return out


def _work(X, k: int) -> int:
    """Return the work of one pass over X's rows with k classes (``_launch.launch_work``).

    Counted as a gradient pass of the same shape is (a CSR batch by
    ``_launch.sparse_launch_work``), which computes two products where a
    prediction computes one: a prediction leaves the calling thread
    (``_launch.serial_call``) at a little less time than a gradient does,
    dense or sparse alike (``predict_proba`` on one thread 0.03-0.09 ns per
    unit dense and sparse, the gradients 0.05-0.12 ns in the same run:
    ``benchmarks/serial_parallel.py --part units``). Below that, a
    sporadic small ``predict_proba`` wakes no worker after an idle spell
    (BENCHMARKS.md, "Forty-fifth session").
    """
    if isinstance(X, np.ndarray):
        return launch_work(X.shape[0], X.shape[1], k)
    return sparse_launch_work(X.shape[0], X.nnz, k)


def decision_function(est, X):
    """Return the logits (m, k), or for two classes the (m,) log-odds of ``classes_[1]``."""
    est._check_fitted()
    if len(est.classes_) > 2:
        return scores(est, X, "logits")
    # The log-odds directly from the difference of the two weight rows:
    # only the (m,) answer is allocated, never the (m, 2) logits.
    X = prepared(est, X)
    with np.errstate(over="ignore", invalid="ignore"), \
            thread_policy(check_n_threads(est.n_threads)):
        d = (X if isinstance(X, np.ndarray) else X.to_scipy()) @ (est.coef_[1] - est.coef_[0])
        d += est.intercept_[1] - est.intercept_[0]
        row = first_nonfinite_row(d)
    if row >= 0:
        raise _overflow(row, X.dtype)
    return d


# Rows per block of dense labels: at most 4 MiB of X and 128 KiB of logits
# (the block's logits stay in cache for the arg-max, and each thread holds
# one block of them at a time), at least 64 (one BLAS call per block).
_LABEL_X_BYTES = 1 << 22
_LABEL_Z_BYTES = 1 << 17


def labels(est, X):
    """Return the index (int64, m) of each row's most probable class, ties to the lowest.

    Allocates only the answer and one block of logits per thread: the
    logits are never stored for all rows. A row whose logits are not finite is an error: its
    NaN or inf entry of X is named, or else the overflow.
    """
    X = prepared(est, X, finite=False)
    m = X.shape[0]
    idx = np.empty(m, dtype=np.int64)
    if not m:
        return idx
    if not isinstance(X, np.ndarray):
        from . import _sparse

        W = np.ascontiguousarray(est.coef_.T)
        n_threads = check_n_threads(est.n_threads)
        with kernel_call(n_threads, _work(X, W.shape[1]), blas=False):
            return _sparse.predict_labels(X, W, est.intercept_)
    (m, n), k, item = X.shape, est.coef_.shape[0], X.dtype.itemsize
    rows = int(min(m, max(64, min(_LABEL_X_BYTES // (n * item), _LABEL_Z_BYTES // (k * item)))))
    W = est.coef_.T  # a transposed view: BLAS reads it as it is
    b = est.intercept_

    def block(start: int) -> None:
        # errstate is per thread: this runs on a pool thread.
        with np.errstate(over="ignore", invalid="ignore"):
            z = X[start:start + rows] @ W
            z += b
            # One sum to test the block (a NaN or inf anywhere makes it
            # non-finite); only then the rows, one by one.
            if not np.isfinite(z.sum()):
                finite = np.isfinite(z).all(axis=1)
                if not finite.all():
                    row = start + int(np.argmin(finite))
                    check_finite(X[row:row + 1], "X", offset=row)  # names a NaN or inf of X
                    raise _overflow(row, X.dtype)
        out = idx[start:start + z.shape[0]]
        if k == 2:  # a comparison instead of NumPy's row-wise reduction of 2
            np.greater(z[:, 1], z[:, 0], out=out, casting="unsafe")
        else:
            np.argmax(z, axis=1, out=out)

    # Blocks in row order: the first row at fault is the one reported.
    blas_map(block, range(0, m, rows), check_n_threads(est.n_threads))
    return idx
