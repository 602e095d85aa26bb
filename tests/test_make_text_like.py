"""fastsoftmax.datasets.make_text_like: a sparse, Zipf-distributed TF-IDF problem."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fastsoftmax import datasets


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
