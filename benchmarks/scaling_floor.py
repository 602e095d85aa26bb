"""Why the gradient stops scaling: the pass against one read of X, at 1 thread and at all.

    python benchmarks/scaling_floor.py [--rounds 2] [--shapes 0,1,2,3] [--quick]

A fused loss and gradient reads X once; no pass can be faster than one
read of X at the machine's memory bandwidth, however many threads it has.
For the multicore issue's shapes (``threads.SHAPES``) this times, each job
in its own fresh process pinned to its thread count, interleaved over
``--rounds`` rounds:

- ``fastsoftmax.loss_and_grad`` at 1 thread and at every CPU, and at every
  CPU with each kernel strategy forced (``FASTSOFTMAX_STRATEGY=rows`` /
  ``gemm``; the unforced run uses this host's calibrated choice);
- contender ``stream`` of ``_contenders.py`` (each row of X summed by a
  Numba parallel loop: X read once, nothing else) at 1 thread and at every
  CPU: the memory floor;
- contender ``gemms`` (the two products X W and Xᵀ E through OpenBLAS) at
  every CPU.

The last columns give fastsoftmax's own 1 -> N speed-up, the best it could
reach if its N-thread pass ran at the floor (its 1-thread time over the
stream's N-thread time), and its N-thread time over the floor. Default
environment otherwise. ``--quick`` takes a hundredth of the rows (a smoke
test, not a measurement). Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from threads import SHAPES, _median, add_shapes_arg, default_env, interleave, shape_indices


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    add_shapes_arg(ap)
    ap.add_argument("--quick", action="store_true", help="a hundredth of the rows")
    args = ap.parse_args(argv)
    shapes = shape_indices(ap, args.shapes)
    cpus = len(os.sched_getaffinity(0))
    env = default_env()
    print(f"loss_and_grad and its floors, ms (median of {args.rounds} interleaved processes, "
          f"each pinned to its thread count; {cpus} CPUs)")
    print(f"| (m, n, k) dtype | X MB | 1 thr | {cpus} thr | {cpus} thr rows | "
          f"{cpus} thr gemm | stream 1 thr | stream {cpus} thr | gemms {cpus} thr | "
          f"1 -> {cpus} | 1 -> {cpus} at the floor | {cpus} thr / floor |")
    print("|---|" + "---:|" * 11)
    for i in shapes:
        m, n, k, dtype = SHAPES[i]
        m = m // 100 if args.quick else m
        shape = {"task": "grad", "m": m, "n": n, "k": k, "dtype": dtype, "rounds": 7}
        jobs = [
            (dict(shape, contender="fastsoftmax", threads=1), env),
            (dict(shape, contender="fastsoftmax", threads=cpus), env),
            (dict(shape, contender="fastsoftmax", threads=cpus),
             dict(env, FASTSOFTMAX_STRATEGY="rows")),
            (dict(shape, contender="fastsoftmax", threads=cpus),
             dict(env, FASTSOFTMAX_STRATEGY="gemm")),
            (dict(shape, contender="stream", threads=1), env),
            (dict(shape, contender="stream", threads=cpus), env),
            (dict(shape, contender="gemms", threads=cpus), env),
        ]
        t = [_median(r) for r in interleave(jobs, args.rounds)]
        mb = m * n * np.dtype(dtype).itemsize / 1e6
        cells = " | ".join(f"{v * 1e3:.1f}" for v in t)
        print(f"| ({m}, {n}, {k}) {dtype} | {mb:.0f} | {cells} | **{t[0] / t[1]:.1f}x** | "
              f"{t[0] / t[5]:.1f}x | {t[1] / t[5]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
