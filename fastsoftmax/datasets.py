"""Data sets for examples and the command line; nothing here downloads anything.

make_blobs
    The lecture notes' toy problem: 3 Gaussian classes in 2-D.
load_digits
    scikit-learn's 8 x 8 handwritten digits (shipped with scikit-learn).
load_mnist
    MNIST from the standard IDX files in a folder you already have.
read_idx
    Any IDX file (the format MNIST is distributed in), gzipped or not.
make_text_like
    A synthetic bag-of-words classification problem: sparse TF-IDF rows
    with Zipf-distributed terms and planted class-specific vocabularies.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["make_blobs", "load_digits", "load_mnist", "read_idx", "make_text_like"]

TOY_MEANS = ((2.0, 2.0), (8.0, 3.0), (3.0, 6.0))

# IDX type codes (third byte of the magic number) and their big-endian dtypes.
_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_MNIST_IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
_MNIST_LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension


def make_blobs(n_per_class: int = 500, means: Sequence[Sequence[float]] = TOY_MEANS,
               cov: Any = None, random_state: Any = None,
               dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian classes, the toy example of the lecture notes.

    With the defaults: 3 classes in 2-D, 500 points each, means (2, 2),
    (8, 3) and (3, 6), identity covariance.

    Parameters
    ----------
    n_per_class : int, default=500
        Points drawn for each class.
    means : sequence of k points of dimension d, default ((2,2),(8,3),(3,6))
        Class means; k >= 1 classes in d >= 1 dimensions.
    cov : array_like of shape (d, d), optional
        Covariance shared by every class; the identity when None.
    random_state : int, numpy Generator or None
        Seed for ``numpy.random.default_rng``.
    dtype : float32 or float64, default=float64
        dtype of X.

    Returns
    -------
    X : ndarray of shape (k * n_per_class, d)
        Rows grouped by class, in the order of ``means`` (as in the notes).
    y : ndarray of int64, shape (k * n_per_class,)
        Class index 0..k-1 of each row.
    """
    mu = np.asarray(means, dtype=np.float64)
    if mu.ndim != 2 or mu.shape[0] < 1 or mu.shape[1] < 1:
        raise ValueError(f"means must be a (k, d) array of k points, got shape {mu.shape}")
    if isinstance(n_per_class, bool) or not isinstance(n_per_class, (int, np.integer)) \
            or n_per_class < 1:
        raise ValueError(f"n_per_class must be a positive integer, got {n_per_class!r}")
    k, d = mu.shape
    sigma = np.eye(d) if cov is None else np.asarray(cov, dtype=np.float64)
    if sigma.shape != (d, d):
        raise ValueError(f"cov must have shape ({d}, {d}), got {sigma.shape}")
    rng = np.random.default_rng(random_state)
    X = np.concatenate([rng.multivariate_normal(mu[j], sigma, size=int(n_per_class))
                        for j in range(k)])
    y = np.repeat(np.arange(k, dtype=np.int64), int(n_per_class))
    return np.ascontiguousarray(X, dtype=dtype), y


def load_digits(*, return_X_y: bool = True, dtype: Any = np.float64) -> Any:
    """scikit-learn's handwritten digits: 1797 images of 8 x 8 pixels, 10 classes.

    Pixel values are grey levels 0..16, unscaled. The data ships with
    scikit-learn; nothing is downloaded.

    Parameters
    ----------
    return_X_y : bool, default=True
        Return ``(X, y)``; when False, scikit-learn's Bunch (with
        ``images``, ``target_names``, ``DESCR``) with ``data`` in ``dtype``.
    dtype : float32 or float64, default=float64

    Returns
    -------
    (X, y) : ndarray of shape (1797, 64) and int64 labels 0..9
        or a :class:`sklearn.utils.Bunch`.
    """
    from sklearn.datasets import load_digits as _sk_load_digits

    bunch = _sk_load_digits()
    X = np.ascontiguousarray(bunch.data, dtype=dtype)
    y = bunch.target.astype(np.int64)
    if return_X_y:
        return X, y
    bunch.data = X
    bunch.target = y
    return bunch


