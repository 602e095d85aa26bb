"""Plots of a fitted :class:`~fastsoftmax.SoftmaxRegression` (needs matplotlib).

Install with ``pip install fastsoftmax[plot]``. matplotlib is imported when a
function is called, not when fastsoftmax is imported.

Every function draws into ``ax`` when given one (for instance from
``matplotlib.pyplot.subplots()``, to show it interactively) and otherwise into
a new :class:`matplotlib.figure.Figure` that is not registered with pyplot:
it renders with the Agg backend, so it works without a display, and it is
freed like any Python object. Each returns the Figure; write it with
``fig.savefig("name.png")`` or :func:`save`.

loss_curve
    Training (and held-out) loss per iteration or epoch.
decision_regions
    The class regions of a model on 2-D data, with the points on top: the
    picture of the lecture notes' toy example.
confusion_matrix
    Counts of true against predicted class.
class_weights
    Each class's weight vector as an image (8 x 8 digits, 28 x 28 MNIST).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

__all__ = ["loss_curve", "decision_regions", "confusion_matrix", "class_weights", "save"]

_INSTALL_HINT = "fastsoftmax.plot needs matplotlib: pip install fastsoftmax[plot]"


def _new_axes(ax: Any, figsize: tuple[float, float]) -> tuple[Any, Any]:
    """(fig, ax): the given ax and its figure, or a fresh pyplot-free Figure."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(_INSTALL_HINT) from None
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def _fitted(model: Any) -> None:
    for name in ("coef_", "intercept_", "classes_"):
        if not hasattr(model, name):
            raise ValueError(f"the model is not fitted (no {name}); call fit first")


def _class_colours(k: int) -> Any:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if k <= 10 else "tab20"]
    return [cmap(j % cmap.N) for j in range(k)]


def loss_curve(model: Any, ax: Any = None) -> Any:
    """Plot ``model.loss_curve_`` (and ``validation_loss_curve_`` if any).

    Parameters
    ----------
    model : fitted SoftmaxRegression
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    curve = list(getattr(model, "loss_curve_", []))
    if not curve:
        raise ValueError("the model has no loss_curve_; fit it first")
    fig, ax = _new_axes(ax, (6.4, 4.8))
    solver = getattr(model, "solver", "")
    steps = np.arange(1, len(curve) + 1)
    ax.plot(steps, curve, marker="." if len(curve) < 50 else None,
            label=f"{solver} training loss".strip())
    val = list(getattr(model, "validation_loss_curve_", []))
    if val:
        ax.plot(np.arange(1, len(val) + 1), val, linestyle="--",
                label=f"{solver} held-out loss".strip())
    ax.set_xlabel("epoch" if solver == "sgd" else "iteration")
    ax.set_ylabel("loss (cross-entropy + L2)")
    if min(curve) > 0 and max(curve) / min(curve) > 20:
        ax.set_yscale("log")
    ax.legend()
    ax.grid(True, alpha=0.3)
    return fig


def decision_regions(model: Any, X: Any, y: Any, ax: Any = None, *,
                     resolution: int = 300) -> Any:
    """Colour the plane by predicted class and scatter the labelled points.

    Parameters
    ----------
    model : fitted SoftmaxRegression on 2 features
    X : array_like of shape (m, 2)
    y : array_like of shape (m,)
        Labels among ``model.classes_``.
    ax : matplotlib Axes, optional
    resolution : int, default=300
        Grid points along each axis.

    Returns
    -------
    matplotlib.figure.Figure
    """
    _fitted(model)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    if X.ndim != 2 or X.shape[1] != 2:
        raise ValueError(f"decision_regions needs 2-D data, X has shape {X.shape}")
    if model.coef_.shape[1] != 2:
        raise ValueError(f"the model has {model.coef_.shape[1]} features, not 2")
    if y.shape != (X.shape[0],):
        raise ValueError(f"y has shape {y.shape}, expected ({X.shape[0]},)")
    classes = np.asarray(model.classes_)
    k = len(classes)
    fig, ax = _new_axes(ax, (6.4, 4.8))
    from matplotlib.colors import BoundaryNorm, ListedColormap

    lo, hi = X.min(axis=0), X.max(axis=0)
    pad = 0.05 * np.maximum(hi - lo, 1e-12)
    g0 = np.linspace(lo[0] - pad[0], hi[0] + pad[0], resolution)
    g1 = np.linspace(lo[1] - pad[1], hi[1] + pad[1], resolution)
    G0, G1 = np.meshgrid(g0, g1)
    grid = np.column_stack([G0.ravel(), G1.ravel()]).astype(model.coef_.dtype)
    pred = np.searchsorted(classes, model.predict(grid)).reshape(G0.shape)
    colours = _class_colours(k)
    cmap = ListedColormap(colours)
    norm = BoundaryNorm(np.arange(-0.5, k + 0.5), k)
    ax.pcolormesh(G0, G1, pred, cmap=cmap, norm=norm, alpha=0.25, shading="auto")
    for j, label in enumerate(classes):
        mask = y == label
        ax.scatter(X[mask, 0], X[mask, 1], s=8, color=colours[j], edgecolors="none",
                   label=str(label))
    ax.set_xlim(g0[0], g0[-1])
    ax.set_ylim(g1[0], g1[-1])
    ax.set_xlabel("x1")
    ax.set_ylabel("x2")
    acc = float(np.mean(model.predict(X.astype(model.coef_.dtype)) == y))
    ax.set_title(f"decision regions (accuracy {acc:.3f})")
    ax.legend(title="class", loc="best", markerscale=2)
    return fig


def confusion_matrix(model: Any, X: Any, y: Any, ax: Any = None, *,
                     normalize: bool = False) -> Any:
    """Matrix of true (rows) against predicted (columns) classes.

    Parameters
    ----------
    model : fitted SoftmaxRegression
    X : array_like of shape (m, n)
    y : array_like of shape (m,)
    ax : matplotlib Axes, optional
    normalize : bool, default=False
        Show the share of each true class instead of counts.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from sklearn.metrics import confusion_matrix as _cm

    _fitted(model)
    y = np.asarray(y)
    pred = model.predict(X)
    classes = np.asarray(model.classes_)
    cm = _cm(y, pred, labels=classes).astype(np.float64)
    if normalize:
        cm /= np.maximum(cm.sum(axis=1, keepdims=True), 1)
    k = len(classes)
    size = min(4.0 + 0.45 * k, 12.0)
    fig, ax = _new_axes(ax, (size, size * 0.85))
    im = ax.imshow(cm, cmap="Blues", vmin=0)
    fig.colorbar(im, ax=ax, shrink=0.8)
    if k <= 30:
        top = cm.max() if cm.size else 0
        for i in range(k):
            for j in range(k):
                text = f"{cm[i, j]:.2f}" if normalize else f"{int(cm[i, j])}"
                ax.text(j, i, text, ha="center", va="center", fontsize=8,
                        color="white" if cm[i, j] > 0.6 * top else "black")
    ticks = np.arange(k)
    names = [str(c) for c in classes]
    ax.set_xticks(ticks, names, rotation=90 if max(map(len, names)) > 3 else 0)
    ax.set_yticks(ticks, names)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(f"confusion matrix (accuracy {np.mean(pred == y):.3f})")
    return fig


