"""loss_and_grad against every peer on a grid of shapes, one process per job.

    python benchmarks/peers.py [--rounds R] [--dtypes float32,float64]
                               [--ks 2,10,100,1000] [--ns 20,100,784,3000]
                               [--work 2e8] [--pause 0] [--quick]

For each (n, k) of the grid, m is chosen so that m n k is about ``--work``
(clamped to 1,000 ... 300,000 rows): the size where the performance issue's
target is "≥ 1.5x the fastest peer". Every contender (fastsoftmax, the NumPy
reference, scikit-learn's LinearModelLoss, oneDAL through daal4py, torch
eager, torch.compile, jax.jit; benchmarks/_contenders.py lists each one's
thread pool) runs in its own fresh process at the full CPU count, in the
default environment (no thread variable set), jobs interleaved over
``--rounds`` rounds; each job warms up, then reports the median of a few
back-to-back calls, or with ``--pause S`` of calls each after S seconds idle.
A peer that is not installed is reported as absent. Prints one Markdown
table: milliseconds per contender and the fastest peer's time over
fastsoftmax's (above 1: fastsoftmax faster).

Every cell also times, interleaved with the contenders, contender
``square_gemm`` (NumPy's BLAS on 2048 x 2048 operands of the cell's dtype,
at the same thread count): the machine's arithmetic rate in the BLAS's most
favourable call. Every contender computes the two products X W and Xᵀ E,
4 m n k flops, so the last two columns say how fast the fastest peer
already runs against that rate, and what "1.5x the fastest peer" would ask
of any implementation: a cell where it asks more than 100 % can only be
won by computing the two products faster than the BLAS multiplies two
large square matrices. ``--quick`` shrinks the square product to a
hundredth of its work (a smoke test, not a measurement).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from _contenders import square_gemm_flops
from threads import PEERS, _median, default_env, interleave_tolerant, peer_cell


def rows_for(n: int, k: int, work: float) -> int:
    return int(min(300_000, max(1_000, round(work / (n * k), -3))))


def add_grid_args(ap: argparse.ArgumentParser) -> None:
    """The grid's options (rounds, dtypes, k and n lists, work per cell), shared by its scripts."""
    ap.add_argument("--rounds", type=at_least_one, default=2)
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--ks", default="2,10,100,1000")
    ap.add_argument("--ns", default="20,100,784,3000")
    ap.add_argument("--work", type=float, default=2e8)


def grid_shapes(args: argparse.Namespace):
    """Yield (dtype, m, n, k) for every cell of the grid the options describe."""
    for dtype in args.dtypes.split(","):
        for k in map(int, args.ks.split(",")):
            for n in map(int, args.ns.split(",")):
                yield dtype, rows_for(n, k, args.work), n, k


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_grid_args(ap)
    ap.add_argument("--pause", type=float, default=0.0)
    ap.add_argument("--quick", action="store_true",
                    help="the square product a hundredth of its size (a smoke test)")
    args = ap.parse_args(argv)
    scale = 0.01 if args.quick else 1.0
    cpus = len(os.sched_getaffinity(0))
    env = default_env()
    when = f"each call after {args.pause:g} s idle" if args.pause else "back to back"
    print(f"loss_and_grad ms, {cpus} threads for every contender, default environment, "
          f"medians of {args.rounds} interleaved processes ({when})")
    print("| (m, n, k) | dtype | fastsoftmax | " + " | ".join(PEERS)
          + " | fastest peer | fastest peer / fastsoftmax | square gemm GFLOP/s | "
          "fastest peer, % of it | 1.5x the fastest peer, % of it |")
    print("|---|---|" + "---:|" * (len(PEERS) + 1) + "---|---:|---:|---:|---:|")
    for dtype, m, n, k in grid_shapes(args):
        shape = {"task": "grad", "m": m, "n": n, "k": k, "dtype": dtype,
                 "rounds": 5, "threads": cpus}
        if args.pause:
            shape["pause"] = args.pause
        jobs = [(dict(shape, contender=c), env) for c in ("fastsoftmax",) + PEERS]
        # m = 1: the square product takes only the dtype from the job's X
        jobs.append((dict(shape, contender="square_gemm", scale=scale, m=1), env))
        res, failed = interleave_tolerant(jobs, args.rounds)
        if failed[-1] is not None:
            raise RuntimeError(f"square_gemm: {failed[-1]}")
        gemm = square_gemm_flops(scale) / _median(res[-1]) / 1e9
        res, failed = res[:-1], failed[:-1]
        if failed[0] is not None:
            print(f"| ({m}, {n}, {k}) | {dtype} | failed: {failed[0]} |", flush=True)
            continue
        ours = _median(res[0])
        peer = [peer_cell(r, f) for r, f in zip(res[1:], failed[1:], strict=True)]
        present = [(t, p) for (t, _), p in zip(peer, PEERS, strict=True) if t is not None]
        cells = " | ".join(cell for _, cell in peer)
        if not present:  # the NumPy reference is always there, unless it failed
            print(f"| ({m}, {n}, {k}) | {dtype} | {ours * 1e3:.1f} | {cells} | none | "
                  f"| {gemm:.0f} | | |", flush=True)
            continue
        best, name = min(present)
        peer_rate = 4 * m * n * k / best / 1e9
        need = 150 * peer_rate / gemm
        print(f"| ({m}, {n}, {k}) | {dtype} | {ours * 1e3:.1f} | {cells} | {name} | "
              f"**{best / ours:.2f}** | {gemm:.0f} | {100 * peer_rate / gemm:.0f} % | "
              f"{'**' if need > 100 else ''}{need:.0f} %{'**' if need > 100 else ''} |",
              flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