def _open(path: str | os.PathLike):
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def _read(path: str | os.PathLike, size: int = -1) -> bytes:
    """Bytes of a file, gunzipped when it is gzip; gzip errors become ValueError."""
    try:
        with _open(path) as fh:
            return fh.read(size)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except (EOFError, OSError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: cannot read the gzip stream ({exc})") from None


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (MNIST's format), gzipped or not.

    The header is two zero bytes, a type code, the number of dimensions,
    then each dimension as a big-endian uint32; the data follows in
    big-endian order.

    Returns
    -------
    ndarray
        With the file's shape and a native-endian dtype.

    Raises
    ------
    FileNotFoundError
        When the file does not exist.
    ValueError
        Naming the file, when its header is not IDX or its size does not
        match the header (truncated or trailing data, bad gzip stream).
    """
    raw = _read(path)
    if len(raw) < 4:
        raise ValueError(f"{path}: not an IDX file (only {len(raw)} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    code, ndim = raw[2], raw[3]
    if raw[0] != 0 or raw[1] != 0 or code not in _IDX_DTYPES or ndim == 0:
        raise ValueError(f"{path}: not an IDX file (magic number 0x{magic:08x})")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes)")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    dt = _IDX_DTYPES[code]
    expected = header + int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if len(raw) != expected:
        raise ValueError(
            f"{path}: IDX header says shape {shape} ({expected} bytes) but the file "
            f"has {len(raw)} bytes ({'truncated' if len(raw) < expected else 'trailing data'})"
        )
    data = np.frombuffer(raw, dtype=dt, offset=header).reshape(shape)
    return data.astype(dt.newbyteorder("="))


def _find(folder: str, stem: str) -> str:
    # The files are published as "train-images-idx3-ubyte"; some mirrors and
    # archives use "train-images.idx3-ubyte". Either, gzipped or not.
    names = [stem, stem + ".gz"]
    dotted = stem.replace("-idx", ".idx")
    names += [dotted, dotted + ".gz"]
    for name in names:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(
        f"{os.path.join(folder, stem)}[.gz] not found (MNIST is not downloaded by "
        "fastsoftmax: put the IDX files in that folder)"
    )


def load_mnist(path: str | os.PathLike, kind: str = "train", *, dtype: Any = np.float32,
               scale: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Load MNIST from the standard IDX files in a folder you have.

    Looks for ``{kind}-images-idx3-ubyte`` and ``{kind}-labels-idx1-ubyte``
    (``kind`` "train" or "t10k"), each gzipped (``.gz``) or not. Nothing is
    downloaded.

    Parameters
    ----------
    path : str or PathLike
        Folder holding the files.
    kind : {"train", "t10k", "test"}, default="train"
        "train": the 60,000 training images; "t10k" (or "test"): the 10,000
        test images.
    dtype : float32 or float64, default=float32
        dtype of X.
    scale : bool, default=True
        Divide the grey levels 0..255 by 255.

    Returns
    -------
    X : ndarray of shape (m, rows * cols)
        One flattened image per row (28 * 28 = 784 for MNIST).
    y : ndarray of int64, shape (m,)

    Raises
    ------
    FileNotFoundError
        When a file is missing.
    ValueError
        Naming the file, for a wrong magic number, a size that does not
        match the header, or image and label counts that differ.
    """
    if kind == "test":
        kind = "t10k"
    if kind not in ("train", "t10k"):
        raise ValueError(f"kind must be 'train', 't10k' or 'test', got {kind!r}")
    folder = os.fspath(path)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder}: no such folder")
    images_path = _find(folder, f"{kind}-images-idx3-ubyte")
    labels_path = _find(folder, f"{kind}-labels-idx1-ubyte")
    for file, expected, what in ((images_path, _MNIST_IMAGES_MAGIC, "images"),
                                 (labels_path, _MNIST_LABELS_MAGIC, "labels")):
        head = _read(file, 4)
        magic = int.from_bytes(head, "big") if len(head) == 4 else None
        if magic != expected:
            got = "none (file too short)" if magic is None else f"0x{magic:08x}"
            raise ValueError(
                f"{file}: magic number {got}, expected 0x{expected:08x} for MNIST {what}"
            )
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{images_path} has {images.shape[0]} images but {labels_path} has "
            f"{labels.shape[0]} labels"
        )
    X = images.reshape(images.shape[0], -1).astype(dtype)
    if scale:
        X /= X.dtype.type(255)
    return np.ascontiguousarray(X), labels.astype(np.int64)


