"""The GEMM kernels on each BLAS library of the process: loss_and_grad's time per candidate.

    python benchmarks/blas_choice.py [--shapes 3000x784x100,...] [--dtypes float32,float64]
                                     [--rounds 9] [--threads N]
                                     [--products 1500x784x100,...]

``fastsoftmax.loss_and_grad`` with the GEMM strategy forced
(``FASTSOFTMAX_STRATEGY=gemm``), its products through each candidate of
``fastsoftmax._blas_choice.candidates()`` in turn (``FASTSOFTMAX_BLAS``,
read by every call): SciPy's BLAS, which Numba's ``np.dot`` calls (the
default), NumPy's where its routines can be called, and MKL where the
``mkl`` wheel is installed (``fastsoftmax[mkl]``). One process,
contenders interleaved within each round (the order rotated from round to
round) after two warm-up calls each; a round's time is the median of five
back-to-back calls; the table gives the median over ``--rounds`` rounds
in ms, and each candidate's time over the default's. Every candidate's
gradient is checked against the default's first. Threads: Numba's
default unless ``--threads``. Asserts nothing about speed.

``--products`` first prints a second table: the kernels' two products
alone, on one thread, through each candidate (``_blas._gemm_into`` in a
compiled loop, BLAS held at one thread as inside the kernels): a block's
logits X_b W (R x n times n x k) and its gradient X_bᵀ E added into G
(beta 1), in GFLOP/s (the best of 15 timings of each, alternating the
candidates), each checked against NumPy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from numba import njit

import fastsoftmax as fs
from fastsoftmax import _blas_choice as bc
from fastsoftmax._kernels._blas import _gemm_into
from fastsoftmax._threads import single_threaded_blas

SHAPES = ("3000x784x100,1000x3000x100,20000x100x100,100000x20x100,"
          "2000x100x1000,10000x20x1000,1000x784x1000,1000x3000x1000,"
          "5000x784x48,20000x100x48")


@njit
def _products(X, W, Z, E, G, reps, backward):
    for _ in range(reps):
        if backward:
            _gemm_into(X.T, E, G, 1.0)
        else:
            _gemm_into(X, W, Z, 0.0)


def _product_table(shapes: str, dtypes: list[np.dtype], names: list[str]) -> None:
    print("the products alone, one thread, GFLOP/s (best of 15)")
    cols = " | ".join(f"{n} X_b W | {n} X_bᵀ E" for n in names)
    print(f"| (R, n, k) | dtype | {cols} |")
    print("|---|---|" + "---:|" * (2 * len(names)))
    rng = np.random.default_rng(1)
    for dt in dtypes:
        for shape in shapes.split(","):
            R, n, k = (int(v) for v in shape.split("x"))
            X = rng.standard_normal((R, n), dtype=np.float32).astype(dt)
            W = rng.standard_normal((n, k), dtype=np.float32).astype(dt)
            E = rng.standard_normal((R, k), dtype=np.float32).astype(dt)
            Z = np.empty((R, k), dt)
            G = np.zeros((n, k), dt)
            reps = max(1, int(2e8 / (2 * R * n * k)))
            tol = 1e-3 if dt == np.float32 else 1e-10
            best = {}
            for name in names:
                bc.use(dt, name)
                _products(X, W, Z, E, G, 1, False)
                G[:] = 0
                _products(X, W, Z, E, G, 1, True)
                for got, want in ((Z, X @ W), (G, X.T @ E)):
                    if np.abs(got - want).max() > tol * np.abs(want).max():
                        raise SystemExit(f"{name} at {shape} {dt}: a wrong product")
                best.update({(name, False): np.inf, (name, True): np.inf})
            for _ in range(15):
                for name in names:
                    bc.use(dt, name)
                    for backward in (False, True):
                        t = time.perf_counter()
                        _products(X, W, Z, E, G, reps, backward)
                        t = (time.perf_counter() - t) / reps
                        best[name, backward] = min(best[name, backward], t)
            bc.use(dt, bc.DEFAULT)
            flops = 2 * R * n * k / 1e9
            cells = " | ".join(f"{flops / best[n, False]:.0f} | {flops / best[n, True]:.0f}"
                               for n in names)
            print(f"| ({R}, {n}, {k}) | {dt.name} | {cells} |", flush=True)


def _call(X, y, W, b, name, threads):
    os.environ["FASTSOFTMAX_BLAS"] = name
    return fs.loss_and_grad(X, y, W, b, alpha=1e-4, n_threads=threads)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--rounds", type=at_least_one, default=9)
    ap.add_argument("--threads", type=at_least_one, default=None)
    ap.add_argument("--products", default="")
    args = ap.parse_args(argv)
    os.environ["FASTSOFTMAX_STRATEGY"] = "gemm"
    names = list(bc.candidates())
    others = names[1:]
    rng = np.random.default_rng(0)
    print(f"candidates: {', '.join(f'{n} ({bc.candidates()[n].path})' for n in names)}")
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    if args.products:
        with single_threaded_blas():
            _product_table(args.products, dtypes, names)
    print(f"loss_and_grad ms, GEMM strategy, threads: {args.threads or 'default'}, "
          f"medians of {args.rounds} interleaved rounds")
    head = " | ".join(names) + " | " + " | ".join(f"{n} / {bc.DEFAULT}" for n in others)
    print(f"| (m, n, k) | dtype | {head} |")
    print("|---|---|" + "---:|" * (len(names) + len(others)))
    for dt in dtypes:
        for shape in args.shapes.split(","):
            m, n, k = (int(v) for v in shape.split("x"))
            X = rng.standard_normal((m, n), dtype=np.float32).astype(dt)
            y = rng.integers(0, k, m)
            W = (0.01 * rng.standard_normal((n, k))).astype(dt)
            b = np.zeros(k, dt)
            want = _call(X, y, W, b, bc.DEFAULT, args.threads)[1]
            tol = 1e-4 if dt == np.float32 else 1e-10
            for name in names:
                for _ in range(2):
                    got = _call(X, y, W, b, name, args.threads)[1]
                err = np.abs(got - want).max() / np.abs(want).max()
                if err > tol:
                    raise SystemExit(f"{name} at {shape} {dt}: relative difference {err:.1e}")
            times: dict[str, list[float]] = {name: [] for name in names}
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    one = []
                    for _ in range(5):
                        t = time.perf_counter()
                        _call(X, y, W, b, name, args.threads)
                        one.append(time.perf_counter() - t)
                    times[name].append(statistics.median(one) * 1e3)
            med = {name: statistics.median(ts) for name, ts in times.items()}
            cells = " | ".join(f"{med[n]:.2f}" for n in names) + " | " + " | ".join(
                f"**{med[n] / med[bc.DEFAULT]:.2f}**" for n in others)
            print(f"| ({m}, {n}, {k}) | {dt.name} | {cells} |", flush=True)
    os.environ.pop("FASTSOFTMAX_BLAS", None)


if __name__ == "__main__":
    main()
