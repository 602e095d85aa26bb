"""Files with named columns, read a chunk of rows at a time.

CSV goes through pyarrow's CSV reader where pyarrow is installed
(``pip install fastsoftmax[parquet]``), else pandas' C parser; Parquet and
Feather (Arrow IPC) through pyarrow. Every source gives the same
:class:`Chunk`: float64 features already checked (numbers, finite) and raw
labels already checked (none empty), so that reading a whole file and
streaming it share every check and every message.

The fast parsers never look back. When a chunk holds something wrong (a
value that is not a number, a row with too few or too many fields, an
empty label), the CSV source reads the file once more with the standard
library's ``csv`` module, up to that row only, to name the line and the
column; nothing of that slow path runs on good data. pyarrow's reader is
preferred because it is imported in a tenth of pandas' time (a command's
fixed cost) and parses as fast. What it refuses and the other readers
take (a line of spaces, a number written ``1_000``) is read by pandas when
it comes in the first block of rows, else from there on by the ``csv``
module, with the same checks.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import itertools
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from ._common import PARQUET_EXTRA, CLIError, block_rows, one_line

__all__ = ["ArrowSource", "CSVSource", "Chunk", "TableSource", "is_gzip"]


@dataclass
class Chunk:
    """Rows ``start`` (0-based, counting data rows) to ``start + len`` of a table."""

    start: int
    X: np.ndarray | None  # (rows, features) float64, every value finite
    y: np.ndarray | None  # (rows,) labels as stored, none missing or empty


class TableSource:
    """A file of named columns (see the subclasses)."""

    path: str
    kind: str  # "CSV", "Parquet" or "Feather", for messages
    unit: str  # what position() counts: "B" (bytes) or "rows"
    columns: list[str]
    total: int | None  # the file's size in ``unit``

    def chunks(self, rows: int, features: list[str] | None,
               target: str | None) -> Iterator[Chunk]:
        """Chunks of at most ``rows`` rows; ``features=None`` reads the labels only."""
        raise NotImplementedError

    def position(self) -> int:
        """How far the current pass has read, in ``unit``."""
        raise NotImplementedError

    def where(self, row: int) -> str:
        """Name data row ``row`` (0-based) as a user finds it: ``line 7`` or ``row 6``."""
        return f"row {row + 1}"

    def estimate_rows(self, done: int) -> int:
        """Rows the whole file probably holds, having read ``done`` of them."""
        return done

    def whole_read_rows(self, n_features: int) -> int:
        """Rows per chunk when the whole file is read into one array."""
        return block_rows(n_features)

    def read_all(self, features: list[str], target: str | None) -> Chunk | None:
        """Every row in one chunk by a faster whole-file reader, or None where there is none."""
        return None

    def _check_names(self) -> None:
        from collections import Counter

        twice = sorted(name for name, n in Counter(self.columns).items() if n > 1)
        if twice:
            raise CLIError(f"{self.path}: duplicate column names {twice}")


def is_gzip(path: str) -> bool:
    """Whether the file starts with gzip's magic number."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def _blank(fields: list[str]) -> bool:
    # The lines pandas' C parser skips: empty, or nothing but spaces.
    return not fields or (len(fields) == 1 and not fields[0].strip())


