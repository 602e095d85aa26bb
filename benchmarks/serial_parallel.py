"""Small problems: one chunk on one thread against the parallel kernel on all; the work unit.

    python benchmarks/serial_parallel.py [--part dense,units] [--rounds 9] [--quick]

``dense``: for a few shapes around the serial threshold
(``_launch.SERIAL_WORK``, counted by ``_launch.launch_work``), times the
dense gradient (rows strategy) run as one chunk on the calling thread and
as the parallel kernel on every thread, interleaved, back to back and each
call after 0.2 s idle (when the workers have gone to sleep), with the
launch decision the engine would make.

``units``: what the unit of that count costs on one thread. The dense
gradient (the engine's strategy) in ns per ``launch_work`` unit, and the
sparse gradient (``_sparse.loss_and_grad`` at one thread, its scheme for
one thread) on CSR shapes of 250,000-750,000 stored entries, 2-50
classes: its time fitted by least squares to the stored entries, the
entries times the classes and the rows (ns each), and per shape the ns per
unit of ``_launch.sparse_launch_work``, which counts a stored entry in the
dense unit. Beside each, a fitted model's ``predict_proba`` on the same
rows at one thread, per unit of the same count (a prediction is counted
as the gradient of its shape, ``_prediction._work``).

``--quick``: ``units`` on one small shape of each kind (a smoke run).

Prints Markdown tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
from _common import at_least_one, median_of  # benchmarks/ is on the path of a script run from it

import fastsoftmax as fs
from fastsoftmax._data import make_dataset
from fastsoftmax._dense import DenseEngine
from fastsoftmax._launch import SERIAL_WORK
from fastsoftmax._threads import thread_policy

try:
    from fastsoftmax._launch import launch_work
except ImportError:  # an older checkout (PYTHONPATH=it): the threshold counted m n k

    def launch_work(m: int, n: int, k: int) -> int:
        return m * n * k

SHAPES = [(300000, 20, 2), (50000, 20, 2), (20000, 20, 10), (10000, 20, 2), (5000, 50, 5),
          (2000, 100, 2)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="dense,units", help="comma-separated: dense, units")
    ap.add_argument("--rounds", type=at_least_one, default=9)
    ap.add_argument("--quick", action="store_true", help="units: one small shape of each kind")
    args = ap.parse_args(argv)
    parts = args.part.split(",")
    if set(parts) - {"dense", "units"}:
        ap.error(f"unknown part(s) in {args.part!r}")
    if "dense" in parts:
        dense(args.rounds)
    if "units" in parts:
        units(args.rounds, args.quick)


DENSE_UNIT_SHAPES = [(20000, 200, 10), (20000, 100, 10), (5000, 784, 10), (10000, 100, 100),
                     (50000, 20, 10)]
# (rows, features, classes, fraction stored): 250,000-750,000 entries, W of 2 KB to 2 MB.
SPARSE_UNIT_SHAPES = [(20000, 2000, 10, 0.01), (20000, 20000, 10, 0.001),
                      (20000, 2000, 50, 0.01), (50000, 1000, 10, 0.005),
                      (20000, 5000, 20, 0.004), (5000, 100000, 5, 0.001),
                      (50000, 300, 2, 0.05)]


def units(rounds: int, quick: bool = False) -> None:
    import scipy.sparse

    from fastsoftmax import _sparse
    from fastsoftmax._launch import sparse_launch_work

    rng = np.random.default_rng(0)
    print(f"\nOne thread, float32, medians of {rounds}\n\n| dense (m, n, k) | ms | "
          "ns per launch_work unit | predict_proba, ms | ns per unit |\n|---|---:|---:|---:|---:|")
    for m, n, k in [(200, 64, 10)] if quick else DENSE_UNIT_SHAPES:
        X = rng.standard_normal((m, n), dtype=np.float32)
        y = np.arange(m) % k
        W, b = np.zeros((n, k), np.float32), np.zeros(k, np.float32)
        t = median_of(functools.partial(fs.loss_and_grad, X, y, W, b, alpha=1e-4, n_threads=1),
                      rounds)
        tp = median_of(functools.partial(_model(X, y).predict_proba, X), rounds)
        work = launch_work(m, n, k)
        print(f"| ({m}, {n}, {k}) | {1e3 * t:.2f} | {1e9 * t / work:.3f} | {1e3 * tp:.2f} | "
              f"{1e9 * tp / work:.3f} |")
    rows, cells = [], []
    for m, n, k, density in ([(200, 500, 10, 0.02), (300, 400, 5, 0.05), (400, 300, 2, 0.1)]
                             if quick else SPARSE_UNIT_SHAPES):
        X = _sparse.as_csr(scipy.sparse.random(m, n, density=density, format="csr",
                                               random_state=0, dtype=np.float32))
        y = np.arange(m) % k
        W, b = np.zeros((n, k), np.float32), np.zeros(k, np.float32)
        XT = _sparse.transpose(X) if _sparse.gradient_scheme(X, k, 1) == "transpose" else None
        t = median_of(functools.partial(_sparse.loss_and_grad, X, y, None, W, b, 1e-4, 1, XT=XT),
                      rounds)
        tp = median_of(functools.partial(_model(X, y).predict_proba, X), rounds)
        rows.append((X.nnz, X.nnz * k, m, t))
        work = sparse_launch_work(m, X.nnz, k)
        cells.append(f"| ({m}, {n}, {k}), {X.nnz:,} stored | {1e3 * t:.2f} | "
                     f"{1e9 * t / work:.3f} | {1e3 * tp:.2f} | {1e9 * tp / work:.3f} |")
    print("\n| sparse (m, n, k) | ms | ns per sparse_launch_work unit | predict_proba, ms | "
          "ns per unit |\n|---|---:|---:|---:|---:|")
    print("\n".join(cells))
    A = np.array([r[:3] for r in rows], dtype=float)
    fit = np.linalg.lstsq(A, 1e9 * np.array([r[3] for r in rows]), rcond=None)[0]
    print(f"\nleast squares: {fit[0]:.2f} ns a stored entry, {fit[1]:.3f} ns an entry and "
          f"class, {fit[2]:.1f} ns a row")


def _model(X, y):
    """A model fitted on one thread (two iterations: its weights only need to exist)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fs.SoftmaxRegression(solver="lbfgs", max_iter=2, n_threads=1).fit(X, y)


