"""``fastsoftmax demo``: every solver on three problems, the kernel's speed-up, plots.

The problems: scikit-learn's digits, the toy data and a sparse text-like one.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from typing import Any

import numpy as np

from ._common import apply_scaler, progress_wanted, standardize


def _speedup(m: int, n: int, k: int, dtype: Any, repeats: int, seed: int,
             quick: bool = False) -> tuple[float, float]:
    """Median seconds of (fused, reference) loss_and_grad on a random problem."""
    from .. import loss_and_grad, reference
    from ..bench import interleaved

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n), dtype=np.float64).astype(dtype)
    y = rng.integers(0, k, size=m)
    W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
    b = np.zeros(k, dtype=dtype)
    # Timed alternately with a pause before each call, as `fastsoftmax bench`
    # does: OpenBLAS's threads keep spinning for a while after the
    # reference's matrix products and would take a core from the fused
    # kernel's threads (timed back to back, the MNIST-shaped ratio halved).
    fused, plain = interleaved([lambda: loss_and_grad(X, y, W, b, alpha=1e-4),
                                lambda: reference.loss_and_grad(X, y, W, b, alpha=1e-4)],
                               repeats, settle=0.05 if quick else 0.2)
    return fused, plain


def _fit_solvers(X: Any, y: np.ndarray, X_test: Any, y_test: np.ndarray,
                 quick: bool, verbose: int) -> dict[str, tuple[Any, float, float, str]]:
    from sklearn.exceptions import ConvergenceWarning

    from .. import SoftmaxRegression

    settings: dict[str, dict[str, Any]] = {
        "newton": dict(max_iter=20 if quick else 100),
        "lbfgs": dict(max_iter=40 if quick else 200),
        "sgd": dict(max_iter=5 if quick else 30, batch_size=32, eta0=0.05),
        "bgd": dict(max_iter=40 if quick else 300, eta0=0.5),
    }
    results = {}
    for solver, params in settings.items():
        # Untimed warm-up on a few rows, so the time shown is training, not JIT compiling.
        few = np.concatenate([np.flatnonzero(y == c)[:3] for c in np.unique(y)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            SoftmaxRegression(solver, max_iter=2, random_state=0, **{
                key: v for key, v in params.items() if key != "max_iter"
            }).fit(X[few], y[few])
        model = SoftmaxRegression(solver, alpha=1e-4, random_state=0, verbose=verbose,
                                  **params)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            start = time.perf_counter()
            model.fit(X, y)
            elapsed = time.perf_counter() - start
        note = ("max_iter reached" if any(issubclass(w.category, ConvergenceWarning)
                                          for w in caught) else "converged")
        for w in caught:
            if not issubclass(w.category, ConvergenceWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        acc = float(np.mean(model.predict(X_test) == y_test))
        results[solver] = (model, acc, elapsed, note)
    return results


def _print_results(title: str, results: dict[str, tuple[Any, float, float, str]]) -> None:
    print(title)
    print(f"  {'solver':<7} {'test accuracy':>13} {'train time':>11} {'iterations':>11}")
    for solver, (model, acc, elapsed, note) in results.items():
        unit = "epochs" if solver == "sgd" else "iter."
        print(f"  {solver:<7} {acc:>13.4f} {elapsed:>9.3f} s {model.n_iter_:>5} {unit:<6} "
              f"({note})")


def demo(args: argparse.Namespace) -> int:
    from sklearn.model_selection import train_test_split

    from ..datasets import load_digits, make_blobs

    try:
        import matplotlib  # noqa: F401

        plots = True
    except ImportError:
        plots = False
    quick = args.quick
    verbose = 1 if progress_wanted(args.progress) else 0

    X, y = load_digits()
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    mean, scale = standardize(Xtr)
    Xtr, Xte = apply_scaler(Xtr, mean, scale), apply_scaler(Xte, mean, scale)
    digits = _fit_solvers(Xtr, ytr, Xte, yte, quick, verbose)
    _print_results(f"digits: {Xtr.shape[0]} training / {Xte.shape[0]} test rows, "
                   f"{X.shape[1]} features (8 x 8 pixels, standardised), 10 classes", digits)

    Xb, yb = make_blobs(random_state=0)
    Btr, Bte, btr, bte = train_test_split(Xb, yb, test_size=0.25, stratify=yb, random_state=0)
    toy = _fit_solvers(Btr, btr, Bte, bte, quick, verbose)
    print()
    _print_results("toy data of the lecture notes: 3 Gaussian classes in 2-D, means (2,2), "
                   f"(8,3), (3,6); {Btr.shape[0]} training / {Bte.shape[0]} test rows", toy)

    from ..datasets import make_text_like

    Xs, ys = make_text_like(n_samples=1500 if quick else 6000, n_features=20_000, n_classes=5,
                            nnz_per_row=60, random_state=0)
    Str, Ste, str_, ste = train_test_split(Xs, ys, test_size=0.25, stratify=ys, random_state=0)
    text = _fit_solvers(Str, str_, Ste, ste, quick, verbose)
    print()
    _print_results(f"sparse text-like data (TF-IDF, scipy.sparse CSR, never densified): "
                   f"{Str.shape[0]} training / {Ste.shape[0]} test documents, "
                   f"{Xs.shape[1]} terms, {Xs.nnz / Xs.shape[0]:.0f} per document, 5 classes",
                   text)

    repeats = 3 if quick else 5
    problems = [("digits-sized", Xtr.shape[0], X.shape[1], 10, np.float64),
                ("MNIST-shaped", 10_000 if quick else 60_000, 784, 10, np.float32)]
    from numba import get_num_threads

    print()
    print(f"fused fastsoftmax.loss_and_grad vs fastsoftmax.reference.loss_and_grad "
          f"(median of {repeats}, timed alternately after a warm-up; "
          f"{get_num_threads()} Numba threads)")
    for i, (name, m, n, k, dt) in enumerate(problems):
        fused, plain = _speedup(m, n, k, dt, repeats, seed=i, quick=quick)
        print(f"  {name:<13} {m:>6} x {n:>3} x {k:<2} {np.dtype(dt).name}: "
              f"{fused * 1e3:8.2f} ms vs {plain * 1e3:8.2f} ms  -> {plain / fused:5.1f}x")

    print()
    if not plots:
        print("plots skipped: matplotlib is not installed (pip install fastsoftmax[plot])")
        return 0
    from .. import plot

    os.makedirs(args.out, exist_ok=True)
    written = []

    def save(fig: Any, name: str) -> None:
        written.append(plot.save(fig, os.path.join(args.out, name)))

    def curves(results: dict[str, tuple[Any, float, float, str]], title: str) -> Any:
        fig = None
        for model, *_ in results.values():
            fig = plot.loss_curve(model, ax=None if fig is None else fig.axes[0])
        assert fig is not None
        fig.axes[0].set_xlabel("iteration (newton, lbfgs, bgd) / epoch (sgd)")
        fig.axes[0].set_title(title)
        return fig

    best = digits["newton"][0]
    save(curves(digits, "digits: training loss"), "digits_loss_curves.png")
    save(plot.confusion_matrix(best, Xte, yte), "digits_confusion_matrix.png")
    save(plot.class_weights(best, (8, 8)), "digits_class_weights.png")
    save(plot.decision_regions(toy["lbfgs"][0], Xb, yb), "toy_decision_regions.png")
    save(curves(toy, "toy data: training loss"), "toy_loss_curves.png")
    save(curves(text, "sparse text-like data: training loss"), "text_loss_curves.png")
    print(f"plots written to {args.out}{os.sep}: "
          + ", ".join(os.path.basename(p) for p in written))
    return 0

