"""fastsoftmax.datasets: the notes' toy blobs, digits, and the MNIST IDX reader."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from fastsoftmax import datasets


# ------------------------------------------------------------------ blobs
def test_make_blobs_defaults_are_the_notes_toy_problem():
    X, y = datasets.make_blobs(random_state=0)
    assert X.shape == (1500, 2) and X.dtype == np.float64 and X.flags.c_contiguous
    assert y.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(y), [500, 500, 500])
    # Rows grouped by class, in the order of the means, as in the notes.
    np.testing.assert_array_equal(y, np.repeat([0, 1, 2], 500))
    for j, mean in enumerate([(2, 2), (8, 3), (3, 6)]):
        pts = X[y == j]
        # Standard error of a mean of 500 unit-variance draws is 0.045.
        np.testing.assert_allclose(pts.mean(axis=0), mean, atol=0.2)
        np.testing.assert_allclose(np.cov(pts.T), np.eye(2), atol=0.2)


def test_make_blobs_seed_dtype_and_custom_means():
    a, ya = datasets.make_blobs(n_per_class=10, random_state=3)
    b, yb = datasets.make_blobs(n_per_class=10, random_state=3)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ya, yb)
    X, y = datasets.make_blobs(n_per_class=4, means=[(0, 0, 0), (5, 5, 5)],
                               cov=0.01 * np.eye(3), random_state=0, dtype=np.float32)
    assert X.shape == (8, 3) and X.dtype == np.float32
    assert np.all(np.abs(X[y == 1] - 5) < 1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_per_class=0), "n_per_class"),
    (dict(means=[1, 2]), "means"),
    (dict(cov=np.eye(3)), "cov"),
])
def test_make_blobs_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        datasets.make_blobs(**kwargs)


def test_load_digits():
    X, y = datasets.load_digits()
    assert X.shape == (1797, 64) and X.dtype == np.float64
    assert set(np.unique(y)) == set(range(10))
    assert X.min() == 0 and X.max() == 16
    bunch = datasets.load_digits(return_X_y=False, dtype=np.float32)
    assert bunch.data.dtype == np.float32 and bunch.images.shape == (1797, 8, 8)


# ------------------------------------------------------------------ MNIST
def _idx_bytes(array: np.ndarray, code: int = 0x08) -> bytes:
    header = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", d)
                                                         for d in array.shape)
    return header + array.astype(">u1").tobytes()


def _write_mnist(folder, kind, images, labels, *, gz):
    suffix = ".gz" if gz else ""
    opener = gzip.open if gz else open
    with opener(folder / f"{kind}-images-idx3-ubyte{suffix}", "wb") as fh:
        fh.write(_idx_bytes(images))
    with opener(folder / f"{kind}-labels-idx1-ubyte{suffix}", "wb") as fh:
        fh.write(_idx_bytes(labels))


@pytest.fixture
def tiny_mnist(rng):
    images = rng.integers(0, 256, size=(7, 28, 28)).astype(np.uint8)
    labels = rng.integers(0, 10, size=7).astype(np.uint8)
    return images, labels


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "raw"])
def test_load_mnist_reads_idx_files(tmp_path, tiny_mnist, gz):
    images, labels = tiny_mnist
    _write_mnist(tmp_path, "train", images, labels, gz=gz)
    _write_mnist(tmp_path, "t10k", images[:3], labels[:3], gz=gz)
    X, y = datasets.load_mnist(tmp_path)
    assert X.shape == (7, 784) and X.dtype == np.float32
    np.testing.assert_allclose(X, images.reshape(7, -1) / np.float32(255), rtol=1e-6)
    np.testing.assert_array_equal(y, labels)
    assert y.dtype == np.int64
    Xt, yt = datasets.load_mnist(str(tmp_path), kind="test", dtype=np.float64, scale=False)
    np.testing.assert_array_equal(Xt, images[:3].reshape(3, -1))
    np.testing.assert_array_equal(yt, labels[:3])


def test_read_idx_any_shape(tmp_path):
    a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a.idx").write_bytes(_idx_bytes(a))
    np.testing.assert_array_equal(datasets.read_idx(tmp_path / "a.idx"), a)


def test_load_mnist_corrupted_magic(tmp_path, tiny_mnist):
    images, labels = tiny_mnist
    _write_mnist(tmp_path, "train", images, labels, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    raw = bytearray(path.read_bytes())
    raw[3] = 0x02  # claims 2 dimensions
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte: magic number 0x00000802"):
        datasets.load_mnist(tmp_path)


def test_load_mnist_labels_swapped_for_images(tmp_path, tiny_mnist):
    images, labels = tiny_mnist
    _write_mnist(tmp_path, "train", images, labels, gz=True)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(
        (tmp_path / "train-labels-idx1-ubyte.gz").read_bytes())
    with pytest.raises(ValueError, match="expected 0x00000803 for MNIST images"):
        datasets.load_mnist(tmp_path)


def test_load_mnist_truncated_file(tmp_path, tiny_mnist):
    images, labels = tiny_mnist
    _write_mnist(tmp_path, "train", images, labels, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(ValueError, match="truncated"):
        datasets.load_mnist(tmp_path)


def test_load_mnist_count_mismatch(tmp_path, tiny_mnist):
    images, labels = tiny_mnist
    _write_mnist(tmp_path, "train", images, labels[:5], gz=False)
    with pytest.raises(ValueError, match="7 images but .* 5 labels"):
        datasets.load_mnist(tmp_path)


def test_load_mnist_bad_gzip(tmp_path, tiny_mnist):
    images, labels = tiny_mnist
    _write_mnist(tmp_path, "train", images, labels, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(ValueError, match="train-images-idx3-ubyte.gz"):
        datasets.load_mnist(tmp_path)


def test_load_mnist_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        datasets.load_mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        datasets.load_mnist(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="kind"):
        datasets.load_mnist(tmp_path, kind="validation")
