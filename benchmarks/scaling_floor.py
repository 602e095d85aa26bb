"""Why the gradient stops scaling: the pass against one read of X, at 1 thread and at all.

    python benchmarks/scaling_floor.py [--rounds 2] [--shapes 0,1,2,3] [--quick]
                                       [--part floor|ceiling|all]
                                       [--dtypes float32,float64]

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
test, not a measurement).

A second table (part "ceiling") asks what the machine itself gives from 1
to N threads, per dtype: contender ``fma`` (a fixed number of multiply-adds
on data each thread keeps in its own L1: nothing shared, nothing read from
memory, so its 1 -> N is the cores' arithmetic under load, clock included),
contender ``square_gemm`` (OpenBLAS on 2048 x 2048 operands),
fastsoftmax on 16 rows per thread (784 features, 10 classes): a pass with
almost no work, whose time is the per-call cost that does not shrink with
threads, and fastsoftmax's pass at the MNIST shape (60000, 784, 10): the
multicore issue's 1 -> N beside what the machine's arithmetic gives.
``--dtypes`` picks the dtypes of that table; ``--quick`` shrinks every job
of it too (a hundredth of the work). Prints Markdown tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from threads import SHAPES, _median, add_shapes_arg, default_env, interleave, shape_indices


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=at_least_one, default=2)
    add_shapes_arg(ap)
    ap.add_argument("--quick", action="store_true", help="a hundredth of the rows")
    ap.add_argument("--part", choices=("floor", "ceiling", "all"), default="all")
    ap.add_argument("--dtypes", default="float32,float64", help="ceiling: the dtypes")
    args = ap.parse_args(argv)
    shapes = shape_indices(ap, args.shapes)
    dtypes = args.dtypes.split(",")
    if not set(dtypes) <= {"float32", "float64"}:
        ap.error("--dtypes: float32, float64 or both, comma-separated")
    cpus = len(os.sched_getaffinity(0))
    env = default_env()
    if args.part in ("floor", "all"):
        floor_part(args, shapes, cpus, env)
    if args.part in ("ceiling", "all"):
        ceiling_part(args.rounds, cpus, env, dtypes, args.quick)


def floor_part(args, shapes: list[int], cpus: int, env: dict[str, str]) -> None:
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


def ceiling_part(rounds: int, cpus: int, env: dict[str, str], dtypes: list[str],
                 quick: bool = False) -> None:
    """What the machine scales by itself: L1 arithmetic, a square gemm, a near-empty pass."""
    scale = 0.01 if quick else 1.0
    mnist = int(60000 * scale)
    print(f"\nThe machine's own scaling, ms (median of {rounds} interleaved processes, each "
          f"pinned to its thread count; {cpus} CPUs)")
    print(f"| dtype | fma 1 thr | fma {cpus} thr | fma 1 -> {cpus} | square gemm 1 thr | "
          f"square gemm {cpus} thr | gemm 1 -> {cpus} | pass ({16 * cpus}, 784, 10) 1 thr | "
          f"{cpus} thr | pass ({mnist}, 784, 10) 1 thr | {cpus} thr | pass 1 -> {cpus} |")
    print("|---|" + "---:|" * 11)
    for dtype in dtypes:
        jobs = []
        # (contender, rows, timed calls): the near-empty pass is timed longer
        for contender, m, calls in (("fma", 1, 7), ("square_gemm", 1, 7),
                                    ("fastsoftmax", 16 * cpus, 51), ("fastsoftmax", mnist, 7)):
            shape = {"task": "grad", "m": m, "n": 784, "k": 10, "dtype": dtype,
                     "rounds": calls, "scale": scale}
            jobs += [(dict(shape, contender=contender, threads=t), env) for t in (1, cpus)]
        t = [_median(r) for r in interleave(jobs, rounds)]
        print(f"| {dtype} | {t[0] * 1e3:.1f} | {t[1] * 1e3:.1f} | **{t[0] / t[1]:.1f}x** | "
              f"{t[2] * 1e3:.1f} | {t[3] * 1e3:.1f} | **{t[2] / t[3]:.1f}x** | "
              f"{t[4] * 1e3:.3f} | {t[5] * 1e3:.3f} | {t[6] * 1e3:.1f} | {t[7] * 1e3:.1f} | "
              f"**{t[6] / t[7]:.1f}x** |", flush=True)


if __name__ == "__main__":
    main()
