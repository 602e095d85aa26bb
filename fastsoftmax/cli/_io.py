"""Reading data files, reading and writing model files, writing predictions.

Formats: CSV (plain or gzip), Parquet and Feather through
:mod:`fastsoftmax.cli._tables`; ``.npz`` with a dense array ``X`` or a
scipy.sparse matrix (``scipy.sparse.save_npz``'s arrays), labels ``y``;
svmlight/libsvm text through scikit-learn. Sparse files stay sparse
(:mod:`fastsoftmax.cli._sparse_io`): ``Table.X`` is then a
``scipy.sparse.csr_matrix``, never densified. Model files are
:func:`fastsoftmax._persistence.save`'s ``.npz`` plus the extra arrays
named in :data:`CLI_KEYS` (see the package docstring).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from . import _sparse_io
from ._common import CLIError, one_line
from ._tables import ArrowSource, CSVSource, TableSource, is_gzip

CLI_KEYS = ("scaler_mean", "scaler_scale", "feature_names", "target_name",
            "svmlight_zero_based")
TABLE_FORMATS = ("csv", "parquet", "feather")
# Rows of probabilities formatted at a time: bounds the text held in memory.
_WRITE_ROWS = 1 << 16
FORMATS = ("auto", "csv", "parquet", "feather", "npz", "svmlight")
_EXTENSIONS = {
    ".npz": "npz", ".csv": "csv", ".csv.gz": "csv", ".tsv": "csv", ".parquet": "parquet",
    ".pq": "parquet", ".feather": "feather", ".arrow": "feather", ".ipc": "feather",
    ".svm": "svmlight", ".svmlight": "svmlight", ".libsvm": "svmlight",
    ".svmlight.gz": "svmlight", ".libsvm.gz": "svmlight",
}

# A block's transformation on its way into the data: (features, first row) -> features.
Transform = Callable[[np.ndarray, int], np.ndarray]


@dataclass
class Table:
    """Features (an array, or a CSR matrix for sparse files), optional labels, origin."""

    X: Any
    y: np.ndarray | None
    feature_names: list[str] | None = None
    target_name: str | None = None
    zero_based: bool | None = None


# ------------------------------------------------------------------ formats
def detect_format(path: str, fmt: str) -> str:
    """``fmt``, or for "auto" the format named by the extension, else by the content."""
    if fmt != "auto":
        return fmt
    lower = path.lower()
    for ext in sorted(_EXTENSIONS, key=len, reverse=True):
        if lower.endswith(ext):
            return _EXTENSIONS[ext]
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return "csv"  # the reader reports the real problem
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1"):
        return "feather"
    if zipfile.is_zipfile(path):
        return "npz"
    if is_gzip(path):
        return "csv"
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
    return "csv" if "," in first else "svmlight"


def check_data_path(path: str) -> None:
    """Report a missing file or a folder before anything else is done."""
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CLIError(f"{path}: is a folder, not a data file")


def open_source(path: str, kind: str) -> TableSource:
    """Return the chunked reader of a CSV, Parquet or Feather file."""
    return CSVSource(path) if kind == "csv" else ArrowSource(path, kind)


def select_columns(source: TableSource, *, need_target: bool, target: str | None = None,
                   feature_names: list[str] | None = None, model_target: str | None = None,
                   ) -> tuple[list[str], str | None]:
    """(feature columns, target column) of a table.

    Training (``need_target``): the target is ``target`` or the last column,
    every other column a feature. Prediction: a column named
    ``model_target`` is left out and, when the model knows its
    ``feature_names``, the features are those columns, by name.
    """
    path, header = source.path, source.columns
    chosen: str | None = None
    if need_target:
        if target is None:
            chosen = header[-1]
        elif target in header:
            chosen = target
        else:
            raise CLIError(f"{path}: no column named {target!r} for --target "
                           f"(columns: {', '.join(header)})")
        if len(header) < 2:
            raise CLIError(f"{path}: needs at least one feature column besides the target")
        return [c for c in header if c != chosen], chosen
    if feature_names is not None:
        missing = [f for f in feature_names if f not in header]
        if missing:
            raise CLIError(f"{path}: missing feature columns {missing} "
                           f"that the model was trained on")
        return list(feature_names), None
    return [c for c in header if c != model_target], None


# ------------------------------------------------------------------- labels
def normalize_labels(values: np.ndarray) -> np.ndarray:
    """Labels as int64 when every one is an integer (text or number), else as they are.

    Text that is not all integers stays text (``str``); floats that are not
    all integral stay floats.
    """
    values = np.asarray(values)
    if values.dtype.kind in "OUS":
        try:
            return values.astype(np.int64)
        except (ValueError, TypeError, OverflowError):
            return values.astype(str)
    if values.dtype.kind in "biu":
        return values.astype(np.int64)
    if values.dtype.kind == "f" and np.all(np.isfinite(values)) \
            and np.all(values == np.round(values)):
        return values.astype(np.int64)
    return values


def encode_labels(raw: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, int]:
    """(``raw`` in the type of ``classes``, index of the first label not a class or -1)."""

    def convert(values: np.ndarray) -> np.ndarray:
        if classes.dtype.kind == "U":
            return values.astype(str)
        if classes.dtype.kind in "iu" and values.dtype.kind == "f" \
                and not np.all(values == np.round(values)):
            raise ValueError("not integral")
        return values.astype(classes.dtype)

    try:
        y = convert(raw)
    except (ValueError, TypeError, OverflowError):
        for i in range(len(raw)):
            try:
                convert(raw[i:i + 1])
            except (ValueError, TypeError, OverflowError):
                return raw, i
        raise
    known = np.isin(y, classes)
    return y, (-1 if known.all() else int(np.argmin(known)))


# ------------------------------------------------------------------ reading
def read(path: str, fmt: str, *, need_target: bool, target: str | None = None,
         feature_names: list[str] | None = None, model_target: str | None = None,
         n_features: int | None = None, zero_based: bool | None = None,
         dtype: Any = np.float64, transform: Transform | None = None) -> Table:
    """Read a whole data file; X comes back C-contiguous in ``dtype``, or CSR.

    svmlight files and sparse ``.npz`` files give a ``scipy.sparse``
    CSR matrix in ``dtype`` (never densified); for svmlight files
    ``n_features`` is the least width (trailing empty columns) and
    ``zero_based`` None decides from the file. ``transform`` is applied to
    the features as they are read (to a CSV, Parquet or Feather file one
    block of rows at a time, so only the result is ever held in full); it
    receives the CSR matrix of a sparse file.
    """
    check_data_path(path)
    kind = detect_format(path, fmt)
    if kind in TABLE_FORMATS:
        source = open_source(path, kind)
        features, chosen = select_columns(source, need_target=need_target, target=target,
                                          feature_names=feature_names,
                                          model_target=model_target)
        X, y = read_rows(source, features, chosen, dtype, transform)
        present = model_target if model_target in source.columns else None
        return Table(X, None if y is None else normalize_labels(y), features,
                     chosen if need_target else present)
    if kind == "npz":
        table = _read_npz(path, need_target=need_target)
    else:
        table = _read_svmlight(path, need_target=need_target, n_features=n_features,
                               zero_based=zero_based)
    X = table.X if transform is None else transform(table.X, 0)
    table.X = (_sparse_io.as_dtype(X, dtype) if _sparse_io.is_sparse(X)
               else np.ascontiguousarray(X, dtype=dtype))
    return table


def read_rows(source: TableSource, features: list[str], target: str | None, dtype: Any,
              transform: Transform | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Read every row of ``source`` into one array.

    In one read where the source has a faster whole-file reader (pyarrow's
    for CSV), else block by block.

    The first block becomes the array (a file read in one block, such as a
    Parquet file of one row group, is never copied). At the second, an
    array is allocated for the number of rows estimated then, and grown by
    half whenever the estimate falls short; what it holds beyond the last
    row is never written, so never resident.
    """
    whole = source.read_all(features, target) if transform is None else None
    if whole is not None:
        assert whole.X is not None
        if whole.X.shape[0] == 0:
            raise CLIError(f"{source.path}: no data rows")
        return np.ascontiguousarray(whole.X, dtype=dtype), whole.y
    buf: np.ndarray | None = None
    m = 0
    labels = []
    for chunk in source.chunks(source.whole_read_rows(len(features)), features, target):
        assert chunk.X is not None
        block = chunk.X if transform is None else transform(chunk.X, chunk.start)
        end = m + block.shape[0]
        if buf is None:
            buf = np.ascontiguousarray(block, dtype=dtype)
        else:
            if end > buf.shape[0]:
                capacity = max(end, source.estimate_rows(end), buf.shape[0] * 3 // 2)
                grown = np.empty((capacity, block.shape[1]), dtype=dtype)
                grown[:m] = buf[:m]
                buf = grown
            buf[m:end] = block
        m = end
        if chunk.y is not None:
            labels.append(chunk.y)
    if buf is None or m == 0:
        raise CLIError(f"{source.path}: no data rows")
    return buf[:m], (np.concatenate(labels) if target is not None else None)


def _read_npz(path: str, *, need_target: bool) -> Table:
    """Read a dense ``X`` or a scipy.sparse matrix (kept sparse), and the labels ``y``."""
    try:
        with np.load(path, allow_pickle=False) as data:
            files = set(data.files)
            sparse = "X" not in files and _sparse_io.has_sparse_arrays(files)
            if "X" not in files and not sparse:
                raise CLIError(f"{path}: neither a dense array named 'X' nor a scipy.sparse "
                               "matrix (arrays data, indices, indptr, shape, format, as "
                               f"scipy.sparse.save_npz writes); found {sorted(files)}")
            X = None if sparse else data["X"]
            y = data["y"] if "y" in files else None
    except CLIError:
        raise
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as exc:  # zipfile, pickle refusal, truncated files
        raise CLIError(f"{path}: not a readable .npz file ({exc})") from None
    if X is None:
        X = _sparse_io.read_sparse_npz(path)
    else:
        if X.ndim != 2:
            raise CLIError(f"{path}: X must be 2-D (rows x features), got shape {X.shape}")
        if X.dtype.kind not in "biuf":
            raise CLIError(f"{path}: X must be numeric, got dtype {X.dtype}")
        X = np.asarray(X)
    if need_target:
        if y is None:
            how = (" (for a sparse X: np.savez(path, data=X.data, indices=X.indices, "
                   "indptr=X.indptr, shape=X.shape, format=X.format, y=y))" if sparse else "")
            raise CLIError(f"{path}: no array named 'y' with the labels{how}")
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise CLIError(f"{path}: y must have shape ({X.shape[0]},), got {y.shape}")
    return Table(X, y)


def _read_svmlight(path: str, *, need_target: bool, n_features: int | None = None,
                   zero_based: bool | None = None) -> Table:
    """svmlight/libsvm text as CSR; ``n_features`` widens it (see _sparse_io)."""
    X, y, zero_based = _sparse_io.read_svmlight(path, n_features=n_features,
                                                zero_based=zero_based)
    return Table(X, normalize_labels(y) if need_target else None, zero_based=zero_based)


# ------------------------------------------------------------------- models
def check_output_folder(path: str) -> None:
    """Reject an output path whose folder is missing, before any work is done."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"{path}: folder {folder} does not exist")


def save_model(model: Any, path: str, extras: dict[str, np.ndarray]) -> None:
    """Write the model and ``extras`` in one .npz (:func:`fastsoftmax._persistence.save`)."""
    from .._persistence import save

    check_output_folder(path)
    try:
        save(model, path, extras)
    except OSError as exc:
        raise CLIError(f"{path}: cannot write the model ({exc.strerror})") from None


def load_model(path: str) -> tuple[Any, dict[str, np.ndarray]]:
    """Return the model in ``path`` and the extra arrays the command line uses, checked."""
    from .._model import SoftmaxModel  # SoftmaxRegression less scikit-learn's import
    from .._persistence import load

    if not os.path.exists(path):
        raise CLIError(f"{path}: no such model file")
    try:
        model, extras = load(SoftmaxModel, path, CLI_KEYS)
    except (ValueError, OSError) as exc:
        raise CLIError(one_line(str(exc)) if str(path) in str(exc)
                       else f"{path}: {one_line(str(exc))}") from None
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


# -------------------------------------------------------------- predictions
@contextlib.contextmanager
def output(path: str | None) -> Iterator[IO[str]]:
    """Give a text handle on ``path``, or on standard output for None or "-".

    A regular file is written under a temporary name beside it and renamed
    when the block succeeds, so a failure leaves no output (and an older
    file of that name untouched). Anything else (a pipe, a device) is
    written in place.
    """
    if path in (None, "-"):
        yield sys.stdout
        return
    assert path is not None
    atomic = not os.path.exists(path) or os.path.isfile(path)
    target = f"{path}.{os.getpid()}.partial" if atomic else path
    try:
        fh = open(target, "w", newline="", encoding="utf-8")
    except OSError as exc:
        raise CLIError(f"{path}: cannot write ({exc.strerror})") from None
    try:
        with fh:
            yield fh
        if atomic:
            os.replace(target, path)
    except BaseException:
        if atomic:
            with contextlib.suppress(OSError):
                os.remove(target)
        raise


def _format_value(v: Any) -> str:
    return str(v.item() if hasattr(v, "item") else v)


def write_predictions(fh: IO[str], result: np.ndarray, *, classes: np.ndarray,
                      name: str, proba: bool, header: bool) -> None:
    """Labels (each one of ``classes``) under the header ``name``, or probabilities.

    Each probability is written so that it reads back as the same number:
    by pyarrow's CSV writer (the shortest such text, in C++) where pyarrow
    is installed, else by NumPy with 17 significant digits (9 for float32),
    whose ``savetxt`` formats row by row in Python, about twice as slow.
    """
    if proba:
        if header:
            csv.writer(fh, lineterminator="\n").writerow([_format_value(c) for c in classes])
        try:
            import pyarrow as pa
            import pyarrow.csv as pacsv
        except ImportError:
            np.savetxt(fh, result, fmt="%.9g" if result.dtype == np.float32 else "%.17g",
                       delimiter=",")
            return
        for start in range(0, result.shape[0], _WRITE_ROWS):
            part = result[start:start + _WRITE_ROWS]
            table = pa.table({str(j): part[:, j] for j in range(part.shape[1])})
            sink = io.BytesIO()
            pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False,
                                                            quoting_style="none"))
            fh.write(sink.getvalue().decode("ascii"))
        return
    # One column of labels, each one of the classes: each class is written
    # once as the csv module quotes it (as pandas' to_csv would), then the
    # rows are that text looked up per row.
    texts = np.array([_csv_field(_format_value(c)) for c in classes], dtype=object)
    order = np.argsort(classes, kind="stable")  # classes_ is sorted; any order works
    codes = order[np.searchsorted(classes[order], result)]
    if header:
        fh.write(_csv_field(name) + "\n")
    if len(result):
        fh.write("\n".join(texts[codes]) + "\n")


def _csv_field(text: str) -> str:
    """``text`` as the only field of a CSV row (quoted where the csv module quotes it)."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow([text])
    return out.getvalue()[:-1]
