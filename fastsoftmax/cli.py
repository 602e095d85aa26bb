"""The ``fastsoftmax`` command: demo, train, predict, bench.

Run ``fastsoftmax --help`` or ``fastsoftmax COMMAND --help``; also available
as ``python -m fastsoftmax``. Exit status: 0 on success, 2 for bad usage,
1 for any other failure, reported as one line ``fastsoftmax: error: ...``
naming the file, row or option at fault.

Model files are the ``.npz`` of :meth:`SoftmaxRegression.save` plus a few
extra arrays that only the command line reads (``SoftmaxRegression.load``
reads the arrays it knows and ignores the rest):

``scaler_mean``, ``scaler_scale``
    ``--standardize``: predictions use ``(X - scaler_mean) / scaler_scale``.
``feature_names``, ``target_name``
    The CSV header at training: at prediction the columns are matched by
    name and the target column, if present, is ignored.
``svmlight_zero_based``
    How svmlight feature indices were read at training.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import io
import os
import sys
import time
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["main"]

PROG = "fastsoftmax"
_CLI_KEYS = ("scaler_mean", "scaler_scale", "feature_names", "target_name",
             "svmlight_zero_based")
_PARAM_OPTIONS = {
    "solver": "--solver", "alpha": "--alpha", "max_iter": "--max-iter", "tol": "--tol",
    "batch_size": "--batch-size", "learning_rate": "--learning-rate", "eta0": "--eta0",
    "momentum": "--momentum", "n_threads": "--n-threads",
    "validation_fraction": "--validation-fraction", "n_iter_no_change": "--n-iter-no-change",
    "random_state": "--random-state",
}


class CLIError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


# ------------------------------------------------------------------ data
@dataclass
class Table:
    """Features, optional labels and where they came from."""

    X: np.ndarray
    y: np.ndarray | None
    feature_names: list[str] | None = None
    target_name: str | None = None
    zero_based: bool | None = None


def _detect_format(path: str, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    lower = path.lower()
    if lower.endswith(".npz"):
        return "npz"
    if lower.endswith((".csv", ".csv.gz", ".tsv")):
        return "csv"
    if lower.endswith((".svm", ".svmlight", ".libsvm", ".svmlight.gz", ".libsvm.gz")):
        return "svmlight"
    if os.path.isfile(path) and zipfile.is_zipfile(path):
        return "npz"
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
    except OSError:
        return "csv"  # the reader reports the real problem
    return "csv" if "," in first else "svmlight"


def _labels(values: Sequence[str]) -> np.ndarray:
    """Return the labels as int64 when every one is an integer, else as str."""
    try:
        return np.array([int(v) for v in values], dtype=np.int64)
    except ValueError:
        return np.array(values, dtype=str)


def _read_csv(path: str, *, target: str | None, need_target: bool,
              feature_names: list[str] | None = None,
              model_target: str | None = None) -> Table:
    """Read a CSV with a header row.

    Training (``need_target``): the target is ``target`` or the last column.
    Prediction: a column named ``model_target`` is dropped and, when the
    model knows its ``feature_names``, columns are matched by name.
    """
    opener: Any = open
    if path.endswith(".gz"):
        import gzip

        opener = gzip.open
    try:
        with opener(path, "rt", newline="", encoding="utf-8") as fh:
            rows = [(i, r) for i, r in enumerate(csv.reader(fh), start=1)
                    if r and any(cell.strip() for cell in r)]
    except UnicodeDecodeError as exc:
        raise CLIError(f"{path}: not a UTF-8 text CSV file ({exc.reason})") from None
    except csv.Error as exc:
        raise CLIError(f"{path}: unreadable CSV ({exc})") from None
    if not rows:
        raise CLIError(f"{path}: empty file (a CSV needs a header row)")
    header = [h.strip() for h in rows[0][1]]
    body = rows[1:]
    if not body:
        raise CLIError(f"{path}: no data rows after the header")
    for line, row in body:
        if len(row) != len(header):
            raise CLIError(f"{path}: line {line} has {len(row)} fields, "
                           f"the header has {len(header)}")
    index = {name: j for j, name in enumerate(header)}
    target_col: int | None = None
    if need_target:
        if target is None:
            target_col = len(header) - 1
        elif target in index:
            target_col = index[target]
        else:
            raise CLIError(f"{path}: no column named {target!r} for --target "
                           f"(columns: {', '.join(header)})")
        if len(header) < 2:
            raise CLIError(f"{path}: needs at least one feature column besides the target")
    elif model_target is not None and model_target in index:
        target_col = index[model_target]
    if feature_names is not None and not need_target:
        missing = [f for f in feature_names if f not in index]
        if missing:
            raise CLIError(f"{path}: missing feature columns {missing} "
                           f"that the model was trained on")
        cols = [index[f] for f in feature_names]
    else:
        cols = [j for j in range(len(header)) if j != target_col]
    names = [header[j] for j in cols]
    cells = [[row[j] for j in cols] for _, row in body]
    try:
        X = np.array(cells, dtype=np.float64)
    except ValueError:
        X = None
    if X is None or not np.all(np.isfinite(X)):
        # Slow path only to name the culprit.
        for line, row in body:
            for j in cols:
                try:
                    value = float(row[j])
                except ValueError:
                    raise CLIError(f"{path}: line {line}, column {header[j]!r}: "
                                   f"{row[j]!r} is not a number") from None
                if not np.isfinite(value):
                    raise CLIError(f"{path}: line {line}, column {header[j]!r}: "
                                   f"{row[j]!r} is not a finite number") from None
    assert X is not None
    X = X.reshape(len(body), len(cols))
    y = None
    if need_target:
        assert target_col is not None
        raw = [row[target_col].strip() for _, row in body]
        empty = [line for (line, _), v in zip(body, raw, strict=True) if v == ""]
        if empty:
            raise CLIError(f"{path}: line {empty[0]}: empty target {header[target_col]!r}")
        y = _labels(raw)
    return Table(X, y, names, header[target_col] if target_col is not None else None)


def _read_npz(path: str, *, need_target: bool) -> Table:
    try:
        with np.load(path, allow_pickle=False) as data:
            files = set(data.files)
            if "X" not in files:
                raise CLIError(f"{path}: no array named 'X' (found {sorted(files)})")
            X = data["X"]
            y = data["y"] if "y" in files else None
    except CLIError:
        raise
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as exc:  # zipfile, pickle refusal, truncated files
        raise CLIError(f"{path}: not a readable .npz file ({exc})") from None
    if X.ndim != 2:
        raise CLIError(f"{path}: X must be 2-D (rows x features), got shape {X.shape}")
    if X.dtype.kind not in "biuf":
        raise CLIError(f"{path}: X must be numeric, got dtype {X.dtype}")
    if need_target:
        if y is None:
            raise CLIError(f"{path}: no array named 'y' with the labels")
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise CLIError(f"{path}: y must have shape ({X.shape[0]},), got {y.shape}")
    return Table(np.asarray(X), y)


def _read_svmlight(path: str, *, need_target: bool, n_features: int | None = None,
                   zero_based: bool | None = None) -> Table:
    from sklearn.datasets import load_svmlight_file

    try:
        if zero_based is None:
            # Decide once, as "auto" would, and remember it in the model so
            # that a prediction file missing feature 0 is read the same way.
            Xs, y = load_svmlight_file(path, zero_based=True)
            zero_based = bool(Xs.nnz == 0 or Xs.indices.min() == 0)
            if not zero_based:
                Xs = Xs[:, 1:]
        else:
            Xs, y = load_svmlight_file(path, zero_based=zero_based, n_features=n_features)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path}: not a valid svmlight/libsvm file ({exc})") from None
    X = np.asarray(Xs.toarray())
    labels = None
    if need_target:
        labels = y.astype(np.int64) if np.all(y == np.round(y)) else y
    return Table(X, labels, zero_based=zero_based)


def _read(path: str, fmt: str, **kw: Any) -> Table:
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CLIError(f"{path}: is a folder, not a data file")
    kind = _detect_format(path, fmt)
    need_target = kw.pop("need_target")
    if kind == "npz":
        return _read_npz(path, need_target=need_target)
    if kind == "svmlight":
        return _read_svmlight(path, need_target=need_target,
                              n_features=kw.get("n_features"),
                              zero_based=kw.get("zero_based"))
    return _read_csv(path, target=kw.get("target"), need_target=need_target,
                     feature_names=kw.get("feature_names"),
                     model_target=kw.get("model_target"))


# ----------------------------------------------------------------- model
def _save_model(model: Any, path: str, extras: dict[str, np.ndarray]) -> None:
    """Write the model and ``extras`` in one .npz (:func:`fastsoftmax._persistence.save`)."""
    from ._persistence import save

    _check_output_folder(path)
    try:
        save(model, path, extras)
    except OSError as exc:
        raise CLIError(f"{path}: cannot write the model ({exc.strerror})") from None


def _check_output_folder(path: str) -> None:
    """Reject an output path whose folder is missing, before any work is done."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"{path}: folder {folder} does not exist")


