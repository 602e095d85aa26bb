"""A whole many-class fit with and without MKL (``fastsoftmax[mkl]``), each in a fresh process.

    python benchmarks/mkl_fit.py [--rounds 3] [--shape 6000x784x100] [--dtypes float64,float32]

A Newton fit (``solver="newton"``, alpha 1e-3, tol 1e-6) of Gaussian
classes, timed after a warm-up fit on 500 rows in the same process (the
kernels loaded, the BLAS chosen), with the ``mkl`` wheel loaded (the
default where it is installed) and with ``FASTSOFTMAX_MKL=0``, the two
alternating over ``--rounds`` rounds; default environment otherwise. Prints
each run's seconds, the BLAS the GEMM kernels called and the iterations.
Without the wheel both settings run the same libraries. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from threads import default_env

_CHILD = """
import sys, time
import numpy as np
import fastsoftmax as fs
from fastsoftmax import _blas_choice as bc
m, n, k = (int(v) for v in sys.argv[1].split("x"))
dt = sys.argv[2]
rng = np.random.default_rng(0)
centers = rng.standard_normal((k, n)).astype(dt)
y = rng.integers(0, k, m)
X = (centers[y] + 3 * rng.standard_normal((m, n))).astype(dt)
est = fs.SoftmaxRegression(solver="newton", alpha=1e-3, tol=1e-6, max_iter=100)
est.fit(X[:500], y[:500])
t = time.perf_counter()
est.fit(X, y)
t = time.perf_counter() - t
print(f"{t:.3f} {bc.in_use(dt)} {est.n_iter_}")
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=at_least_one, default=3)
    ap.add_argument("--shape", default="6000x784x100")
    ap.add_argument("--dtypes", default="float64,float32")
    args = ap.parse_args(argv)
    settings = {"mkl loaded": {}, "FASTSOFTMAX_MKL=0": {"FASTSOFTMAX_MKL": "0"}}
    print(f"Newton fit of {args.shape} (m x n x k), seconds, {args.rounds} rounds, "
          "each fit in a fresh process")
    print("| dtype | setting | BLAS | iterations | seconds |\n|---|---|---|---:|---|")
    for dtype in args.dtypes.split(","):
        runs: dict[str, list[str]] = {s: [] for s in settings}
        about: dict[str, str] = {}
        for _ in range(args.rounds):
            for name, extra in settings.items():
                env = default_env()
                env.pop("FASTSOFTMAX_MKL", None)
                env.update(extra)
                out = subprocess.run([sys.executable, "-c", _CHILD, args.shape, dtype],
                                     env=env, capture_output=True, text=True, check=True,
                                     cwd=os.path.dirname(os.path.abspath(__file__)))
                seconds, blas, iters = out.stdout.split()
                runs[name].append(seconds)
                about[name] = f"{blas} | {iters}"
        for name in settings:
            print(f"| {dtype} | {name} | {about[name]} | {' / '.join(runs[name])} |", flush=True)


if __name__ == "__main__":
    main()
