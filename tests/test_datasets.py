"""fastsoftmax.datasets: the notes' toy blobs, digits, the MNIST IDX reader, and
make_text_like (a sparse, Zipf-distributed TF-IDF problem)."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import scipy.sparse as sp

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


# ---------------------------------------------------------- make_text_like

@pytest.fixture(scope="module")
def text():
    return datasets.make_text_like(4000, 3000, 5, 30, random_state=0)


def test_shape_dtype_and_format(text):
    X, y = text
    assert sp.issparse(X) and X.format == "csr" and X.shape == (4000, 3000)
    assert X.dtype == np.float64 and X.indices.dtype == np.int32
    assert X.has_canonical_format  # sorted, no duplicates
    assert y.dtype == np.int64 and y.shape == (4000,)
    assert set(np.unique(y)) == set(range(5))
    np.testing.assert_allclose(np.bincount(y), 800, rtol=0.15)


def test_rows_are_unit_norm_tfidf(text):
    X, _ = text
    counts = np.diff(X.indptr)
    assert counts.min() >= 1  # no empty rows
    assert counts.mean() == pytest.approx(30, rel=0.1)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, 1.0, rtol=1e-12)
    assert X.data.min() > 0


def test_term_frequencies_follow_zipf(text):
    X, _ = text
    df = np.bincount(X.indices, minlength=X.shape[1])
    # Background frequency ~ (rank + 1) ** -1.1: the head is far commoner than the tail.
    assert df[0] > 0.9 * X.shape[0]
    assert df[:10].mean() > 5 * df[100:110].mean() > 5 * df[2000:].mean()
    # A common term gets a smaller TF-IDF weight than a rare one.
    col = X.tocsc()
    assert np.median(col[:, 0].data) < np.median(col[:, 2000:].data)


def test_labels_are_learnable_but_not_separable():
    from sklearn.linear_model import LogisticRegression

    X, y = datasets.make_text_like(3000, 2000, 4, 30, random_state=1)
    clf = LogisticRegression(C=1.0, max_iter=300).fit(X[:2000], y[:2000])
    accuracy = clf.score(X[2000:], y[2000:])
    # Chance is 0.25; the 5 % label noise caps any classifier near 0.96
    # (0.835 measured).
    assert 0.6 < accuracy < 0.96


def test_seed_and_dtype():
    a, ya = datasets.make_text_like(50, 80, 3, 6, random_state=7)
    b, yb = datasets.make_text_like(50, 80, 3, 6, random_state=np.random.default_rng(7))
    assert (a != b).nnz == 0
    np.testing.assert_array_equal(ya, yb)
    c, _ = datasets.make_text_like(50, 80, 3, 6, random_state=7, dtype=np.float32)
    assert c.dtype == np.float32
    np.testing.assert_allclose(c.toarray(), a.toarray(), rtol=1e-6)


def test_tiny_and_dense_extremes():
    X, y = datasets.make_text_like(3, 1, 2, 1, random_state=0)
    assert X.shape == (3, 1) and X.nnz == 3
    np.testing.assert_allclose(X.toarray(), 1.0)
    X, _ = datasets.make_text_like(20, 10, 2, 10, random_state=0)
    assert X.nnz <= 200 and np.diff(X.indptr).mean() > 5


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_samples=0), "n_samples"),
    (dict(n_features=2.5), "n_features"),
    (dict(n_classes=1), "n_classes"),
    (dict(n_samples=True), "n_samples"),
    (dict(nnz_per_row=0), "nnz_per_row"),
    (dict(nnz_per_row=101), "nnz_per_row"),
    (dict(nnz_per_row="many"), "numbers"),
    (dict(zipf_exponent=0.0), "zipf_exponent"),
    (dict(zipf_exponent=np.inf), "zipf_exponent"),
    (dict(dtype=np.int32), "dtype"),
])
def test_rejects_bad_arguments(kwargs, match):
    args = dict(n_samples=10, n_features=100, n_classes=3, nnz_per_row=5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        datasets.make_text_like(**args)


def test_exported():
    assert "make_text_like" in datasets.__all__