def _load_model(path: str) -> tuple[Any, dict[str, np.ndarray]]:
    from . import SoftmaxRegression

    if not os.path.exists(path):
        raise CLIError(f"{path}: no such model file")
    from ._persistence import load

    try:
        model, extras = load(SoftmaxRegression, path, _CLI_KEYS)
    except (ValueError, OSError) as exc:
        raise CLIError(_one_line(str(exc)) if str(path) in str(exc)
                       else f"{path}: {_one_line(str(exc))}") from None
    n = model.n_features_in_
    for key in ("scaler_mean", "scaler_scale"):
        if key in extras and (extras[key].shape != (n,) or extras[key].dtype.kind != "f"):
            raise CLIError(f"{path}: {key} must be a float array of shape ({n},)")
    if "scaler_scale" in extras and not np.all(extras["scaler_scale"] > 0):
        raise CLIError(f"{path}: scaler_scale must be positive")
    if ("scaler_mean" in extras) != ("scaler_scale" in extras):
        raise CLIError(f"{path}: scaler_mean and scaler_scale must both be present")
    if "feature_names" in extras and extras["feature_names"].shape != (n,):
        raise CLIError(f"{path}: feature_names must have shape ({n},)")
    return model, extras


# -------------------------------------------------------------- helpers
def _one_line(text: str) -> str:
    return " ".join(text.split())


