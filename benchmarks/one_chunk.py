"""A problem run as one chunk: the chunk function called directly (what
``_launch.run_one_chunk`` does) against the parallel kernel run at one thread.

    python benchmarks/one_chunk.py [--rounds 9] [--pause 0.01] [--shapes M,N,K ...]

Both compute the same chunk of rows: the parallel kernel is a ``prange``
over chunks calling the same compiled chunk function (once its body was
compiled into the region, with its arrays marked as not aliasing, and the
kernel at one thread was the faster). Times the dense gradient (rows
strategy and the GEMM strategy) on a few shapes, float32 and float64,
interleaved after a warm-up, each call after a pause (``--pause``, 10 ms;
0.5 s times what a call finds after an idle spell); prints the
threading layer in force, since under "workqueue" a one-thread region
still goes through its queue. Prints one Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

import fastsoftmax as fs
from fastsoftmax._data import make_dataset
from fastsoftmax._dense import DenseEngine
from fastsoftmax._threads import thread_policy

SHAPES = [(64, 20, 2), (1000, 20, 10), (100000, 20, 2), (100000, 20, 10),
          (20000, 100, 10), (4000, 784, 10)]


def _median_us(fn, rounds, pause):
    ts = []
    for _ in range(rounds):
        time.sleep(pause)
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e6


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=at_least_one, default=9)
    ap.add_argument("--pause", type=float, default=0.01, help="seconds idle before each call")
    ap.add_argument("--shapes", nargs="*", help="M,N,K triples (default: the module's SHAPES)")
    args = ap.parse_args(argv)
    shapes = ([tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes
              else SHAPES)
    fs.softmax(np.ones((1000, 8)))  # a parallel launch: the layer is known from here on
    print(f"threading layer: {numba.threading_layer()}; one thread; medians of "
          f"{args.rounds} calls, each after {args.pause:g} s idle")
    print("| (m, n, k) | dtype | strategy | chunk function called directly, us | "
          "parallel kernel at one thread, us | direct / kernel |\n"
          "|---|---|---|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        for dtype in ("float32", "float64"):
            X = rng.standard_normal((m, n)).astype(dtype)
            data = make_dataset(X, rng.integers(0, k, m), None, None, k)
            coef = (0.1 * rng.standard_normal((k, n))).astype(dtype)
            b = np.zeros(k, dtype)
            for strategy in ("rows", "gemm"):
                direct = DenseEngine(data, strategy)
                kernel = DenseEngine(data, strategy)
                direct._serial = kernel._serial = True
                direct._run = lambda chunk_fn, _kernel, a: chunk_fn(0, *a)
                kernel._run = lambda _chunk_fn, kern, a: kern(*a)  # at the one thread in force
                with thread_policy(1):
                    for e in (direct, kernel):
                        e.gradient(coef, b)
                    d, q = [], []
                    for _ in range(args.rounds):
                        d.append(_median_us(lambda: direct.gradient(coef, b), 1,  # noqa: B023
                                            args.pause))
                        q.append(_median_us(lambda: kernel.gradient(coef, b), 1,  # noqa: B023
                                            args.pause))
                td, tk = float(np.median(d)), float(np.median(q))
                print(f"| ({m}, {n}, {k}) | {dtype} | {strategy} | {td:.0f} | {tk:.0f} | "
                      f"**{td / tk:.2f}** |", flush=True)


if __name__ == "__main__":
    main()
