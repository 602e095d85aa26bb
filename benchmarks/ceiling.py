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
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import fastsoftmax as fs
from fastsoftmax import reference
from fastsoftmax.bench import interleaved

M, N, K = 60000, 784, 10


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    s = args.size
    print(f"{len(os.sched_getaffinity(0))} CPUs, default environment, medians of "
          f"{args.rounds} interleaved rounds; (m, n, k) = ({M}, {N}, {K}); gemm on "
          f"{s} x {s} operands")
    print("| dtype | gemm GFLOP/s | fastsoftmax ms | GFLOP/s | % of gemm | reference ms | "
          "fastsoftmax vs reference |\n|---|---:|---:|---:|---:|---:|---:|")
    for dtype in ("float32", "float64"):
        A = rng.standard_normal((s, s)).astype(dtype)
        B = rng.standard_normal((s, s)).astype(dtype)
        C = np.empty((s, s), dtype=dtype)
        X = rng.standard_normal((M, N), dtype=np.float32).astype(dtype, copy=False)
        y = rng.integers(0, K, M)
        W = (0.01 * rng.standard_normal((N, K))).astype(dtype)
        b = np.zeros(K, dtype)
        t_gemm, t_fs, t_ref = interleaved(
            [lambda: np.matmul(A, B, out=C),  # noqa: B023
             lambda: fs.loss_and_grad(X, y, W, b),  # noqa: B023
             lambda: reference.loss_and_grad(X, y, W, b)],  # noqa: B023
            args.rounds)
        gemm = 2 * s**3 / t_gemm / 1e9
        ours = 4 * M * N * K / t_fs / 1e9
        print(f"| {dtype} | {gemm:.0f} | {t_fs * 1e3:.1f} | {ours:.0f} | "
              f"**{100 * ours / gemm:.0f} %** | {t_ref * 1e3:.1f} | **{t_ref / t_fs:.2f}** |",
              flush=True)


if __name__ == "__main__":
    main()