class CSVSource(TableSource):
    """A CSV file with a header row, gzip-compressed or not, in UTF-8."""

    kind = "CSV"
    unit = "B"

    def __init__(self, path: str) -> None:
        self.path = path
        self._size = os.path.getsize(path)
        self.total = self._size
        self._gzip = is_gzip(path)
        self._raw: Any = None
        # (bytes, rows) of the blocks pyarrow's reader has handed over in
        # this pass, or None outside a pass of that reader.
        self._parsed: tuple[int, int] | None = None
        self.columns = self._header()
        self._check_names()

    # -------------------------------------------------------- the slow reader
    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except UnicodeDecodeError as exc:
            raise CLIError(f"{self.path}: not a UTF-8 text CSV file ({exc.reason})") from None
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise CLIError(f"{self.path}: not a readable gzip file ({exc})") from None
        except csv.Error as exc:
            raise CLIError(f"{self.path}: unreadable CSV ({exc})") from None

    def _text(self) -> IO[str]:
        if self._gzip:
            return gzip.open(self.path, "rt", newline="", encoding="utf-8-sig")
        return open(self.path, newline="", encoding="utf-8-sig")

    def _header(self) -> list[str]:
        with self._errors(), self._text() as fh:
            reader = csv.reader(fh)
            for fields in reader:
                if not _blank(fields):
                    # Lines up to the header's end: what pyarrow skips.
                    self._header_lines = reader.line_num
                    return [name.strip() for name in fields]
        raise CLIError(f"{self.path}: empty file (a CSV needs a header row)")

    def _records(self, skip: int = 0) -> Iterator[tuple[int, list[str]]]:
        """(line number, fields) of every data record from the ``skip``-th (0-based) on."""
        with self._errors(), self._text() as fh:
            reader = csv.reader(fh)
            records = (fields for fields in reader if not _blank(fields))
            next(records, None)  # the header
            for fields in itertools.islice(records, skip, None):
                yield reader.line_num, fields

    def _ragged(self, fields: list[str], line: int) -> CLIError | None:
        if len(fields) == len(self.columns):
            return None
        return CLIError(f"{self.path}: line {line} has {len(fields)} fields, "
                        f"the header has {len(self.columns)}")

    def _problem(self, row: int, name: str, *, target: bool = False) -> CLIError:
        """Return the error for data row ``row``, column ``name``: its field count, else value."""
        line, fields = next(self._records(row), (0, []))
        ragged = self._ragged(fields, line)
        if ragged is not None:
            return ragged
        text = fields[self.columns.index(name)]
        if target:
            return CLIError(f"{self.path}: line {line}: empty target {name!r}")
        try:
            float(text)
        except ValueError:
            return CLIError(f"{self.path}: line {line}, column {name!r}: {text!r} is not a number")
        return CLIError(f"{self.path}: line {line}, column {name!r}: {text!r} is not a "
                        "finite number")

    def _first_ragged(self, start: int, exc: Exception) -> CLIError:
        for line, fields in self._records(start):
            ragged = self._ragged(fields, line)
            if ragged is not None:
                return ragged
        return CLIError(f"{self.path}: unreadable CSV ({one_line(str(exc))})")

    def where(self, row: int) -> str:
        line, _ = next(self._records(row), (0, []))
        return f"line {line}"

    # -------------------------------------------------------- the fast reader
    @contextlib.contextmanager
    def _binary(self) -> Iterator[IO[bytes]]:
        with open(self.path, "rb") as raw:
            self._raw = raw
            try:
                if self._gzip:
                    with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                        yield unzipped  # type: ignore[misc]
                else:
                    yield raw
            finally:
                self._raw = None

    def position(self) -> int:
        if self._raw is None:
            return self._size
        if self._parsed is not None and not self._gzip:
            # pyarrow reads ahead of the rows it has handed over: count
            # the blocks handed over instead (each about ARROW_BLOCK_BYTES).
            return min(self._size, self._parsed[0])
        return self._raw.tell()

    def estimate_rows(self, done: int) -> int:
        # Bytes per row so far (compressed bytes for gzip, like the total),
        # with 10 % to spare: the rest of a generous buffer is never touched,
        # so it takes address space, not memory.
        if self._parsed is not None and not self._gzip and self._parsed[1]:
            position, done = self._parsed  # the blocks pyarrow handed over
        else:
            position = self.position()
        if done == 0 or position <= 0:
            return done
        return int(self._size / (position / done) * 1.1) + 1024

    def chunks(self, rows: int, features: list[str] | None,
               target: str | None) -> Iterator[Chunk]:
        if _arrow_csv() is None:
            yield from self._pandas_chunks(rows, features, target)
            return
        done = 0
        try:
            for chunk in self._arrow_chunks(rows, features, target):
                yield chunk
                rows_read = chunk.X if chunk.X is not None else chunk.y
                done = chunk.start + (0 if rows_read is None else len(rows_read))
        except (_arrow_csv().ArrowException, OSError):
            # A problem in the rows after ``done``, named by a slower reader,
            # or something only the slower readers take (see the docstring).
            self._raw = None
            if done == 0:
                yield from self._pandas_chunks(rows, features, target)
            else:
                yield from self._python_chunks(done, rows, features, target)

    def _arrow_options(self, features: list[str] | None, target: str | None,
                       streaming: bool = True) -> dict[str, Any]:
        """Return pyarrow's read, parse and convert options for these columns.

        The streaming reader reads blocks of ``ARROW_BLOCK_BYTES``; the
        whole-file reader keeps pyarrow's own block size.
        """
        pa = _arrow_csv()
        csv_ = pa.csv
        wanted = ([] if features is None else list(features)) + \
            ([] if target is None else [target])
        types = {name: pa.float64() for name in features or []}
        if target is not None:
            types[target] = pa.string()
        return dict(
            read_options=csv_.ReadOptions(column_names=self.columns,
                                          skip_rows=self._header_lines, use_threads=True,
                                          **({"block_size": ARROW_BLOCK_BYTES} if streaming
                                             else {})),
            # Quoted fields may hold line breaks; no value is missing data
            # ("", "NA" and the like are text, so not numbers); labels stay
            # strings.
            parse_options=csv_.ParseOptions(newlines_in_values=True),
            convert_options=csv_.ConvertOptions(column_types=types, include_columns=wanted,
                                                null_values=[], strings_can_be_null=False,
                                                quoted_strings_can_be_null=False))

    def read_all(self, features: list[str], target: str | None) -> Chunk | None:
        """Read the whole file by pyarrow's multithreaded reader (every core parses), or None.

        None without pyarrow, and when pyarrow refuses the file: the chunks
        then name the problem, or read what only the other readers take.
        The table and X are held together for a moment (twice the data),
        then the table and the pool's freed blocks go.
        """
        pa = _arrow_csv()
        if pa is None:
            return None
        try:
            with self._errors(), pa.OSFile(self.path) as raw:
                stream = pa.CompressedInputStream(raw, "gzip") if self._gzip else raw
                table = pa.csv.read_csv(stream, **self._arrow_options(features, target,
                                                                      streaming=False))
            return self._arrow_chunk(table, features, target, 0)
        except (pa.ArrowException, OSError):
            return None
        finally:
            table = None
            pa.default_memory_pool().release_unused()

    def _arrow_chunks(self, rows: int, features: list[str] | None,
                      target: str | None) -> Iterator[Chunk]:
        pa = _arrow_csv()
        with self._errors(), pa.OSFile(self.path) as raw:
            self._raw = raw
            stream = pa.CompressedInputStream(raw, "gzip") if self._gzip else raw
            reader = pa.csv.open_csv(stream, **self._arrow_options(features, target))
            start = 0
            pending: list[Any] = []
            held = 0
            self._parsed = (0, 0)
            try:
                for batch in reader:
                    pending.append(batch)
                    held += batch.num_rows
                    self._parsed = (self._parsed[0] + ARROW_BLOCK_BYTES,
                                    self._parsed[1] + batch.num_rows)
                    while held >= rows:  # whole chunks of ``rows`` from the blocks held
                        table = pa.Table.from_batches(pending)
                        yield self._arrow_chunk(table.slice(0, rows), features, target, start)
                        pending = table.slice(rows).to_batches()
                        held -= rows
                        start += rows
                if held:
                    yield self._arrow_chunk(pa.Table.from_batches(pending), features, target,
                                            start)
            finally:
                self._raw = None
                self._parsed = None
                # pyarrow's pool keeps freed blocks for reuse (tens of MB
                # after a file), which a fit's peak memory would carry.
                pa.default_memory_pool().release_unused()

    def _arrow_chunk(self, table: Any, features: list[str] | None, target: str | None,
                     start: int) -> Chunk:
        X = None
        if features is not None:
            X = np.empty((table.num_rows, len(features)))
            # Block by block (the reader's blocks: every column of a table
            # read from CSV is cut at the same rows), every column of the
            # block: the block's rows of X stay in cache while its columns
            # are written into them. Column by column over the whole table
            # instead, each column's pass went through all of X (0.19 s
            # for 80 MB).
            columns = [table.column(name).chunks for name in features]
            cuts = [len(piece) for piece in columns[0]]
            if all([len(piece) for piece in pieces] == cuts for pieces in columns):
                offset = 0
                for pieces in zip(*columns, strict=True):
                    block = X[offset:offset + len(pieces[0])]
                    for j, piece in enumerate(pieces):
                        block[:, j] = _arrow_values(piece, np.float64)
                    offset += len(pieces[0])
            else:  # columns cut at different rows: one column at a time
                for j, pieces in enumerate(columns):
                    offset = 0
                    for piece in pieces:
                        X[offset:offset + len(piece), j] = _arrow_values(piece, np.float64)
                        offset += len(piece)
            self._check_finite(X, features, start)
        y = None
        if target is not None:
            y = _arrow_labels(_arrow_csv().compute.utf8_trim_whitespace(table.column(target)))
            empty = np.flatnonzero(y == "")
            if empty.size:
                raise self._problem(start + int(empty[0]), target, target=True)
        return Chunk(start, X, y)

    def _check_finite(self, X: np.ndarray, features: list[str], start: int) -> None:
        finite = np.isfinite(X)
        if not finite.all():
            i, j = np.argwhere(~finite)[0]
            raise self._problem(start + int(i), features[j])

    def _python_chunks(self, start: int, rows: int, features: list[str] | None,
                       target: str | None) -> Iterator[Chunk]:
        """Chunks from data row ``start`` on, parsed by the ``csv`` module and ``float``."""
        columns = [self.columns.index(name) for name in features or []]
        label = None if target is None else self.columns.index(target)
        values: list[list[float]] = []
        labels: list[str] = []
        row = first = start

        def chunk() -> Chunk:
            X = None
            if features is not None:
                X = np.array(values, dtype=np.float64).reshape(len(values), len(columns))
                self._check_finite(X, features, first)
            return Chunk(first, X, None if label is None else np.array(labels, dtype=str))

        for line, fields in self._records(start):
            ragged = self._ragged(fields, line)
            if ragged is not None:
                raise ragged
            try:
                values.append([float(fields[c]) for c in columns])
            except ValueError:
                bad = next(c for c in columns if not _is_float(fields[c]))
                raise self._problem(row, self.columns[bad]) from None
            if label is not None:
                text = fields[label].strip()
                if not text:
                    raise self._problem(row, self.columns[label], target=True)
                labels.append(text)
            row += 1
            if row - first == rows:
                yield chunk()
                values, labels, first = [], [], row
        if row > first:
            yield chunk()

    def _pandas_chunks(self, rows: int, features: list[str] | None,
                       target: str | None) -> Iterator[Chunk]:
        import pandas as pd

        options: dict[str, Any] = dict(
            chunksize=rows, header=0, names=self.columns, index_col=False, engine="c",
            encoding="utf-8",
            # No NA markers: "NA" or "" is not a number to us, and a label
            # stays the text it is.
            na_filter=False,
            dtype=None if target is None else {target: str})
        if features is None:
            options["usecols"] = [target]
        start = 0
        with self._errors(), self._binary() as fh, pd.read_csv(fh, **options) as reader:
            while True:
                try:
                    frame = next(reader)
                except StopIteration:
                    return
                except pd.errors.ParserError as exc:  # more fields than the header
                    raise self._first_ragged(start, exc) from None
                X = None if features is None else self._features(frame, features, start)
                y = None if target is None else self._labels(frame[target], target, start)
                yield Chunk(start, X, y)
                start += len(frame)

    def _features(self, frame: Any, features: list[str], start: int) -> np.ndarray:
        X = np.empty((len(frame), len(features)))
        for j, name in enumerate(features):
            column = frame[name]
            kind = column.dtype.kind
            if kind in "iuf":
                X[:, j] = column.to_numpy()
            elif kind == "b":  # True/False: not numbers
                raise self._problem(start, name)
            else:  # text the C parser did not take: Python's float() decides
                values = column.to_numpy(dtype=object)
                try:
                    X[:, j] = values.astype(np.float64)
                except (ValueError, TypeError):
                    raise self._problem(start + _first_not_float(values), name) from None
        self._check_finite(X, features, start)
        return X

    def _labels(self, column: Any, name: str, start: int) -> np.ndarray:
        y = column.str.strip().to_numpy(dtype=object)
        empty = np.flatnonzero(y == "")
        if empty.size:  # an empty field, or a short row that stopped before it
            raise self._problem(start + int(empty[0]), name, target=True)
        return y.astype(str)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _first_not_float(values: np.ndarray) -> int:
    for i, value in enumerate(values):
        try:
            float(value)
        except (ValueError, TypeError):
            return i
    return 0


