"""``fastsoftmax train`` and ``fastsoftmax predict``.

Sparse files (svmlight/libsvm, sparse ``.npz``) are handed to the
estimator as ``scipy.sparse`` CSR matrices from reading to predicting:
``--test-size`` splits them as they are, ``--standardize`` scales their
stored entries without centring (:mod:`fastsoftmax.cli._sparse_io`), and
prediction checks, scales and casts them without densifying.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import _io, _sparse_io
from ._common import (
    PARAM_OPTIONS,
    PROG,
    CLIError,
    apply_scaler,
    block_rows,
    one_line,
    progress_wanted,
    scale_in_place,
    standardize,
)


# ------------------------------------------------------------------ helpers
def option_error(exc: Exception) -> str:
    """Name the command-line option behind an estimator parameter error."""
    msg = one_line(str(exc))
    for param, option in PARAM_OPTIONS.items():
        if msg.startswith(param + " "):
            return f"{option}: {msg}"
    return msg


def estimator(args: argparse.Namespace, **fixed: Any) -> Any:
    """Return a model with the options' parameters, ``fixed`` taking precedence.

    The model is :class:`~fastsoftmax._model.SoftmaxModel`, SoftmaxRegression
    without scikit-learn, whose import would cost about 1 s per command.
    """
    from .._model import SoftmaxModel

    params = {param: getattr(args, param) for param in PARAM_OPTIONS if hasattr(args, param)}
    params.update(fixed)
    return SoftmaxModel(**params)


def report_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Print each caught warning as one line, without the source line Python would print."""
    for w in caught:
        print(f"{PROG}: warning: {one_line(str(w.message))}", file=sys.stderr)


def model_extras(feature_names: list[str] | None, target_name: str | None,
                 scaler: tuple[np.ndarray, np.ndarray] | None,
                 zero_based: bool | None = None) -> dict[str, np.ndarray]:
    """Return the extra arrays of a model file (see the package docstring)."""
    extras: dict[str, np.ndarray] = {}
    if scaler is not None:
        extras["scaler_mean"], extras["scaler_scale"] = scaler
    if feature_names is not None:
        extras["feature_names"] = np.array(feature_names, dtype=str)
    if target_name is not None:
        extras["target_name"] = np.array(target_name)
    if zero_based is not None:
        extras["svmlight_zero_based"] = np.array(zero_based)
    return extras


def check_target_option(args: argparse.Namespace) -> str:
    """Return the format of ``args.data``, having checked that ``--target`` applies to it."""
    _io.check_data_path(args.data)
    kind = _io.detect_format(args.data, args.format)
    if args.target is not None and kind not in _io.TABLE_FORMATS:
        raise CLIError(f"--target names a column, and {args.data} is {kind}: it applies to "
                       "CSV, Parquet and Feather input only")
    return kind


def check_n_features_option(args: argparse.Namespace, kind: str) -> int | None:
    """``--n-features``, having checked that it applies to the format of ``args.data``."""
    n_features: int | None = getattr(args, "n_features", None)
    if n_features is not None and kind != "svmlight":
        raise CLIError(f"--n-features sets the width of svmlight/libsvm files, and "
                       f"{args.data} is {kind}: its columns say how many features it has")
    return n_features


# -------------------------------------------------------------------- train
def _test_split(args: argparse.Namespace, X: np.ndarray, y: np.ndarray) -> tuple[Any, ...]:
    from sklearn.model_selection import train_test_split

    size: float | int = args.test_size
    if size >= 1:
        if size != int(size):
            raise CLIError(f"--test-size: {size} is neither a fraction in (0, 1) "
                           "nor a whole number of rows")
        size = int(size)
    if size <= 0 or (isinstance(size, int) and size >= X.shape[0]):
        raise CLIError(f"--test-size: {args.test_size} leaves no training or no test "
                       f"rows out of {X.shape[0]}")
    try:
        return tuple(train_test_split(X, y, test_size=size, stratify=y,
                                      random_state=args.random_state))
    except ValueError:  # a class too small to stratify: split at random
        return tuple(train_test_split(X, y, test_size=size, random_state=args.random_state))


