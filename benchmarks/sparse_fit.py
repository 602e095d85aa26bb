"""A Newton fit on the 20-newsgroups shape with each sparse gradient scheme, against sag.

    python benchmarks/sparse_fit.py [--rounds 3]

Data: ``make_text_like(11314, 130107, 20, 150)`` (TF-IDF-like unit rows,
~150 terms each, 20 classes, float64), the shape of
``end_to_end.py --data news-like``. Contenders, interleaved over
``--rounds`` rounds after one untimed fit each: ``SoftmaxRegression("newton",
alpha=1/m, tol=1e-5)`` with the scheme the rule picks and with each scheme
forced (``scatter``, ``transpose``, ``panels``; see
``fastsoftmax._sparse.gradient_scheme``), and scikit-learn's
``LogisticRegression(solver="sag", C=1, tol=1e-4)`` with BLAS held at one
thread: the tolerances at which each reached within 1e-6 of the optimum
in ``end_to_end.py``'s ladder (the objective of each fit is printed).
Prints a Markdown table of medians; asserts nothing.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from fastsoftmax import SoftmaxRegression, _sparse, datasets, reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=at_least_one, default=3)
    args = ap.parse_args()
    X, y = datasets.make_text_like(11314, 130107, 20, 150, random_state=0, dtype=np.float64)
    m = X.shape[0]
    rule = _sparse.gradient_scheme

    def newton(scheme):
        def fit():
            _sparse.gradient_scheme = rule if scheme is None else (lambda *a, **k: scheme)
            try:
                return SoftmaxRegression("newton", alpha=1.0 / m, tol=1e-5).fit(X, y)
            finally:
                _sparse.gradient_scheme = rule
        return fit

    def sag():
        with warnings.catch_warnings(), threadpool_limits(1):
            warnings.simplefilter("ignore")
            return LogisticRegression(solver="sag", C=1.0, tol=1e-4, max_iter=1000).fit(X, y)

    chosen = rule(_sparse.as_csr(X), 20)
    fns = {f"fastsoftmax newton, the rule's scheme ({chosen})": newton(None),
           "fastsoftmax newton, scatter": newton("scatter"),
           "fastsoftmax newton, transpose": newton("transpose"),
           "fastsoftmax newton, panels": newton("panels"),
           "scikit-learn sag, tol 1e-4, BLAS 1 thread": sag}
    objective = {}
    for name, fit in fns.items():
        model = fit()
        objective[name] = reference.loss_and_grad(X, y, model.coef_.T, model.intercept_,
                                                  alpha=1.0 / m)[0]
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fit in fns.items():
            start = time.perf_counter()
            fit()
            times[name].append(time.perf_counter() - start)
    sag_s = float(np.median(times["scikit-learn sag, tol 1e-4, BLAS 1 thread"]))
    print(f"news-like: {m} x {X.shape[1]}, nnz {X.nnz:,}, 20 classes, float64; medians of "
          f"{args.rounds} interleaved rounds\n")
    print("| contender | s | / sag | objective |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        med = float(np.median(values))
        print(f"| {name} | {med:.3f} | {med / sag_s:.2f} | {objective[name]:.10f} |")


if __name__ == "__main__":
    main()
