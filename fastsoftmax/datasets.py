"""Data sets for examples and the command line; nothing here downloads anything.

make_blobs
    The lecture notes' toy problem: 3 Gaussian classes in 2-D.
load_digits
    scikit-learn's 8 x 8 handwritten digits (shipped with scikit-learn).
load_mnist
    MNIST from the standard IDX files in a folder you already have.
read_idx
    Any IDX file (the format MNIST is distributed in), gzipped or not.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["make_blobs", "load_digits", "load_mnist", "read_idx"]

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
