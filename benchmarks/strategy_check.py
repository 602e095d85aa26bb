"""Does the per-host strategy choice hold? (performance issue, target 3)

    python benchmarks/strategy_check.py [--rounds 2] [--dtypes float32,float64]
                                        [--ks 2,10,100,1000] [--ns 20,100,784,3000]
                                        [--work 2e8]

On the peers grid (benchmarks/peers.py's shapes: m n k about ``--work``),
times fastsoftmax.loss_and_grad three ways, each job in a fresh process,
interleaved over ``--rounds`` rounds: as users get it (the strategy this
host's wisdom picks, or the fixed rule without wisdom), and forced to each
strategy with FASTSOFTMAX_STRATEGY=rows / gemm. Prints, per shape, the three
medians, the strategy chosen, and the chosen time over the best of the
two forced ones (target: at most 1.10), and the same for the chosen
strategy's forced time: the two runs of one strategy differ by this
host's process-to-process spread alone, which the second ratio leaves out
(it is 1.00 wherever the choice was the faster strategy). With
``FASTSOFTMAX_CACHE_DIR`` an empty folder (no wisdom, and ``--work``
below 2**30, so nothing calibrates) it checks the fixed rule, what a host
runs until it has wisdom. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os

from peers import add_grid_args, grid_shapes
from threads import _median, default_env, interleave

from fastsoftmax._calibration import strategy


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_grid_args(ap)
    args = ap.parse_args(argv)
    cpus = len(os.sched_getaffinity(0))
    env = default_env()
    print(f"loss_and_grad ms, {cpus} threads, medians of {args.rounds} interleaved processes")
    print("| (m, n, k) | dtype | chosen | as chosen | rows | gemm | chosen / best | "
          "forced chosen / best |\n|---|---|---|---:|---:|---:|---:|---:|")
    worst = worst_forced = 0.0
    for dtype, m, n, k in grid_shapes(args):
        job = {"task": "grad", "contender": "fastsoftmax", "m": m, "n": n, "k": k,
               "dtype": dtype, "rounds": 5, "threads": cpus}
        res = interleave([(job, env), (job, dict(env, FASTSOFTMAX_STRATEGY="rows")),
                          (job, dict(env, FASTSOFTMAX_STRATEGY="gemm"))], args.rounds)
        chosen, rows, gemm = (_median(r) for r in res)
        ratio = chosen / min(rows, gemm)
        which = strategy(n, k, dtype, work=m * n * k)
        forced = (rows if which == "rows" else gemm) / min(rows, gemm)
        worst, worst_forced = max(worst, ratio), max(worst_forced, forced)
        print(f"| ({m}, {n}, {k}) | {dtype} | {which} | "
              f"{chosen * 1e3:.1f} | {rows * 1e3:.1f} | {gemm * 1e3:.1f} | "
              f"**{ratio:.2f}** | {forced:.2f} |", flush=True)
    print(f"\nworst chosen / best: {worst:.2f}; the chosen strategy forced: {worst_forced:.2f}")


if __name__ == "__main__":
    main()