# make_text_like's planted structure. Each token of a document comes from the
# class's own vocabulary with probability _TOPIC_WEIGHT, else from the
# background Zipf law shared by all classes; a class vocabulary holds
# _TOPIC_SIZE of the terms (at least one), drawn at random, itself
# Zipf-weighted; a fraction _LABEL_NOISE of the labels is then replaced by a
# uniformly drawn class. Chosen so that a linear model learns the classes
# but not perfectly: on 100,000 features, 20 classes, 60 terms per row,
# scikit-learn's LogisticRegression (C=1) trained on 20,000 rows scores 0.96
# on them and 0.85 on 20,000 others (0.94 with a topic weight of 0.1, close
# to the 0.95 ceiling the label noise leaves).
_TOPIC_WEIGHT = 0.05
_TOPIC_SIZE = 0.01
_LABEL_NOISE = 0.05


def _check_count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _expected_distinct(q: np.ndarray, length: float) -> float:
    """Return the expected number of distinct terms among ``length`` draws from q."""
    return float(np.sum(-np.expm1(length * np.log1p(-np.minimum(q, 1 - 1e-16)))))


def _zipf(size: int, exponent: float) -> np.ndarray:
    p = np.arange(1, size + 1, dtype=np.float64) ** -exponent
    return p / p.sum()