def _as_features(X: Any, dtype: np.dtype) -> Any:
    """X as the estimator takes it best: C-contiguous in ``dtype``, or CSR in ``dtype``."""
    if _sparse_io.is_sparse(X):
        return _sparse_io.as_dtype(X, dtype)
    return np.ascontiguousarray(X, dtype=dtype)


def train(args: argparse.Namespace) -> int:
    """Read the whole file, fit, report, save."""
    # A typo in -o is reported at once, not after a long fit.
    _io.check_output_folder(args.output)
    kind = check_target_option(args)
    n_features = check_n_features_option(args, kind)
    if args.chunksize is not None:
        from ._stream import train_in_chunks

        return train_in_chunks(args, kind)
    dtype = np.dtype(args.dtype)
    # Standardised data is computed in float64 (in place) and cast afterwards.
    table = _io.read(args.data, kind, need_target=True, target=args.target,
                     n_features=n_features, dtype=np.float64 if args.standardize else dtype)
    X, y = table.X, table.y
    assert y is not None
    sparse = _sparse_io.is_sparse(X)
    if n_features is not None:
        _sparse_io.check_n_features(args.data, n_features, X, table.zero_based)
    if sparse:
        # Here, before any split, the row is the file's (the estimator
        # would name a row of the training part, counted from 0).
        bad = _sparse_io.first_nonfinite_row(X)
        if bad >= 0:
            raise CLIError(f"{args.data}: row {bad + 1} has a NaN or infinite feature")
    if X.shape[0] < 2:
        raise CLIError(f"{args.data}: needs at least 2 rows, has {X.shape[0]}")
    X_test = y_test = None
    if args.test_size is not None:
        X, X_test, y, y_test = _test_split(args, X, y)
    scaler = None
    if args.standardize and sparse:
        # Centring would store every empty entry: scale only, and save a
        # zero mean so that predict does the same.
        scaler = _sparse_io.sparse_scaler(X)
        X = _sparse_io.scale_rows(X, scaler[1])
        if X_test is not None:
            X_test = _sparse_io.scale_rows(X_test, scaler[1])
        print("--standardize on sparse data: features scaled to unit variance, not centred")
    elif args.standardize:
        scaler = standardize(X)
        for part in (X, X_test):
            if part is not None:
                scale_in_place(part, *scaler)
    X = _as_features(X, dtype)
    model = estimator(args, verbose=1 if progress_wanted(args.progress) else 0)
    solver = model.solver
    if solver == "auto":  # name the solver "auto" ran
        from .._solvers import choose_solver

        solver = choose_solver(None)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model.fit(X, y)
        except (ValueError, TypeError) as exc:
            raise CLIError(option_error(exc)) from None
    elapsed = time.perf_counter() - start
    report_warnings(caught)
    label = f"auto ({solver})" if model.solver == "auto" else solver
    print(f"trained {label} on {X.shape[0]} rows x {X.shape[1]} features"
          f"{_sparse_io.describe(X)}, {len(model.classes_)} classes ({dtype.name}) "
          f"in {elapsed:.3g} s, "
          f"{model.n_iter_} {'epochs' if solver == 'sgd' else 'iterations'}")
    print(f"training accuracy: {float(np.mean(model.predict(X) == y)):.4f}")
    if X_test is not None:
        X_test = _as_features(X_test, dtype)
        test_acc = float(np.mean(model.predict(X_test) == y_test))
        print(f"test accuracy: {test_acc:.4f} ({X_test.shape[0]} held-out rows)")
    extras = model_extras(table.feature_names, table.target_name, scaler, table.zero_based)
    _io.save_model(model, args.output, extras)
    print(f"model written to {args.output}")
    return 0