def _progress_wanted(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _option_error(exc: Exception) -> str:
    """Name the command-line option behind an estimator parameter error."""
    msg = _one_line(str(exc))
    for param, option in _PARAM_OPTIONS.items():
        if msg.startswith(param + " "):
            return f"{option}: {msg}"
    return msg


def _standardize(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = X.mean(axis=0, dtype=np.float64)
    scale = X.std(axis=0, dtype=np.float64)
    scale[~(scale > 0)] = 1.0  # constant columns: centre only, as StandardScaler does
    return mean, scale


def _apply_scaler(X: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return (X.astype(np.float64) - mean) / scale


# -------------------------------------------------------------- commands
def _cmd_train(args: argparse.Namespace) -> int:
    from . import SoftmaxRegression

    # A typo in -o is reported at once, not after a long fit.
    _check_output_folder(args.output)
    table = _read(args.data, args.format, need_target=True, target=args.target)
    if args.target is not None and table.feature_names is None:
        raise CLIError(f"--target applies to CSV input only; {args.data} is not CSV")
    X, y = table.X, table.y
    assert y is not None
    if X.shape[0] < 2:
        raise CLIError(f"{args.data}: needs at least 2 rows, has {X.shape[0]}")
    X_test = y_test = None
    if args.test_size is not None:
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
            X, X_test, y, y_test = train_test_split(X, y, test_size=size, stratify=y,
                                                    random_state=args.random_state)
        except ValueError:  # a class too small to stratify: split at random
            X, X_test, y, y_test = train_test_split(X, y, test_size=size,
                                                    random_state=args.random_state)
    extras: dict[str, np.ndarray] = {}
    if args.standardize:
        mean, scale = _standardize(X)
        X = _apply_scaler(X, mean, scale)
        if X_test is not None:
            X_test = _apply_scaler(X_test, mean, scale)
        extras["scaler_mean"] = mean
        extras["scaler_scale"] = scale
    if table.feature_names is not None:
        extras["feature_names"] = np.array(table.feature_names, dtype=str)
    if table.target_name is not None:
        extras["target_name"] = np.array(table.target_name)
    if table.zero_based is not None:
        extras["svmlight_zero_based"] = np.array(table.zero_based)
    dtype = np.dtype(args.dtype)
    X = np.ascontiguousarray(X, dtype=dtype)
    model = SoftmaxRegression(
        args.solver, alpha=args.alpha, max_iter=args.max_iter, tol=args.tol,
        n_iter_no_change=args.n_iter_no_change, batch_size=args.batch_size,
        learning_rate=args.learning_rate, eta0=args.eta0, momentum=args.momentum,
        early_stopping=args.early_stopping, validation_fraction=args.validation_fraction,
        random_state=args.random_state, n_threads=args.n_threads,
        class_weight=args.class_weight, verbose=1 if _progress_wanted(args.progress) else 0,
    )
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model.fit(X, y)
        except (ValueError, TypeError) as exc:
            raise CLIError(_option_error(exc)) from None
    elapsed = time.perf_counter() - start
    for w in caught:  # one line each, without the source line Python would print
        print(f"{PROG}: warning: {_one_line(str(w.message))}", file=sys.stderr)
    train_acc = float(np.mean(model.predict(X) == y))
    out = sys.stdout
    print(f"trained {args.solver} on {X.shape[0]} rows x {X.shape[1]} features, "
          f"{len(model.classes_)} classes ({dtype.name}) in {elapsed:.3g} s, "
          f"{model.n_iter_} {'epochs' if args.solver == 'sgd' else 'iterations'}", file=out)
    print(f"training accuracy: {train_acc:.4f}", file=out)
    if X_test is not None:
        X_test = np.ascontiguousarray(X_test, dtype=dtype)
        test_acc = float(np.mean(model.predict(X_test) == y_test))
        print(f"test accuracy: {test_acc:.4f} ({X_test.shape[0]} held-out rows)", file=out)
    _save_model(model, args.output, extras)
    print(f"model written to {args.output}", file=out)
    return 0


def _format_value(v: Any) -> str:
    return str(v.item() if hasattr(v, "item") else v)


def _cmd_predict(args: argparse.Namespace) -> int:
    if args.output not in (None, "-"):
        _check_output_folder(args.output)  # before any reading and predicting
    model, extras = _load_model(args.model)
    n = model.n_features_in_
    names = [str(s) for s in extras["feature_names"]] if "feature_names" in extras else None
    target = str(extras["target_name"]) if "target_name" in extras else None
    zero_based = (bool(extras["svmlight_zero_based"]) if "svmlight_zero_based" in extras
                  else None)
    fmt = _detect_format(args.data, args.format) if os.path.isfile(args.data) else args.format
    if fmt == "svmlight" and zero_based is None:
        zero_based = False  # svmlight's own convention when the model does not say
    table = _read(args.data, args.format, need_target=False, feature_names=names,
                  model_target=target, n_features=n, zero_based=zero_based)
    X = table.X
    if X.shape[1] != n:
        raise CLIError(f"{args.data}: {X.shape[1]} features, but the model {args.model} "
                       f"was trained on {n}")
    if "scaler_mean" in extras:
        X = _apply_scaler(X, extras["scaler_mean"], extras["scaler_scale"])
    X = np.ascontiguousarray(X, dtype=model.coef_.dtype)
    if not np.all(np.isfinite(X)):
        bad = int(np.flatnonzero(~np.all(np.isfinite(X), axis=1))[0])
        raise CLIError(f"{args.data}: row {bad + 1} has a NaN or infinite feature")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    try:
        result = model.predict_proba(X) if args.proba else model.predict(X)
    except (ValueError, FloatingPointError) as exc:
        # For instance logits that overflow the model's dtype on this data.
        raise CLIError(f"{args.data}: cannot predict with {args.model}: "
                       f"{_one_line(str(exc))}") from None
    if args.proba:
        writer.writerow([_format_value(c) for c in model.classes_])
        digits = "%.9g" if result.dtype == np.float32 else "%.17g"
        writer.writerows([[digits % v for v in row] for row in result.tolist()])
    else:
        writer.writerow([target or "label"])
        writer.writerows([[_format_value(v)] for v in result.tolist()])
    text = buf.getvalue()
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        try:
            with open(args.output, "w", newline="", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise CLIError(f"{args.output}: cannot write ({exc.strerror})") from None
        print(f"{X.shape[0]} {'probability rows' if args.proba else 'predictions'} "
              f"written to {args.output}", file=sys.stderr)
    return 0


def _speedup(m: int, n: int, k: int, dtype: Any, repeats: int, seed: int,
             quick: bool = False) -> tuple[float, float]:
    """Median seconds of (fused, reference) loss_and_grad on a random problem."""
    from . import loss_and_grad, reference
    from .bench import interleaved

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n), dtype=np.float64).astype(dtype)
    y = rng.integers(0, k, size=m)
    W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
    b = np.zeros(k, dtype=dtype)
    # Timed alternately with a pause before each call, as `fastsoftmax bench`
    # does: OpenBLAS's threads keep spinning for a while after the
    # reference's matrix products and would take a core from the fused
    # kernel's threads (timed back to back, the MNIST-shaped ratio halved).
    fused, plain = interleaved([lambda: loss_and_grad(X, y, W, b, alpha=1e-4),
                                lambda: reference.loss_and_grad(X, y, W, b, alpha=1e-4)],
                               repeats, settle=0.05 if quick else 0.2)
    return fused, plain


def _fit_solvers(X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
                 quick: bool, verbose: int) -> dict[str, tuple[Any, float, float, str]]:
    from sklearn.exceptions import ConvergenceWarning

    from . import SoftmaxRegression

    settings: dict[str, dict[str, Any]] = {
        "lbfgs": dict(max_iter=40 if quick else 200),
        "sgd": dict(max_iter=5 if quick else 30, batch_size=32, eta0=0.05),
        "bgd": dict(max_iter=40 if quick else 300, eta0=0.5),
    }
    results = {}
    for solver, params in settings.items():
        # Untimed warm-up on a few rows, so the time shown is training, not JIT compiling.
        few = np.concatenate([np.flatnonzero(y == c)[:3] for c in np.unique(y)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            SoftmaxRegression(solver, max_iter=2, random_state=0, **{
                key: v for key, v in params.items() if key != "max_iter"
            }).fit(X[few], y[few])
        model = SoftmaxRegression(solver, alpha=1e-4, random_state=0, verbose=verbose,
                                  **params)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            start = time.perf_counter()
            model.fit(X, y)
            elapsed = time.perf_counter() - start
        note = ("max_iter reached" if any(issubclass(w.category, ConvergenceWarning)
                                          for w in caught) else "converged")
        for w in caught:
            if not issubclass(w.category, ConvergenceWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        acc = float(np.mean(model.predict(X_test) == y_test))
        results[solver] = (model, acc, elapsed, note)
    return results


def _print_results(title: str, results: dict[str, tuple[Any, float, float, str]]) -> None:
    print(title)
    print(f"  {'solver':<7} {'test accuracy':>13} {'train time':>11} {'iterations':>11}")
    for solver, (model, acc, elapsed, note) in results.items():
        unit = "epochs" if solver == "sgd" else "iter."
        print(f"  {solver:<7} {acc:>13.4f} {elapsed:>9.3f} s {model.n_iter_:>5} {unit:<6} "
              f"({note})")


def _cmd_demo(args: argparse.Namespace) -> int:
    from sklearn.model_selection import train_test_split

    from .datasets import load_digits, make_blobs

    try:
        import matplotlib  # noqa: F401

        plots = True
    except ImportError:
        plots = False
    quick = args.quick
    verbose = 1 if _progress_wanted(args.progress) else 0

    X, y = load_digits()
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    mean, scale = _standardize(Xtr)
    Xtr, Xte = _apply_scaler(Xtr, mean, scale), _apply_scaler(Xte, mean, scale)
    digits = _fit_solvers(Xtr, ytr, Xte, yte, quick, verbose)
    _print_results(f"digits: {Xtr.shape[0]} training / {Xte.shape[0]} test rows, "
                   f"{X.shape[1]} features (8 x 8 pixels, standardised), 10 classes", digits)

    Xb, yb = make_blobs(random_state=0)
    Btr, Bte, btr, bte = train_test_split(Xb, yb, test_size=0.25, stratify=yb, random_state=0)
    toy = _fit_solvers(Btr, btr, Bte, bte, quick, verbose)
    print()
    _print_results("toy data of the lecture notes: 3 Gaussian classes in 2-D, means (2,2), "
                   f"(8,3), (3,6); {Btr.shape[0]} training / {Bte.shape[0]} test rows", toy)

    repeats = 3 if quick else 5
    problems = [("digits-sized", Xtr.shape[0], X.shape[1], 10, np.float64),
                ("MNIST-shaped", 10_000 if quick else 60_000, 784, 10, np.float32)]
    from numba import get_num_threads

    print()
    print(f"fused fastsoftmax.loss_and_grad vs fastsoftmax.reference.loss_and_grad "
          f"(median of {repeats}, timed alternately after a warm-up; "
          f"{get_num_threads()} Numba threads)")
    for i, (name, m, n, k, dt) in enumerate(problems):
        fused, plain = _speedup(m, n, k, dt, repeats, seed=i, quick=quick)
        print(f"  {name:<13} {m:>6} x {n:>3} x {k:<2} {np.dtype(dt).name}: "
              f"{fused * 1e3:8.2f} ms vs {plain * 1e3:8.2f} ms  -> {plain / fused:5.1f}x")

    print()
    if not plots:
        print("plots skipped: matplotlib is not installed (pip install fastsoftmax[plot])")
        return 0
    from . import plot

    os.makedirs(args.out, exist_ok=True)
    written = []

    def save(fig: Any, name: str) -> None:
        written.append(plot.save(fig, os.path.join(args.out, name)))

    def curves(results: dict[str, tuple[Any, float, float, str]], title: str) -> Any:
        fig = None
        for model, *_ in results.values():
            fig = plot.loss_curve(model, ax=None if fig is None else fig.axes[0])
        assert fig is not None
        fig.axes[0].set_xlabel("iteration (lbfgs, bgd) / epoch (sgd)")
        fig.axes[0].set_title(title)
        return fig

    best = digits["lbfgs"][0]
    save(curves(digits, "digits: training loss"), "digits_loss_curves.png")
    save(plot.confusion_matrix(best, Xte, yte), "digits_confusion_matrix.png")
    save(plot.class_weights(best, (8, 8)), "digits_class_weights.png")
    save(plot.decision_regions(toy["lbfgs"][0], Xb, yb), "toy_decision_regions.png")
    save(curves(toy, "toy data: training loss"), "toy_loss_curves.png")
    print(f"plots written to {args.out}{os.sep}: "
          + ", ".join(os.path.basename(p) for p in written))
    return 0


def _run_bench(argv: list[str]) -> int:
    """``fastsoftmax bench``: hand every argument over to :func:`fastsoftmax.bench.main`."""
    bench = importlib.import_module("fastsoftmax.bench")
    result = bench.main(argv)
    return 0 if result is None else int(result)


_BENCH_HELP = ("Time fastsoftmax against the plain NumPy implementations of "
               "fastsoftmax.reference (fused loss and gradient, row-wise softmax, one SGD "
               "epoch) on a few standard shapes and print a table of medians and speed-ups. "
               "Options: --quick (small shapes, a few seconds), --rounds R (timed rounds per "
               "contender), --threads T (Numba threads); 'fastsoftmax bench --help' "
               "describes them.")


# ---------------------------------------------------------------- parser
class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("auto", "csv", "npz", "svmlight"), default="auto",
                   help="input format; auto: from the extension (.csv, .npz, .svm/.libsvm), "
                        "else .npz if it is a zip, CSV if the first line has a comma, "
                        "else svmlight")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the ``fastsoftmax`` command."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=_Formatter,
        description="Softmax (multinomial logistic) regression on multicore CPUs.",
        epilog="Run 'fastsoftmax COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    progress_help = ("show a progress bar with the current loss on stderr; default: only "
                     "when stderr is a terminal")

    demo = sub.add_parser(
        "demo", formatter_class=_Formatter, help="train on digits and the toy data, show plots",
        description="Train every solver (lbfgs, sgd, bgd) on scikit-learn's digits and on the "
                    "lecture notes' toy data (3 Gaussian classes in 2-D), print test accuracy "
                    "and training time, measure the fused kernel's speed-up over the plain "
                    "NumPy reference, and write plots (needs matplotlib: "
                    "pip install fastsoftmax[plot]). Nothing is downloaded.")
    demo.add_argument("--out", default="fastsoftmax-demo", metavar="DIR",
                      help="folder for the plots (created if needed)")
    demo.add_argument("--quick", action="store_true",
                      help="fewer iterations and a smaller timing problem (a few seconds)")
    demo.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help=progress_help)
    demo.set_defaults(func=_cmd_demo)

    train = sub.add_parser(
        "train", formatter_class=_Formatter, help="fit a model to a data file",
        description="Fit a softmax regression model to DATA and write it to MODEL.npz.\n\n"
                    "DATA: CSV with a header row (target column: --target, default the last; "
                    "labels may be strings), .npz with arrays X (rows x features) and y, or "
                    "svmlight/libsvm text.")
    train.add_argument("data", metavar="DATA", help="training data file")
    train.add_argument("-o", "--output", required=True, metavar="MODEL.npz",
                       help="where to write the model")
    train.add_argument("--target", metavar="COLUMN", default=None,
                       help="CSV: name of the label column (default: the last column)")
    _add_data_args(train)
    train.add_argument("--test-size", type=float, default=None, metavar="FRACTION",
                       help="hold out this fraction (or, if >= 1, this many rows) for a test "
                            "accuracy; stratified by class when possible")
    train.add_argument("--standardize", action="store_true",
                       help="scale each feature to mean 0 and variance 1 (statistics from the "
                            "training rows, saved in the model and applied by predict)")
    train.add_argument("--solver", choices=("lbfgs", "sgd", "bgd"), default="lbfgs",
                       help="lbfgs: quasi-Newton, no learning rate; sgd: mini-batch SGD with "
                            "momentum; bgd: full-batch gradient descent")
    train.add_argument("--alpha", type=float, default=1e-4, help="L2 penalty strength on W")
    train.add_argument("--max-iter", type=int, default=200,
                       help="iterations (lbfgs, bgd) or epochs (sgd)")
    train.add_argument("--tol", type=float, default=1e-4,
                       help="stopping tolerance (gradient for lbfgs, loss improvement else)")
    train.add_argument("--n-iter-no-change", type=int, default=5,
                       help="sgd/bgd: stop after this many iterations without improvement")
    train.add_argument("--batch-size", type=int, default=64, help="sgd: rows per mini-batch")
    train.add_argument("--learning-rate", choices=("adaptive", "constant", "invscaling"),
                       default="adaptive", help="sgd/bgd: step-size schedule")
    train.add_argument("--eta0", type=float, default=0.1, help="sgd/bgd: initial step size")
    train.add_argument("--momentum", type=float, default=0.9,
                       help="sgd/bgd: momentum in [0, 1)")
    train.add_argument("--early-stopping", action="store_true",
                       help="hold out --validation-fraction of the training rows and stop when "
                            "their loss stops improving")
    train.add_argument("--validation-fraction", type=float, default=0.1,
                       help="share of training rows held out by --early-stopping")
    train.add_argument("--class-weight", choices=("balanced",), default=None,
                       help="balanced: weight classes inversely to their frequency")
    train.add_argument("--random-state", type=int, default=None, metavar="SEED",
                       help="seed for shuffling and the splits (same seed, same model)")
    train.add_argument("--n-threads", type=int, default=None,
                       help="Numba threads (default: Numba's setting, usually all cores)")
    train.add_argument("--dtype", choices=("float32", "float64"), default="float64",
                       help="precision to train in (float32 halves memory traffic)")
    train.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help=progress_help)
    train.set_defaults(func=_cmd_train)

    predict = sub.add_parser(
        "predict", formatter_class=_Formatter, help="predict labels or probabilities",
        description="Predict the class of every row of DATA with a model written by "
                    "'fastsoftmax train' and write CSV: a header line (the target's name, or "
                    "'label') then one label per row, or with --proba one column per class "
                    "(header: the class names). DATA is in any format train reads; for CSV the "
                    "columns are matched by name and the training target column is ignored.")
    predict.add_argument("model", metavar="MODEL.npz", help="model file")
    predict.add_argument("data", metavar="DATA", help="data file")
    predict.add_argument("-o", "--output", default=None, metavar="OUT.csv",
                         help="output file (default: standard output)")
    predict.add_argument("--proba", action="store_true",
                         help="write class probabilities instead of labels")
    _add_data_args(predict)
    predict.set_defaults(func=_cmd_predict)

    sub.add_parser("bench", help="benchmark the kernels (fastsoftmax bench --help)",
                   description=_BENCH_HELP, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fastsoftmax`` command; returns the exit status.

    argparse exits with status 2 (``SystemExit``) on bad usage.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list and args_list[0] == "bench":
            return _run_bench(args_list[1:])
        args = build_parser().parse_args(args_list)
        return int(args.func(args))
    except CLIError as exc:
        print(f"{PROG}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"{PROG}: error: {where}{_one_line(exc.strerror or str(exc))}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(f"{PROG}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
