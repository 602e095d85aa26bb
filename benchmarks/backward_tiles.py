"""The gradient's accumulation on one thread: Numba's tiles against the IR tiles.

    python benchmarks/backward_tiles.py [--shapes 100x10,784x10,...] [--dtypes float32,float64]
                                        [--rounds 7]

The rows kernels' backward sweep, G += Eᵀ X four rows at a time, over a
block of 4,096 rows that stays in L2 (X of n features, E of k classes),
run again and again on one thread: ``_micro._accumulate4`` (Numba code,
4 x 3 blocks, a vectorised remainder loop) against
``_backward.accumulate4`` (on AVX-512 hosts the LLVM IR tiles: 4 x 5
blocks, a masked last step). Each is compiled into a loop of its own with
512-bit vectors allowed, as the rows kernels are. Prints ns a row (the best
of ``--rounds`` timings, alternating the two) and checks both against
NumPy; asserts nothing about speed. On a host without AVX-512 both columns
run Numba's tiles.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from numba import njit

from fastsoftmax._kernels._backward import accumulate4
from fastsoftmax._kernels._config import VECTOR_BYTES
from fastsoftmax._kernels._micro import _accumulate4
from fastsoftmax._kernels._width import _wide_vectors

ROWS = 4096


@njit(fastmath=True)
def _numba_tiles(X, ZT, G, reps):
    _wide_vectors(X)
    Z = ZT.T
    for _ in range(reps):
        for i in range(0, X.shape[0], 4):
            _accumulate4(X, i, i + 1, i + 2, i + 3, Z[i:i + 4], G)


@njit(fastmath=True)
def _ir_tiles(X, ZT, G, reps):
    _wide_vectors(X)
    Z = ZT.T
    for _ in range(reps):
        for i in range(0, X.shape[0], 4):
            accumulate4(X, i, i + 1, i + 2, i + 3, Z, i, G)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="20x10,100x10,100x3,256x10,300x20,784x10,784x48,3000x10")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--rounds", type=at_least_one, default=7)
    args = ap.parse_args(argv)
    numba.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"one thread, {ROWS} rows a block, ns a row (best of {args.rounds}); "
          f"IR tiles of {VECTOR_BYTES}-byte vectors")
    print("| n | k | dtype | Numba tiles | IR tiles | IR / Numba |\n|---:|---:|---|---:|---:|---:|")
    for dt in [np.dtype(d) for d in args.dtypes.split(",")]:
        lanes = 64 // dt.itemsize
        for shape in args.shapes.split(","):
            n, k = (int(v) for v in shape.split("x"))
            X = rng.standard_normal((ROWS, n)).astype(dt)
            ZT = rng.standard_normal((k, ROWS)).astype(dt)
            want = ZT.astype(np.float64) @ X.astype(np.float64)
            reps = max(1, int(5e7 / (ROWS * n * k)))
            best = {}
            for fn in (_numba_tiles, _ir_tiles):
                G = np.zeros((k, -(-n // lanes) * lanes), dt)
                fn(X, ZT, G, 1)
                tol = 1e-4 if dt == np.float32 else 1e-12
                err = np.abs(G[:, :n] - want).max() / np.abs(want).max()
                if err > tol:
                    raise SystemExit(f"{fn.__name__} at {shape} {dt}: relative error {err:.1e}")
                best[fn] = np.inf
            for _ in range(args.rounds):
                for fn in (_numba_tiles, _ir_tiles):
                    G = np.zeros((k, -(-n // lanes) * lanes), dt)
                    t = time.perf_counter()
                    fn(X, ZT, G, reps)
                    best[fn] = min(best[fn], (time.perf_counter() - t) / reps / ROWS * 1e9)
            a, b = best[_numba_tiles], best[_ir_tiles]
            print(f"| {n} | {k} | {dt.name} | {a:.1f} | {b:.1f} | **{b / a:.2f}** |")


if __name__ == "__main__":
    main()