def class_weights(model: Any, image_shape: tuple[int, int] | None = None,
                  ax: Any = None) -> Any:
    """Each class's weight vector drawn as an image, all on one colour scale.

    Red pixels push towards the class, blue ones away from it. The k images
    are tiled into one mosaic, so the plot fits in a single Axes.

    Parameters
    ----------
    model : fitted SoftmaxRegression
    image_shape : (rows, cols), optional
        Shape of one image, rows * cols = n_features; inferred when
        n_features is a perfect square (8 x 8 digits, 28 x 28 MNIST).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    _fitted(model)
    coef = np.asarray(model.coef_, dtype=np.float64)
    k, n = coef.shape
    if image_shape is None:
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(
                f"cannot infer image_shape: {n} features is not a square number; "
                "pass image_shape=(rows, cols)"
            )
        image_shape = (side, side)
    rows, cols = (int(v) for v in image_shape)
    if rows * cols != n:
        raise ValueError(f"image_shape {image_shape} has {rows * cols} pixels, "
                         f"the model has {n} features")
    per_row = min(k, 5)
    grid_rows = math.ceil(k / per_row)
    # One NaN pixel between tiles, drawn as background.
    mosaic = np.full((grid_rows * (rows + 1) - 1, per_row * (cols + 1) - 1), np.nan)
    for j in range(k):
        r, c = divmod(j, per_row)
        mosaic[r * (rows + 1): r * (rows + 1) + rows,
               c * (cols + 1): c * (cols + 1) + cols] = coef[j].reshape(rows, cols)
    fig, ax = _new_axes(ax, (2.0 * per_row + 1.0, 2.0 * grid_rows + 0.6))
    vmax = float(np.nanmax(np.abs(mosaic))) or 1.0
    im = ax.imshow(mosaic, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
    for j, label in enumerate(model.classes_):
        r, c = divmod(j, per_row)
        ax.text(c * (cols + 1) + cols / 2 - 0.5, r * (rows + 1) - 0.6, str(label),
                ha="center", va="bottom", fontsize=9)
    ax.set_axis_off()
    ax.set_title("weights per class", pad=14)
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def save(fig: Any, path: str | os.PathLike, *, dpi: float = 100) -> str:
    """Write ``fig`` to ``path`` (format from the extension), creating its folder.

    The image is ``figsize * dpi`` pixels. Returns the path as a string.
    """
    path = os.fspath(path)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path
