"""Other thread pools' idle workers: what a fastsoftmax call costs right after them.

    python benchmarks/idle_pools.py [--rounds R] [--m M]

An OpenBLAS pool keeps its workers spinning for about 0.1 s after every
multithreaded call, and a fastsoftmax kernel started in that window shares
the cores with them. Two tables, each job in a fresh process, the jobs
interleaved over R rounds (medians of the rounds' medians):

1. ``loss_and_grad`` at (M, 784, 10) float32 called back to back, and right
   after a NumPy product (a 1,000 x 784 by 784 x 10 matmul, as a user's own
   code might run between two calls), in the default environment (no thread
   variable set) and with ``OPENBLAS_THREAD_TIMEOUT=4`` (OpenBLAS's workers
   sleep at once: the remedy the documentation gives).
2. An SGD epoch (batches of 64) of ``partial_fit`` back to back, and right
   after ``score`` on 10,000 rows: fastsoftmax's own dense labels, which
   run on Python threads with BLAS at one thread so that nothing is left
   spinning.

Prints Markdown tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

HERE = Path(__file__).resolve().parent
CALLS = 9


def _job(kind: str, m: int) -> dict[str, float]:
    """Run in the child: median ms of CALLS timed calls, each after ``pre``."""
    rng = np.random.default_rng(0)
    n, k = 784, 10
    X = rng.standard_normal((m, n), dtype=np.float32)
    y = rng.integers(0, k, m)
    if kind == "grad":
        from fastsoftmax import loss_and_grad

        W, b = np.zeros((n, k), np.float32), np.zeros(k, np.float32)
        A, B = X[:1000], rng.standard_normal((n, k), dtype=np.float32)
        cases = {"back to back": lambda: None, "after a NumPy product": lambda: A @ B}

        def call():
            loss_and_grad(X, y, W, b)
    else:
        from fastsoftmax import SoftmaxRegression  # scikit-learn's import: this job's only

        est = SoftmaxRegression(solver="sgd", batch_size=64, random_state=0)
        est.partial_fit(X, y, classes=np.arange(k))
        Xv, yv = X[:10000], y[:10000]
        cases = {"back to back": lambda: None, "after score": lambda: est.score(Xv, yv)}

        def call():
            est.partial_fit(X, y)
    for pre in cases.values():  # warm-up
        pre()
        call()
    # Each case as a block of calls after a pause, so that "back to back"
    # never follows the other case's product within its pool's spin.
    times: dict[str, list[float]] = {name: [] for name in cases}
    for name, pre in cases.items():
        time.sleep(0.5)
        for _ in range(CALLS):
            pre()
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    return {name: 1e3 * float(np.median(t)) for name, t in times.items()}


def _env(timeout: bool) -> dict[str, str]:
    from threads import default_env

    env = default_env()
    if timeout:
        env["OPENBLAS_THREAD_TIMEOUT"] = "4"
    return env


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=at_least_one, default=3)
    ap.add_argument("--m", type=at_least_one, default=60000)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        print(json.dumps(_job(args.job, args.m)))
        return
    jobs = [("grad", False), ("grad", True), ("sgd", False)]
    results: dict[tuple[str, bool], list[dict[str, float]]] = {job: [] for job in jobs}
    for _ in range(args.rounds):
        for kind, timeout in jobs:
            out = subprocess.run([sys.executable, "-W", "ignore", __file__, "--job", kind,
                                  "--m", str(args.m)], env=_env(timeout), check=True,
                                 capture_output=True, text=True, timeout=1800)
            results[(kind, timeout)].append(json.loads(out.stdout.strip().splitlines()[-1]))

    def med(job, name):
        return float(np.median([r[name] for r in results[job]]))

    print(f"{len(os.sched_getaffinity(0))} CPUs; medians of {args.rounds} processes x "
          f"{CALLS} calls, interleaved")
    print(f"\n| loss_and_grad ({args.m}, 784, 10) float32 | back to back ms | "
          "after a NumPy product ms | ratio |\n|---|---:|---:|---:|")
    for timeout in (False, True):
        a, b = med(("grad", timeout), "back to back"), med(("grad", timeout),
                                                           "after a NumPy product")
        env = "OPENBLAS_THREAD_TIMEOUT=4" if timeout else "default environment"
        print(f"| {env} | {a:.1f} | {b:.1f} | **{b / a:.2f}** |")
    a, b = med(("sgd", False), "back to back"), med(("sgd", False), "after score")
    print(f"\n| partial_fit SGD epoch ({args.m}, 784, 10), B = 64 | back to back ms | "
          f"after score ms | ratio |\n|---|---:|---:|---:|\n| default environment | "
          f"{a:.1f} | {b:.1f} | **{b / a:.2f}** |")


if __name__ == "__main__":
    main()
