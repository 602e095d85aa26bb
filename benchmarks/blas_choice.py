"""The GEMM kernels on each BLAS library of the process: loss_and_grad's time per candidate.

    python benchmarks/blas_choice.py [--shapes 3000x784x100,...] [--dtypes float32,float64]
                                     [--rounds 9] [--threads N]

``fastsoftmax.loss_and_grad`` with the GEMM strategy forced
(``FASTSOFTMAX_STRATEGY=gemm``), its products through each candidate of
``fastsoftmax._blas_choice.candidates()`` in turn (``FASTSOFTMAX_BLAS``,
read by every call): SciPy's BLAS, which Numba's ``np.dot`` calls (the
default), and NumPy's where its routines can be called. One process,
contenders interleaved within each round (the order rotated from round to
round) after two warm-up calls each; a round's time is the median of five
back-to-back calls; the table gives the median over ``--rounds`` rounds
in ms, and each candidate's time over the default's. Every candidate's
gradient is checked against the default's first. Threads: Numba's
default unless ``--threads``. Asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import fastsoftmax as fs
from fastsoftmax import _blas_choice as bc

SHAPES = ("3000x784x100,1000x3000x100,20000x100x100,100000x20x100,"
          "2000x100x1000,10000x20x1000,1000x784x1000,1000x3000x1000,"
          "5000x784x48,20000x100x48")


def _call(X, y, W, b, name, threads):
    os.environ["FASTSOFTMAX_BLAS"] = name
    return fs.loss_and_grad(X, y, W, b, alpha=1e-4, n_threads=threads)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    os.environ["FASTSOFTMAX_STRATEGY"] = "gemm"
    names = list(bc.candidates())
    others = names[1:]
    rng = np.random.default_rng(0)
    print(f"candidates: {', '.join(f'{n} ({bc.candidates()[n].path})' for n in names)}")
    print(f"loss_and_grad ms, GEMM strategy, threads: {args.threads or 'default'}, "
          f"medians of {args.rounds} interleaved rounds")
    head = " | ".join(names) + " | " + " | ".join(f"{n} / {bc.DEFAULT}" for n in others)
    print(f"| (m, n, k) | dtype | {head} |")
    print("|---|---|" + "---:|" * (len(names) + len(others)))
    for dt in [np.dtype(d) for d in args.dtypes.split(",")]:
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
