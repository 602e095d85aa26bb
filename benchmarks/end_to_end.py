"""Target 7: time for SoftmaxRegression(solver="lbfgs") to reach the final
training loss of scikit-learn's LogisticRegression (lbfgs, same penalty:
alpha = 1 / (C m)) on MNIST-shaped data (60000 x 784, 10 classes: noisy
class prototypes).

    python benchmarks/end_to_end.py [--m 60000] [--C 1.0] [--noise 0.35]
                                    [--contrast 1.0] [--repeats 2]

``--contrast`` scales the prototypes and ``--noise`` is the noise's standard
deviation. With the defaults the classes are nearly separable (scikit-learn
stops after about 10 iterations, so the table mostly measures set-up and
per-iteration cost); ``--contrast 0.1`` makes them overlap (about 100
iterations and ~80% training accuracy, a fit as long as real MNIST's).

scikit-learn is run to its own convergence (tol 1e-4, max_iter 1000); its
final objective J_sk = mean cross-entropy + alpha/2 ||W||² is evaluated in
float64 with fastsoftmax.reference. Our lbfgs is deterministic, so one long
fit gives the iteration N at which loss_curve_ first reaches J_sk; the fit
with max_iter=N is then timed (whole estimator: validation, label encoding,
the solver). Prints one Markdown row per dtype. Times are medians of the
repeats, scikit-learn and fastsoftmax interleaved.
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from fastsoftmax import SoftmaxRegression, reference


def mnist_like(m, n=784, k=10, seed=0, noise=0.35, contrast=1.0):
    """Noisy class prototypes in [0, 1]: 10 random 'digit' images plus noise."""
    rng = np.random.default_rng(seed)
    protos = (rng.random((k, n)) < 0.2) * rng.uniform(0.5, 1.0, (k, n))
    y = rng.integers(0, k, m)
    X = contrast * protos[y] + noise * rng.standard_normal((m, n))
    return np.clip(X, 0.0, 1.0), y


def objective(X, y, W, b, alpha):
    loss, _, _ = reference.loss_and_grad(X.astype(np.float64), y, W.astype(np.float64),
                                         b.astype(np.float64), alpha=alpha)
    return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=60000)
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--noise", type=float, default=0.35)
    ap.add_argument("--contrast", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    X64, y = mnist_like(a.m, noise=a.noise, contrast=a.contrast)
    m = X64.shape[0]
    alpha = 1.0 / (a.C * m)
    print("| dtype | scikit-learn s | its iterations | J_sk | fastsoftmax s to J_sk | "
          "our iterations | speed-up |\n|---|---:|---:|---:|---:|---:|---:|")
    for dtype in ("float64", "float32"):
        X = X64.astype(dtype)
        sk = LogisticRegression(C=a.C, solver="lbfgs", max_iter=1000, tol=1e-4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            sk.fit(X, y)
        J_sk = objective(X, y, sk.coef_.T, sk.intercept_, alpha)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            long = SoftmaxRegression("lbfgs", alpha=alpha, max_iter=1000, tol=0.0).fit(X, y)
        curve = np.asarray(long.loss_curve_)
        hit = np.flatnonzero(curve <= J_sk)
        n_iter = int(hit[0]) + 1 if hit.size else len(curve)
        t_sk, t_fs = [], []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                LogisticRegression(C=a.C, solver="lbfgs", max_iter=1000, tol=1e-4).fit(X, y)
            t_sk.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                ours = SoftmaxRegression("lbfgs", alpha=alpha, max_iter=n_iter, tol=0.0).fit(X, y)
            t_fs.append(time.perf_counter() - t0)
        J_fs = objective(X, y, ours.coef_.T, ours.intercept_, alpha)
        reached = "" if J_fs <= J_sk * (1 + 1e-12) else f" (not reached: {J_fs:.6f})"
        ts, tf = float(np.median(t_sk)), float(np.median(t_fs))
        print(f"| {dtype} | {ts:.2f} | {sk.n_iter_[0]} | {J_sk:.6f} | {tf:.2f}{reached} | "
              f"{n_iter} | **{ts / tf:.1f}** |", flush=True)


if __name__ == "__main__":
    main()