def make_text_like(n_samples: int = 10_000, n_features: int = 20_000, n_classes: int = 10,
                   nnz_per_row: float = 60, *, zipf_exponent: float = 1.1,
                   random_state: Any = None, dtype: Any = np.float64
                   ) -> tuple[Any, np.ndarray]:
    """Make a synthetic text classification problem: a sparse TF-IDF matrix.

    Documents are bags of words. Term j of the vocabulary has background
    frequency proportional to (j + 1) ** -zipf_exponent (term 0 is the
    commonest). Each class also has its own vocabulary: about 1 % of the
    terms, drawn at random, Zipf-weighted among themselves. A document of
    class c draws each of its tokens from its class vocabulary with
    probability 0.05 and from the background law otherwise; its length is
    1 + Poisson, with the mean chosen so that a document holds about
    ``nnz_per_row`` distinct terms. Finally 5 % of the labels are redrawn
    uniformly, so the classes are learnable by a linear model but not
    perfectly separable. Rows are term counts times the smoothed inverse
    document frequency log((1 + m) / (1 + df)) + 1, scaled to unit
    Euclidean norm (scikit-learn's ``TfidfTransformer`` defaults).

    Parameters
    ----------
    n_samples : int, default=10_000
        Number of documents (rows), m >= 1.
    n_features : int, default=20_000
        Vocabulary size (columns), n >= 1.
    n_classes : int, default=10
        Number of classes, k >= 2. Labels are drawn uniformly.
    nnz_per_row : float, default=60
        Mean number of distinct terms per document, 0 < nnz_per_row <=
        n_features; approximate (from the expected number of distinct terms
        among the tokens), and reached only roughly when it is a large
        fraction of the vocabulary.
    zipf_exponent : float, default=1.1
        Exponent s > 0 of the background law (about 1 for natural language).
    random_state : int, numpy Generator or None
        Seed for ``numpy.random.default_rng``.
    dtype : float32 or float64, default=float64
        dtype of the values.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features)
        Sorted column indices, no duplicates, no empty rows, unit-norm rows;
        int32 indices and indptr when they fit.
    y : ndarray of int64, shape (n_samples,)
        Class labels 0..n_classes-1.

    Raises
    ------
    ValueError
        For a count below its minimum, ``nnz_per_row`` not in
        (0, n_features], a non-positive or non-finite ``zipf_exponent``, or a
        dtype other than float32/float64.

    Notes
    -----
    Everything is vectorised: 100,000 x 100,000 with 60 terms per row (about
    6 M nonzeros) takes a few seconds, most of it sorting the tokens.
    """
    import scipy.sparse

    m = _check_count(n_samples, "n_samples", 1)
    n = _check_count(n_features, "n_features", 1)
    k = _check_count(n_classes, "n_classes", 2)
    try:
        nnz = float(nnz_per_row)
        s = float(zipf_exponent)
    except (TypeError, ValueError):
        raise ValueError("nnz_per_row and zipf_exponent must be numbers, got "
                         f"{nnz_per_row!r} and {zipf_exponent!r}") from None
    if not (0 < nnz <= n):
        raise ValueError(f"nnz_per_row must be in (0, n_features={n}], got {nnz_per_row!r}")
    if not (np.isfinite(s) and s > 0):
        raise ValueError(f"zipf_exponent must be a positive finite number, got {zipf_exponent!r}")
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be float32 or float64, got {dt}")
    rng = np.random.default_rng(random_state)

    background = _zipf(n, s)
    t_size = max(1, int(round(_TOPIC_SIZE * n)))
    topic = _zipf(t_size, 1.0)
    topics = np.stack([rng.choice(n, size=t_size, replace=False) for _ in range(k)])

    # Mean document length (tokens) giving about nnz distinct terms, by
    # bisection on the term law of class 0 (every class's law is a
    # permutation-like variant of it).
    q = (1 - _TOPIC_WEIGHT) * background
    np.add.at(q, topics[0], _TOPIC_WEIGHT * topic)
    lo, hi = nnz, nnz
    while _expected_distinct(q, hi) < nnz and hi < 1e4 * nnz:
        hi *= 2
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _expected_distinct(q, mid) < nnz else (lo, mid)
    mean_len = hi
    lengths = 1 + rng.poisson(max(mean_len - 1, 0.0), size=m)

    y_true = rng.integers(0, k, size=m)
    rows = np.repeat(np.arange(m, dtype=np.int64), lengths)
    n_tokens = rows.shape[0]
    from_topic = rng.random(n_tokens) < _TOPIC_WEIGHT
    terms = np.empty(n_tokens, dtype=np.int64)
    n_topic = int(from_topic.sum())
    cdf = np.cumsum(background)
    terms[~from_topic] = np.minimum(
        np.searchsorted(cdf, rng.random(n_tokens - n_topic) * cdf[-1], side="right"), n - 1)
    tcdf = np.cumsum(topic)
    rank = np.minimum(np.searchsorted(tcdf, rng.random(n_topic) * tcdf[-1], side="right"),
                      t_size - 1)
    terms[from_topic] = topics[y_true[rows[from_topic]], rank]

    # Counts per (row, term): sort the keys row * n + term, count the runs.
    keys = rows * n + terms
    del rows, terms, from_topic
    keys.sort()
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    counts = np.diff(np.append(starts, keys.shape[0])).astype(np.float64)
    uniq = keys[starts]
    del keys
    row_of, col = np.divmod(uniq, n)
    df = np.bincount(col, minlength=n)
    idf = np.log((1.0 + m) / (1.0 + df)) + 1.0
    values = counts * idf[col]
    norms = np.sqrt(np.bincount(row_of, weights=values * values, minlength=m))
    values /= norms[row_of]
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of, minlength=m), out=indptr[1:])
    index_dtype = np.int32 if max(n, uniq.shape[0]) <= np.iinfo(np.int32).max else np.int64
    X = scipy.sparse.csr_matrix(
        (values.astype(dt), col.astype(index_dtype), indptr.astype(index_dtype)),
        shape=(m, n))

    noisy = rng.random(m) < _LABEL_NOISE
    y = y_true.copy()
    y[noisy] = rng.integers(0, k, size=int(noisy.sum()))
    return X, y