def dense(rounds: int) -> None:
    fs.softmax(np.ones((100000, 50)))
    rng = np.random.default_rng(0)
    print("| (m, n, k) | engine's choice | one chunk ms | parallel ms | one / parallel | "
          "one chunk ms, after 0.2 s | parallel ms, after 0.2 s | one / parallel |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|")
    for m, n, k in SHAPES:
        X = rng.standard_normal((m, n)).astype(np.float32)
        data = make_dataset(X, rng.integers(0, k, m), None, None, k)
        coef = (0.1 * rng.standard_normal((k, n))).astype(np.float32)
        b = np.zeros(k, np.float32)
        engines = []
        for serial in (True, False):
            e = DenseEngine(data, "rows")
            e._serial = serial
            engines.append(e)
        cells = []
        with thread_policy(None):
            for e in engines:
                e.gradient(coef, b)
            for pause in (0.0, 0.2):
                times: list[list[float]] = [[], []]
                for _ in range(rounds):
                    for t, e in zip(times, engines, strict=True):
                        if pause:
                            time.sleep(pause)
                        t0 = time.perf_counter()
                        e.gradient(coef, b)
                        t.append(time.perf_counter() - t0)
                one, par = (float(np.median(t)) * 1e3 for t in times)
                cells += [f"{one:.2f}", f"{par:.2f}", f"**{one / par:.2f}**"]
        choice = "one chunk" if launch_work(m, n, k) < SERIAL_WORK else "parallel"
        print(f"| ({m}, {n}, {k}) | {choice} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
