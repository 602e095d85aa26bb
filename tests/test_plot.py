"""fastsoftmax.plot renders headlessly to real PNG files of the expected size."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from types import SimpleNamespace

os.environ["MPLBACKEND"] = "Agg"  # before matplotlib is imported anywhere in this process

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fastsoftmax import SoftmaxRegression, datasets, plot  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    """(width, height) from the PNG's IHDR chunk, after checking the signature."""
    with open(path, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def blobs_model():
    X, y = datasets.make_blobs(n_per_class=100, random_state=0)
    return SoftmaxRegression(random_state=0).fit(X, y), X, y


@pytest.fixture(scope="module")
def digits_model():
    X, y = datasets.load_digits()
    X = (X - X.mean(axis=0)) / np.where(X.std(axis=0) > 0, X.std(axis=0), 1)
    return SoftmaxRegression(max_iter=30, tol=1e-2).fit(X, y), X, y


def test_loss_curve_png(blobs_model, tmp_path):
    model, _, _ = blobs_model
    fig = plot.loss_curve(model)
    path = plot.save(fig, tmp_path / "sub" / "loss.png")
    assert png_size(path) == (640, 480)
    assert fig.axes[0].lines[0].get_ydata().tolist() == model.loss_curve_


def test_decision_regions_png(blobs_model, tmp_path):
    model, X, y = blobs_model
    fig = plot.decision_regions(model, X, y, resolution=50)
    fig.savefig(tmp_path / "regions.png", dpi=50)
    assert png_size(tmp_path / "regions.png") == (320, 240)
    import matplotlib.image

    img = matplotlib.image.imread(tmp_path / "regions.png")
    assert img.shape[:2] == (240, 320)
    assert img.std() > 0.05  # not a blank canvas


def test_confusion_matrix_png(digits_model, tmp_path):
    model, X, y = digits_model
    fig = plot.confusion_matrix(model, X, y)
    path = plot.save(fig, tmp_path / "cm.png", dpi=80)
    # 10 classes: a figure of (4 + 0.45 * 10) x 0.85 of that inches, at 80 dots per inch.
    assert png_size(path) == (680, 578)
    # 30 classes or more: the size is capped at 12 inches wide.
    many = SimpleNamespace(coef_=np.zeros((40, 2)), intercept_=np.zeros(40),
                           classes_=np.arange(40), predict=lambda X: np.arange(len(X)) % 40)
    path = plot.save(plot.confusion_matrix(many, np.zeros((80, 2)), np.arange(80) % 40),
                     tmp_path / "cm40.png", dpi=50)
    assert png_size(path) == (600, 510)
    # Counts shown in the cells add up to the number of rows.
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert sum(int(t) for t in texts) == len(y)


def test_class_weights_png_infers_8x8(digits_model, tmp_path):
    model, _, _ = digits_model
    fig = plot.class_weights(model)
    path = plot.save(fig, tmp_path / "w.png")
    # 10 tiles, 5 per row: (2 * 5 + 1) x (2 * 2 + 0.6) inches at 100 dots per inch.
    assert png_size(path) == (1100, 460)
    mosaic = fig.axes[0].images[0].get_array()
    assert mosaic.shape == (2 * 9 - 1, 5 * 9 - 1)  # 10 tiles of 8x8, 5 per row
    np.testing.assert_allclose(mosaic[:8, :8], model.coef_[0].reshape(8, 8))


def test_class_weights_png_infers_28x28(tmp_path):
    # An MNIST-shaped model: 10 classes of 784 = 28 x 28 weights, each class its own pattern.
    rng = np.random.default_rng(0)
    coef = rng.standard_normal((10, 784)).astype(np.float32)
    model = SimpleNamespace(coef_=coef, intercept_=np.zeros(10, np.float32),
                            classes_=np.arange(10))
    fig = plot.class_weights(model)
    mosaic = fig.axes[0].images[0].get_array()
    assert mosaic.shape == (2 * 29 - 1, 5 * 29 - 1)  # 10 tiles of 28x28, 5 per row
    np.testing.assert_array_equal(mosaic[:28, :28], coef[0].reshape(28, 28))
    np.testing.assert_array_equal(mosaic[29:, 29 * 4:], coef[9].reshape(28, 28))
    gaps = np.ma.getmaskarray(np.ma.masked_invalid(mosaic))  # background between tiles
    assert gaps[28, :].all() and gaps[:, 28].all() and not gaps[:28, :28].any()
    path = plot.save(fig, tmp_path / "mnist_w.png", dpi=60)
    # Same layout as for 8 x 8 digits: 11 x 4.6 inches, here at 60 dots per inch.
    assert png_size(path) == (660, 276)
    import matplotlib.image

    assert matplotlib.image.imread(path).std() > 0.05  # the weights are drawn


def test_class_weights_shapes(blobs_model):
    model, _, _ = blobs_model
    with pytest.raises(ValueError, match="not a square number"):
        plot.class_weights(SimpleNamespace(coef_=np.ones((2, 3)), intercept_=np.zeros(2),
                                           classes_=np.array([0, 1])))
    with pytest.raises(ValueError, match="has 6 pixels"):
        plot.class_weights(model, image_shape=(2, 3))
    fig = plot.class_weights(model, image_shape=(1, 2))
    assert fig.axes[0].images[0].get_array().shape == (1, 3 * 3 - 1)


def test_draws_into_given_axes(blobs_model):
    from matplotlib.figure import Figure

    model, X, y = blobs_model
    fig = Figure()
    ax1, ax2 = fig.subplots(1, 2)
    assert plot.loss_curve(model, ax=ax1) is fig
    assert plot.decision_regions(model, X, y, ax=ax2, resolution=20) is fig
    assert len(ax1.lines) == 1 and len(ax2.collections) >= 3


def test_decision_regions_needs_2d(digits_model):
    model, X, y = digits_model
    with pytest.raises(ValueError, match="2-D data"):
        plot.decision_regions(model, X, y)


def test_unfitted_model():
    with pytest.raises(ValueError, match="fit"):
        plot.loss_curve(SoftmaxRegression())
    with pytest.raises(ValueError, match="not fitted"):
        plot.class_weights(SoftmaxRegression())


def test_missing_matplotlib_says_how_to_install(blobs_model, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import now fails
    with pytest.raises(ImportError, match=r"pip install fastsoftmax\[plot\]"):
        plot.loss_curve(blobs_model[0])


def test_import_fastsoftmax_does_not_import_matplotlib_or_tqdm():
    code = ("import sys, fastsoftmax, fastsoftmax.plot, fastsoftmax.datasets, fastsoftmax.cli; "
            "print(sorted(m for m in ('matplotlib', 'tqdm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
