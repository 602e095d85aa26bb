"""How close the fused gradient runs to this machine's FMA ceiling (performance issue, target 2).

    python benchmarks/ceiling.py [--rounds 7] [--size 4096]

The ceiling is what the BLAS that NumPy ships (OpenBLAS in the wheels)
reaches on a large square matrix product at its default thread count: the
GFLOP/s of ``A @ B`` on (size x size) operands, 2 size^3 flops, float32
(sgemm) and float64 (dgemm). In the same run, interleaved with it after a
warm-up, the same dtype's ``fastsoftmax.loss_and_grad`` and the NumPy
reference (``fastsoftmax.reference``) at the MNIST shape (60,000 x 784, 10
classes), counted as 4 m n k flops per call (the two products X W and Xᵀ E;
exp and the rest are not counted). Default environment, every thread of
the machine. Prints one Markdown table; asserts nothing.

Each timed call follows a 0.2 s pause (``fastsoftmax.bench.interleaved``:
the square product's OpenBLAS workers spin for about 0.1 s after it and
would share the cores). The "back to back" columns time fastsoftmax as a
solver calls it, call after call: in each round, after the pause, one
call untimed, then the mean of ``BACK_TO_BACK`` calls in a row.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

import fastsoftmax as fs
from fastsoftmax import reference
from fastsoftmax.bench import interleaved

M, N, K = 60000, 784, 10
BACK_TO_BACK = 8


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=at_least_one, default=7)
    ap.add_argument("--size", type=at_least_one, default=4096)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    s = args.size
    print(f"{len(os.sched_getaffinity(0))} CPUs, default environment, medians of "
          f"{args.rounds} interleaved rounds; (m, n, k) = ({M}, {N}, {K}); gemm on "
          f"{s} x {s} operands")
    print("| dtype | gemm GFLOP/s | fastsoftmax ms | GFLOP/s | % of gemm | back to back ms | "
          "back to back, % of gemm | reference ms | fastsoftmax vs reference |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dtype in ("float32", "float64"):
        A = rng.standard_normal((s, s)).astype(dtype)
        B = rng.standard_normal((s, s)).astype(dtype)
        C = np.empty((s, s), dtype=dtype)
        X = rng.standard_normal((M, N), dtype=np.float32).astype(dtype, copy=False)
        y = rng.integers(0, K, M)
        W = (0.01 * rng.standard_normal((N, K))).astype(dtype)
        b = np.zeros(K, dtype)
        rows: list[float] = []

        def back_to_back(X=X, y=y, W=W, b=b, rows=rows):
            fs.loss_and_grad(X, y, W, b)
            t0 = time.perf_counter()
            for _ in range(BACK_TO_BACK):
                fs.loss_and_grad(X, y, W, b)
            rows.append((time.perf_counter() - t0) / BACK_TO_BACK)

        t_gemm, t_fs, _, t_ref = interleaved(
            [lambda: np.matmul(A, B, out=C),  # noqa: B023
             lambda: fs.loss_and_grad(X, y, W, b),  # noqa: B023
             back_to_back,
             lambda: reference.loss_and_grad(X, y, W, b)],  # noqa: B023
            args.rounds)
        t_row = float(np.median(rows[1:]))  # (the first: interleaved's warm-up)
        gemm = 2 * s**3 / t_gemm / 1e9
        ours, in_a_row = (4 * M * N * K / t / 1e9 for t in (t_fs, t_row))
        print(f"| {dtype} | {gemm:.0f} | {t_fs * 1e3:.1f} | {ours:.0f} | "
              f"**{100 * ours / gemm:.0f} %** | {t_row * 1e3:.1f} | "
              f"**{100 * in_a_row / gemm:.0f} %** | {t_ref * 1e3:.1f} | "
              f"**{t_ref / t_fs:.2f}** |", flush=True)


if __name__ == "__main__":
    main()