# Bytes per block of pyarrow's streaming CSV reader: measured on a 198 MB
# CSV of 50 float columns, 1 MiB blocks read it in 0.57 s, 256 KiB in 0.73 s
# and 4 MiB in 0.90 s.
ARROW_BLOCK_BYTES = 1 << 20
_ARROW: Any = None


def _arrow_csv() -> Any:
    """Return pyarrow with its csv and compute modules loaded, or None when not installed."""
    global _ARROW
    if _ARROW is None:
        try:
            import pyarrow
            import pyarrow.compute
            import pyarrow.csv  # noqa: F401
        except ImportError:
            _ARROW = False
        else:
            _ARROW = pyarrow
    return _ARROW or None


# pyarrow's own conversions to NumPy and to Python (to_numpy, to_pylist) and
# its scalars import pandas, whose import costs about 0.3 s, as much as
# parsing a 200 MB file: the CSV reader's columns are read through their
# buffers instead.
def _arrow_values(array: Any, dtype: Any) -> np.ndarray:
    """Return a primitive pyarrow array without nulls as a NumPy view of its buffer."""
    if array.null_count:
        raise ValueError("nulls")  # the CSV reader is told that nothing is null
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array),
                         offset=array.offset * np.dtype(dtype).itemsize)


def _arrow_labels(column: Any) -> np.ndarray:
    """Return a pyarrow string column (chunked) as a NumPy array of str.

    Each chunk is dictionary-encoded (labels repeat: a few classes), the
    dictionary's strings decoded from its buffers once, and the rows
    looked up by their codes.
    """
    pc = _arrow_csv().compute
    parts = []
    for piece in column.chunks:
        encoded = pc.dictionary_encode(piece)
        words = encoded.dictionary
        offsets = _arrow_values_at(words.buffers()[1], np.int32, len(words) + 1, words.offset)
        data = words.buffers()[2]
        raw = b"" if data is None else data.to_pybytes()
        texts = np.array([raw[offsets[i]:offsets[i + 1]].decode("utf-8")
                          for i in range(len(words))] or [""], dtype=str)
        parts.append(texts[_arrow_values(encoded.indices, np.int32)])
    return np.concatenate(parts) if parts else np.empty(0, dtype=str)