# ------------------------------------------------------------------ predict
def _preparation(model: Any, extras: dict[str, np.ndarray],
                 args: argparse.Namespace) -> _io.Transform:
    """Features as read -> features as the model takes them (scaled, its dtype, checked)."""
    n = model.n_features_in_
    dtype = model.coef_.dtype
    scaler = ((extras["scaler_mean"], extras["scaler_scale"]) if "scaler_mean" in extras
              else None)

    def prepare(X: Any, start: int) -> Any:
        if X.shape[1] != n:
            raise CLIError(f"{args.data}: {X.shape[1]} features, but the model {args.model} "
                           f"was trained on {n}")
        if _sparse_io.is_sparse(X) and (scaler is None or not scaler[0].any()):
            if scaler is not None:
                X = _sparse_io.scale_rows(X, scaler[1])
            X = _sparse_io.as_dtype(X, dtype)
            bad = _sparse_io.first_nonfinite_row(X)
            if bad >= 0:
                raise CLIError(f"{args.data}: row {start + bad + 1} has a NaN or infinite "
                               "feature")
            return X
        if _sparse_io.is_sparse(X):
            # A model that centres (trained on dense data, or by an earlier
            # version on svmlight) needs every entry: the one case where
            # sparse input is made dense, as it always was before.
            X = X.toarray()
        if scaler is not None:
            X = apply_scaler(X, *scaler)
        X = np.ascontiguousarray(X, dtype=dtype)
        finite = np.isfinite(X).all(axis=1)
        if not finite.all():
            raise CLIError(f"{args.data}: row {start + int(np.argmin(finite)) + 1} has a NaN "
                           "or infinite feature")
        return X

    return prepare


def _blocks(args: argparse.Namespace, model: Any, extras: dict[str, np.ndarray],
            prepare: _io.Transform) -> Iterator[np.ndarray]:
    """Yield the prepared features of ``args.data``, a block of rows at a time.

    CSV, Parquet and Feather files are read ``--chunksize`` rows at a time,
    by default blocks of about 8 MiB of features: each block is predicted
    and written before the next is read, so the file is never held whole.
    Sparse and ``.npz`` files are read whole.
    """
    names = [str(s) for s in extras["feature_names"]] if "feature_names" in extras else None
    target = str(extras["target_name"]) if "target_name" in extras else None
    _io.check_data_path(args.data)
    kind = _io.detect_format(args.data, args.format)
    if args.chunksize is None and kind not in _io.TABLE_FORMATS:
        zero_based = (bool(extras["svmlight_zero_based"]) if "svmlight_zero_based" in extras
                      else False)  # svmlight's own convention when the model does not say
        yield _io.read(args.data, kind, need_target=False, feature_names=names,
                       model_target=target, n_features=model.n_features_in_,
                       zero_based=zero_based, dtype=model.coef_.dtype, transform=prepare).X
        return
    if kind not in _io.TABLE_FORMATS:
        raise CLIError(f"--chunksize reads CSV, Parquet and Feather files; {args.data} is "
                       f"{kind}")
    source = _io.open_source(args.data, kind)
    features, _ = _io.select_columns(source, need_target=False, feature_names=names,
                                     model_target=target)
    rows = 0
    size = args.chunksize or block_rows(len(features))
    for chunk in source.chunks(size, features, None):
        assert chunk.X is not None
        rows += chunk.X.shape[0]
        yield prepare(chunk.X, chunk.start)
    if rows == 0:
        raise CLIError(f"{args.data}: no data rows")


def predict(args: argparse.Namespace) -> int:
    """Predict every row of ``args.data``, writing the CSV as the rows are predicted."""
    if args.output not in (None, "-"):
        _io.check_output_folder(args.output)  # before any reading and predicting
    model, extras = _io.load_model(args.model)
    target = str(extras["target_name"]) if "target_name" in extras else None
    method: Callable[[np.ndarray], np.ndarray] = (model.predict_proba if args.proba
                                                  else model.predict)
    rows = 0
    with _io.output(args.output) as fh:
        for X in _blocks(args, model, extras, _preparation(model, extras, args)):
            try:
                result = method(X)
            except (ValueError, FloatingPointError) as exc:
                # For instance logits that overflow the model's dtype on this data.
                raise CLIError(f"{args.data}: cannot predict with {args.model}: "
                               f"{one_line(str(exc))}") from None
            _io.write_predictions(fh, result, classes=model.classes_, name=target or "label",
                                  proba=args.proba, header=rows == 0)
            rows += X.shape[0]
    if args.output not in (None, "-"):
        print(f"{rows} {'probability rows' if args.proba else 'predictions'} "
              f"written to {args.output}", file=sys.stderr)
    return 0
