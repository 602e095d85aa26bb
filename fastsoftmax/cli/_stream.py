"""``fastsoftmax train --chunksize ROWS``: training on a file bigger than memory.

The file is read ROWS rows at a time and never whole:

1. A first pass finds the classes and counts them. It reads the label
   column only, or every column with ``--standardize``, whose statistics
   it accumulates (:class:`~fastsoftmax.cli._common.Moments`: float64,
   per-chunk two-pass moments merged pairwise). ``--classes`` makes the
   pass unnecessary unless ``--standardize`` or ``--class-weight
   balanced`` (weights from the counts) needs it.
2. ``--epochs`` passes call :meth:`SoftmaxRegression.partial_fit` on each
   chunk in file order: one epoch of mini-batch SGD over the chunk's rows,
   momentum and step size carried from chunk to chunk. partial_fit cannot
   see a stream stall, so "adaptive" (the default ``--learning-rate``) is
   done here, with chunks for epochs (:class:`_AdaptiveStep`); without it
   the constant step of 0.1 leaves the model about 3 points of accuracy
   short of an in-memory fit on 5 million rows (50 features, 10 classes).

What is held at any time: one chunk as pandas or pyarrow parsed it, its
float64 copy and the model, whatever the file's size.

Only CSV, Parquet and Feather are read in chunks. svmlight and sparse
``.npz`` files are refused with a clear error rather than supported: they
are read whole and kept sparse (:mod:`fastsoftmax.cli._sparse_io`), which
costs memory for their stored entries only.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from types import TracebackType
from typing import Any

import numpy as np

from . import _io
from ._commands import estimator, model_extras, option_error, report_warnings
from ._common import CLIError, Moments, progress_wanted, scale_in_place
from ._tables import TableSource


class _Bar:
    """A tqdm bar on stderr over one pass of ``source`` (bytes or rows), or nothing."""

    def __init__(self, source: TableSource, wanted: bool, desc: str) -> None:
        self._source = source
        self._shown = 0
        self._bar: Any = None
        if wanted:
            from tqdm import tqdm

            self._bar = tqdm(total=source.total, desc=desc, unit=source.unit,
                             unit_scale=True, file=sys.stderr, dynamic_ncols=True, leave=True)

    def update(self, loss: float | None = None) -> None:
        if self._bar is None:
            return
        if loss is not None:
            self._bar.set_postfix_str(f"loss={loss:.6g}", refresh=False)
        position = self._source.position()
        self._bar.update(position - self._shown)
        self._shown = position

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.close()


class _AdaptiveStep:
    """``learning_rate="adaptive"`` over a stream, with chunks in the place of epochs.

    As :meth:`SoftmaxRegression.fit` does with its epochs' losses: when the
    loss of ``n_iter_no_change`` consecutive chunks has not improved on the
    best by ``tol``, eta0 is divided by 5 (``set_params``, which the SGD
    state honours), down to 1e-6 of its start. The model gets its original
    eta0 back before it is saved, so the file holds the options given.
    """

    def __init__(self, model: Any) -> None:
        self.on = model.learning_rate == "adaptive"
        self.eta0 = model.eta0
        self.best = np.inf
        self.count = 0
        self.cuts = 0

    def update(self, model: Any, loss: float) -> None:
        if not self.on:
            return
        self.count = 0 if loss < self.best - model.tol else self.count + 1
        self.best = min(self.best, loss)
        if self.count >= model.n_iter_no_change and 5.0 ** -(self.cuts + 1) >= 1e-6:
            model.set_params(eta0=model.eta0 / 5)
            self.count = 0
            self.cuts += 1

    def restore(self, model: Any) -> None:
        model.set_params(eta0=self.eta0)


def _given_classes(text: str) -> np.ndarray:
    pieces = [p.strip() for p in text.split(",")]
    if len(pieces) < 2 or not all(pieces):
        raise CLIError(f"--classes: {text!r} is not a comma-separated list of at least "
                       "2 labels")
    return np.unique(_io.normalize_labels(np.array(pieces)))


def _count_labels(source: TableSource, rows: int, features: list[str], target: str,
                  moments: Moments | None, wanted: bool) -> tuple[np.ndarray, np.ndarray]:
    """Run the first pass: return (each label as stored, its count); fill ``moments``."""
    counts: dict[Any, int] = {}
    with _Bar(source, wanted, "pass 1: classes") as bar:
        for chunk in source.chunks(rows, None if moments is None else features, target):
            assert chunk.y is not None
            if moments is not None:
                assert chunk.X is not None
                moments.add(chunk.X)
            values, n = np.unique(chunk.y, return_counts=True)
            for value, count in zip(values.tolist(), n.tolist(), strict=True):
                counts[value] = counts.get(value, 0) + count
            bar.update()
    if not counts:
        raise CLIError(f"{source.path}: no data rows")
    return np.array(list(counts)), np.array(list(counts.values()), dtype=np.float64)


def _classes_and_weights(args: argparse.Namespace, source: TableSource, features: list[str],
                         target: str, moments: Moments | None,
                         ) -> tuple[np.ndarray, dict[Any, float] | None]:
    given = None if args.classes is None else _given_classes(args.classes)
    balanced = args.class_weight == "balanced"
    if given is not None and moments is None and not balanced:
        return given, None
    found, counts = _count_labels(source, args.chunksize, features, target, moments,
                                  progress_wanted(args.progress))
    classes = given if given is not None else np.unique(_io.normalize_labels(found))
    coded, bad = _io.encode_labels(found, classes)
    if bad >= 0:
        raise CLIError(f"{source.path}: label {found[bad].item()!r} of column {target!r} is "
                       f"not one of --classes {classes.tolist()}")
    if not balanced:
        return classes, None
    # "balanced" as scikit-learn computes it, m / (k * count), from the
    # whole file's counts: one chunk's counts are not the file's.
    per_class = np.bincount(np.searchsorted(classes, coded), weights=counts,
                            minlength=len(classes))
    weights = np.where(per_class > 0, counts.sum() / (len(classes) * np.maximum(per_class, 1)),
                       1.0)
    return classes, dict(zip(classes.tolist(), weights.tolist(), strict=True))


def train_in_chunks(args: argparse.Namespace, kind: str) -> int:
    """Train with partial_fit, ``args.chunksize`` rows at a time, ``args.epochs`` times."""
    if kind not in _io.TABLE_FORMATS:
        raise CLIError(f"--chunksize reads CSV, Parquet and Feather files; {args.data} is "
                       f"{kind}")
    source = _io.open_source(args.data, kind)
    features, target = _io.select_columns(source, need_target=True, target=args.target)
    assert target is not None
    start = time.perf_counter()
    moments = Moments(len(features)) if args.standardize else None
    classes, class_weight = _classes_and_weights(args, source, features, target, moments)
    if len(classes) < 2:
        raise CLIError(f"{args.data}: needs at least 2 classes, found {classes.tolist()}")
    first_pass = time.perf_counter() - start
    scaler = None if moments is None else moments.scaler()
    dtype = np.dtype(args.dtype)
    model = estimator(args, solver="sgd", class_weight=class_weight, verbose=0)
    step = _AdaptiveStep(model)
    wanted = progress_wanted(args.progress)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(1, args.epochs + 1):
            rows = correct = predicted = 0
            loss = 0.0
            with _Bar(source, wanted, f"epoch {epoch}/{args.epochs}") as bar:
                for chunk in source.chunks(args.chunksize, features, target):
                    assert chunk.X is not None and chunk.y is not None
                    X = chunk.X
                    if scaler is not None:
                        scale_in_place(X, *scaler)
                    X = np.ascontiguousarray(X, dtype=dtype)
                    y, bad = _io.encode_labels(chunk.y, classes)
                    if bad >= 0:
                        raise CLIError(
                            f"{args.data}: {source.where(chunk.start + bad)}, column "
                            f"{target!r}: label {chunk.y[bad].item()!r} is not one of the "
                            f"classes {classes.tolist()}")
                    if epoch == args.epochs and hasattr(model, "classes_"):
                        # Progressive validation: each chunk is predicted
                        # before the model has trained on it (in this epoch).
                        correct += int(np.count_nonzero(model.predict(X) == y))
                        predicted += len(y)
                    try:
                        model.partial_fit(X, y, classes=classes)
                    except (ValueError, TypeError) as exc:
                        raise CLIError(option_error(exc)) from None
                    rows += len(y)
                    loss += model.loss_curve_[-1] * len(y)
                    step.update(model, model.loss_curve_[-1])
                    bar.update(loss / rows)
            if rows == 0:
                raise CLIError(f"{args.data}: no data rows")
    elapsed = time.perf_counter() - start
    step.restore(model)
    report_warnings(list({str(w.message): w for w in caught}.values()))
    print(f"trained sgd on {rows} rows x {len(features)} features, {len(classes)} classes "
          f"({dtype.name}) in {elapsed:.3g} s ({first_pass:.3g} s of it the first pass), "
          f"{args.epochs} {'epoch' if args.epochs == 1 else 'epochs'} in chunks of "
          f"{args.chunksize} rows" + (f", step divided by 5 {step.cuts} times (adaptive)"
                                      if step.cuts else ""))
    accuracy = f"{correct / predicted:.4f} on {predicted} rows" if predicted else "n/a"
    print(f"last epoch: mean loss {loss / rows:.6g}, progressive accuracy {accuracy} "
          "(each chunk predicted before training on it)")
    _io.save_model(model, args.output, model_extras(features, target, scaler))
    print(f"model written to {args.output}")
    return 0