def _arrow_values_at(buffer: Any, dtype: Any, count: int, offset: int) -> np.ndarray:
    return np.frombuffer(buffer, dtype=dtype, count=count,
                         offset=offset * np.dtype(dtype).itemsize)


def _pyarrow(path: str, kind: str) -> Any:
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.ipc
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise CLIError(f"{path}: reading {kind} needs pyarrow: {PARQUET_EXTRA}") from None
    return pyarrow


class ArrowSource(TableSource):
    """A Parquet file, or a Feather v2 / Arrow IPC file, read through pyarrow."""

    unit = "rows"

    def __init__(self, path: str, kind: str) -> None:
        self.path = path
        self.kind = "Parquet" if kind == "parquet" else "Feather"
        pa = self._pa = _pyarrow(path, self.kind)
        self._done = 0
        try:
            if kind == "parquet":
                self._file = pa.parquet.ParquetFile(path)
                schema = self._file.schema_arrow
                self.total = self._file.metadata.num_rows
            else:
                self._file = pa.ipc.open_file(pa.memory_map(path))
                schema = self._file.schema
                count = getattr(self._file, "count_rows", None)  # missing from older pyarrow
                self.total = None if count is None else count()
        except (pa.ArrowException, ValueError) as exc:
            raise CLIError(f"{path}: not a readable {self.kind} file "
                           f"({one_line(str(exc))})") from None
        self.columns = list(schema.names)
        self._types = {field.name: field.type for field in schema}
        self._check_names()

    def position(self) -> int:
        return self._done

    def estimate_rows(self, done: int) -> int:
        return max(done, self.total or 0)

    def whole_read_rows(self, n_features: int) -> int:
        return max(self.total or 0, 1)  # whole row groups: no slicing, no copy

    def _units(self) -> Iterator[tuple[int, Callable[[str], Any]]]:
        """(rows, column reader) of each row group (Parquet) or record batch (Feather).

        A Parquet row group is read one column at a time: pyarrow's batch
        reader would decode every column of the group at once and hold
        them beside the float64 copy (about 5 x the data at the peak).
        """
        if self.kind == "Parquet":
            for g in range(self._file.num_row_groups):

                def column(name: str, g: int = g) -> Any:
                    return self._file.read_row_group(g, columns=[name],
                                                     use_threads=False).column(0)

                yield self._file.metadata.row_group(g).num_rows, column
            return
        for i in range(self._file.num_record_batches):
            batch = self._file.get_batch(i)  # memory-mapped: its columns are views
            yield batch.num_rows, batch.column

    def _check_types(self, features: list[str], target: str | None) -> None:
        types = self._pa.types
        for name in features:
            t = self._types[name]
            if not (types.is_integer(t) or types.is_floating(t) or types.is_decimal(t)):
                raise CLIError(f"{self.path}: column {name!r} holds {t}, not numbers")
        if target is not None:
            t = self._types[target]
            if types.is_dictionary(t):
                t = t.value_type
            if not (types.is_integer(t) or types.is_floating(t) or types.is_string(t)
                    or types.is_large_string(t) or types.is_boolean(t)):
                raise CLIError(f"{self.path}: target column {target!r} holds {t}, "
                               "not labels (numbers or text)")

    def chunks(self, rows: int, features: list[str] | None,
               target: str | None) -> Iterator[Chunk]:
        self._check_types(features or [], target)
        start = self._done = 0
        try:
            for n, column in self._units():
                X = None if features is None else self._features(column, features, n, start)
                y = None if target is None else self._labels(column(target), target, start)
                for offset in range(0, n, rows):
                    self._done = start + min(n, offset + rows)
                    yield Chunk(start + offset, None if X is None else X[offset:offset + rows],
                                None if y is None else y[offset:offset + rows])
                start += n
        except (self._pa.ArrowException, OSError) as exc:
            raise CLIError(f"{self.path}: not a readable {self.kind} file "
                           f"({one_line(str(exc))})") from None

    def _first_null(self, column: Any) -> int:
        return int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])

    def _features(self, column_of: Callable[[str], Any], features: list[str], n: int,
                  start: int) -> np.ndarray:
        pa = self._pa
        X = np.empty((n, len(features)))
        for j, name in enumerate(features):
            column = column_of(name)
            if column.null_count:
                raise CLIError(f"{self.path}: row {start + self._first_null(column) + 1}, "
                               f"column {name!r}: missing value")
            if pa.types.is_decimal(column.type):
                column = column.cast(pa.float64())
            X[:, j] = column.to_numpy(zero_copy_only=False)
        finite = np.isfinite(X)
        if not finite.all():
            i, j = np.argwhere(~finite)[0]
            raise CLIError(f"{self.path}: row {start + int(i) + 1}, column {features[j]!r}: "
                           f"{float(X[i, j])} is not a finite number")
        return X

    def _labels(self, column: Any, name: str, start: int) -> np.ndarray:
        pa = self._pa
        if column.null_count:
            raise CLIError(f"{self.path}: row {start + self._first_null(column) + 1}: "
                           f"missing target {name!r}")
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            return column.to_numpy(zero_copy_only=False)
        column = pa.compute.utf8_trim_whitespace(column)
        empty = np.flatnonzero(pa.compute.equal(column, "").to_numpy(zero_copy_only=False))
        if empty.size:
            raise CLIError(f"{self.path}: row {start + int(empty[0]) + 1}: empty target {name!r}")
        return column.to_numpy(zero_copy_only=False).astype(str)
