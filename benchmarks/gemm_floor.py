"""The two matrix products alone, and one read of X, against the fused pass (target 1).

    python benchmarks/gemm_floor.py [--rounds 3] [--dtypes float32,float64]
                                    [--ks 100,1000] [--ns 20,100,784,3000] [--work 2e8]

One loss and gradient computes the products X W (m x k) and Xᵀ E (n x k);
every peer (oneDAL, JAX, torch) computes them with a BLAS-class GEMM. At
many classes they are nearly all of the work, so no implementation can be
much faster than the two GEMMs alone. On the peers grid's cells (by default
those with k >= 100), this times ``fastsoftmax.loss_and_grad`` and the two
products alone through NumPy's OpenBLAS (contender ``gemms`` of
``_contenders.py``: preallocated outputs, nothing else), each job in its
own fresh process at the full CPU count with the peers grid's warm-up,
interleaved over ``--rounds`` rounds, and prints fastsoftmax's time over
the products'. It times one read of X alone too (contender ``stream``: each
row summed by a Numba parallel loop), the memory floor: at few classes the
pass, and every peer's, is bounded by it rather than by the products
(``--ks 10``). Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from peers import add_grid_args, grid_shapes
from threads import _median, default_env, interleave


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_grid_args(ap)
    ap.set_defaults(ks="100,1000", rounds=3)
    args = ap.parse_args(argv)
    cpus = len(os.sched_getaffinity(0))
    env = default_env()
    print(f"ms, {cpus} threads for both, default environment, medians of {args.rounds} "
          "interleaved processes")
    print("| (m, n, k) | dtype | two GEMMs alone | one read of X | fastsoftmax | "
          "fastsoftmax / GEMMs | fastsoftmax / read of X |\n|---|---|---:|---:|---:|---:|---:|")
    for dtype, m, n, k in grid_shapes(args):
        shape = {"task": "grad", "m": m, "n": n, "k": k, "dtype": dtype, "rounds": 5,
                 "threads": cpus}
        jobs = [(dict(shape, contender=c), env) for c in ("gemms", "stream", "fastsoftmax")]
        gemms, read, ours = (_median(r) for r in interleave(jobs, args.rounds))
        print(f"| ({m}, {n}, {k}) | {dtype} | {gemms * 1e3:.1f} | {read * 1e3:.1f} | "
              f"{ours * 1e3:.1f} | **{ours / gemms:.2f}** | **{ours / read:.2f}** |", flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
