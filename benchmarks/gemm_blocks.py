"""The GEMM strategy's row blocks on wide rows: the rule's block size against fixed ones.

    python benchmarks/gemm_blocks.py [--ns 384,784,1536,3072] [--ks 48,100,300]
                                     [--dtypes float32,float64] [--work 2e8]
                                     [--sizes 64,128,256,512,1024] [--rounds 3]

For each (n, k) an X of about ``--work`` / (n k) rows and one GEMM engine
(``_dense.DenseEngine``, the block rows chosen by ``_dense.gemm_block_rows``),
its gradient timed with the chosen block rows and with each of ``--sizes``
in turn (the same engine, its ``_rows`` set by hand, the scratch made
afresh): the median of five calls per size, the best of ``--rounds``
interleaved rounds. Prints each size's time over the fastest; shapes whose
backward product is split by features (their blocks sized otherwise) are
skipped. Numba's default threads. Asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import functools

import numpy as np
from _common import at_least_one, median_of  # benchmarks/ is on the path of a script run from it

from fastsoftmax._data import make_dataset
from fastsoftmax._dense import DenseEngine
from fastsoftmax._threads import thread_policy


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ns", default="384,784,1536,3072")
    ap.add_argument("--ks", default="48,100,300")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--work", type=float, default=2e8)
    ap.add_argument("--sizes", default="64,128,256,512,1024")
    ap.add_argument("--rounds", type=at_least_one, default=3)
    args = ap.parse_args(argv)
    sizes = [int(v) for v in args.sizes.split(",")]
    print(f"gradient time over the fastest block size, best of {args.rounds} rounds "
          "of the median of 5 calls")
    print("| (m, n, k) | dtype | chosen rows | chosen / fastest | "
          + " | ".join(f"{r} rows" for r in sizes) + " |")
    print("|---|---|---:|---:|" + "---:|" * len(sizes))
    rng = np.random.default_rng(0)
    with thread_policy(None):
        for dt in [np.dtype(d) for d in args.dtypes.split(",")]:
            for n in (int(v) for v in args.ns.split(",")):
                for k in (int(v) for v in args.ks.split(",")):
                    m = max(64, int(args.work // (n * k)))
                    X = rng.standard_normal((m, n), dtype=np.float32).astype(dt)
                    data = make_dataset(X, rng.integers(0, k, m), None, None, k)
                    coef = (0.01 * rng.standard_normal((k, n))).astype(dt)
                    b = np.zeros(k, dt)
                    eng = DenseEngine(data, "gemm", warm=True)
                    if eng._split:
                        continue
                    chosen = eng._rows
                    best: dict[int, float] = {}
                    for _ in range(args.rounds):
                        for rows in dict.fromkeys([chosen, *sizes]):
                            eng._rows = min(rows, m)
                            eng._buffers.clear()
                            t = 1e3 * median_of(functools.partial(eng.gradient, coef, b), 5)
                            best[rows] = min(best.get(rows, np.inf), t)
                    fastest = min(best.values())
                    cells = " | ".join(f"{best[r] / fastest:.2f}" for r in sizes)
                    print(f"| ({m}, {n}, {k}) | {dt.name} | {chosen} | "
                          f"**{best[chosen] / fastest:.2f}** | {cells} |", flush=True)


if __name__ == "__main__":
    main()
