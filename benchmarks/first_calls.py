"""The first calls of a fresh process, the working tree against an earlier commit.

    python benchmarks/first_calls.py REV [--shapes 3000x784x100,1000x784x1000]
                                         [--dtypes float32] [--calls 20] [--rounds 3]

What a user's first fit or first ``loss_and_grad`` loop meets: every
version runs in processes of its own (one per shape, dtype and round,
versions alternating), each calling ``loss_and_grad`` ``--calls`` times
back to back on the same data, the kernels already in Numba's disk cache
(one untimed process per version fills it first). ``REV``'s ``fastsoftmax/``
is extracted as in ``benchmarks/versions.py``. Prints per shape the median
over rounds of: the first call (cache load, SciPy's BLAS loaded), the sum
of calls 2 to 10, and the median of the calls after the tenth; asserts
nothing. A version whose later calls are much faster than its calls 2 to
10 has something still settling after its first call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from versions import ROOT, import_revision

CHILD = """
import json, sys, time
import numpy as np
sys.path.insert(0, {where!r})
import {package} as fs
m, n, k = {shape}
rng = np.random.default_rng(0)
X = rng.standard_normal((m, n), dtype=np.float32).astype({dtype!r})
y = rng.integers(0, k, m)
W = (0.01 * rng.standard_normal((n, k))).astype({dtype!r})
b = np.zeros(k, {dtype!r})
times = []
for _ in range({calls}):
    t0 = time.perf_counter()
    fs.loss_and_grad(X, y, W, b, alpha=1e-3)
    times.append(time.perf_counter() - t0)
print(json.dumps(times))
"""


def run(where: str, package: str, shape, dtype: str, calls: int, env) -> list[float]:
    code = CHILD.format(where=where, package=package, shape=shape, dtype=dtype, calls=calls)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rev")
    ap.add_argument("--shapes", default="3000x784x100,1000x784x1000,1000x3000x100")
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--calls", type=at_least_one, default=20)
    ap.add_argument("--rounds", type=at_least_one, default=3)
    args = ap.parse_args(argv)
    if args.calls < 11:
        ap.error("--calls must be at least 11")
    with tempfile.TemporaryDirectory(prefix="fastsoftmax-first-calls-") as tmp:
        import_revision(args.rev, Path(tmp))
        versions = {"old": (tmp, "fastsoftmax_old"), "new": (str(ROOT), "fastsoftmax")}
        env = dict(os.environ, NUMBA_CACHE_DIR=str(Path(tmp) / "numba-cache"))
        print(f"loss_and_grad, the first {args.calls} calls of a fresh process (kernels "
              f"cached), {args.rev} (old) against the working tree (new), medians of "
              f"{args.rounds} rounds")
        print("| (m, n, k) | dtype | version | call 1 ms | calls 2-10 ms | later calls, "
              "median ms |\n|---|---|---|---:|---:|---:|")
        for dtype in args.dtypes.split(","):
            for text in args.shapes.split(","):
                shape = tuple(map(int, text.split("x")))
                for where, package in versions.values():  # fill the cache
                    run(where, package, shape, dtype, 2, env)
                rows: dict[str, list[list[float]]] = {v: [] for v in versions}
                for _ in range(args.rounds):
                    for name, (where, package) in versions.items():
                        rows[name].append(run(where, package, shape, dtype, args.calls, env))
                for name, runs in rows.items():
                    t = np.array(runs) * 1e3
                    first = np.median(t[:, 0])
                    early = np.median(t[:, 1:10].sum(axis=1))
                    later = np.median(np.median(t[:, 10:], axis=1))
                    print(f"| {shape} | {dtype} | {name} | {first:.1f} | {early:.1f} | "
                          f"{later:.2f} |", flush=True)


if __name__ == "__main__":
    main()
