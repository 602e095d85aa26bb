"""Dask: the weights inside the blocks' tasks against a broadcast before them.

    python benchmarks/dask_rounds.py [--shapes 2000x8x4,2000x784x10,2000x784x100,2000x3000x100]
                                     [--solvers bgd,lbfgs,newton] [--rounds 5] [--workers 2]

On a ``distributed.LocalCluster`` of ``--workers`` processes (one thread
each), X of each shape in 4 row blocks persisted there, float64: one
objective evaluation (``loss_grad`` at zero weights; best of 5 calls a
round) and one fit per solver (``max_iter=20``, ``tol=0``), each with the
weights sent the two ways ``fastsoftmax._dask`` has: broadcast once
(``INLINE_BYTES`` set to 0: a ``scatter`` round trip, then the tasks) and
as it chooses (inside the tasks where all their copies come to at most
``INLINE_BYTES``). The two alternate, the order swapped every round, after
a warm-up round; the table has the medians over ``--rounds`` rounds and
their ratio (below 1: the choice faster). Asserts nothing.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from _common import (  # benchmarks/ is on the path of a script run from it
    at_least_one,
    best_of,
    local_cluster,
)

from fastsoftmax import SoftmaxRegression, _dask


def _data(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, m)
    X = rng.standard_normal((m, n))
    return X, y


def _jobs(objective, coef, intercept, dX, dy, solvers):
    """What is timed: one evaluation (best of 5 calls), then a fit per solver; each returns s."""
    def evaluation():
        return best_of(lambda: objective.loss_grad(coef, intercept), 5)

    def fit(solver):
        model = SoftmaxRegression(solver=solver, max_iter=20, tol=0.0, alpha=1e-3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return best_of(lambda: model.fit(dX, dy), 1)

    jobs = {"evaluation": evaluation}
    for solver in solvers:
        jobs[f"{solver} fit, 20 iterations"] = lambda solver=solver: fit(solver)
    return jobs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="2000x8x4,2000x784x10,2000x784x100,2000x3000x100")
    ap.add_argument("--solvers", default="bgd,lbfgs,newton")
    ap.add_argument("--rounds", type=at_least_one, default=5)
    ap.add_argument("--workers", type=at_least_one, default=2)
    args = ap.parse_args(argv)
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    except ValueError:
        ap.error(f"--shapes: MxNxK,..., not {args.shapes!r}")
    if any(len(s) != 3 or min(s) < 1 for s in shapes):
        ap.error(f"--shapes: MxNxK,..., not {args.shapes!r}")
    solvers = [s for s in args.solvers.split(",") if s]
    if not set(solvers) <= {"bgd", "lbfgs", "newton"}:
        ap.error(f"--solvers: of bgd, lbfgs, newton, not {args.solvers!r}")

    import dask.array as da

    default = _dask.INLINE_BYTES
    print(f"\n{args.workers} worker processes, 4 row blocks, float64; medians of "
          f"{args.rounds} rounds (ms)")
    print("| (m, n, k) | weights KB | what | broadcast | as chosen | chosen / broadcast |")
    print("|---|---:|---|---:|---:|---:|")
    with local_cluster(args.workers):  # the default client of the persists and fits
        try:
            for m, n, k in shapes:
                X, y = _data(m, n, k)
                rows = -(-m // 4)
                dX = da.from_array(X, chunks=(rows, n)).persist()
                dy = da.from_array(y, chunks=rows).persist()
                data, _ = _dask.training_data(dX, dy, None, class_weight=None)
                objective = data.objective()
                coef, intercept = np.zeros((k, n)), np.zeros(k)
                jobs = _jobs(objective, coef, intercept, dX, dy, solvers)
                for what, job in jobs.items():
                    times = {"broadcast": [], "chosen": []}
                    for r in range(args.rounds + 1):
                        order = ("broadcast", "chosen") if r % 2 else ("chosen", "broadcast")
                        for way in order:
                            _dask.INLINE_BYTES = 0 if way == "broadcast" else default
                            t = job()
                            if r:
                                times[way].append(t)
                    b, c = (1e3 * float(np.median(times[w])) for w in ("broadcast", "chosen"))
                    print(f"| ({m}, {n}, {k}) | {coef.nbytes // 1024} | {what} | {b:.1f} | {c:.1f} "
                          f"| {c / b:.2f} |", flush=True)
        finally:
            _dask.INLINE_BYTES = default


if __name__ == "__main__":
    main()
