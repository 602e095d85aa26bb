"""Shapes of the outer-product tiles of ``fastsoftmax._kernels._outer`` on one core.

    python benchmarks/outer_tiles.py [--tiles 4x3,8x3,4x6,6x4] [--dtype float32]
                                     [--blocks 48x784x192,48x784x960,96x100x192,48x64x192]
                                     [--flops 2e9]

A measurement behind the tiles' shape per host (``_outer.TILE``), not a
benchmark of the package. For every block R x n x kp (rows, features,
padded classes) and every tile R' x C (rows or features x vectors of
classes), times on the calling thread (no parallel region) the block's
forward product Z = Xb Wp, R' rows by C vectors at a time over the whole
block, and its backward product G += Xbᵀ E, R' features by C vectors at a
time: the tiles themselves, none of the kernels' rests (kp is rounded down
to whole tiles of vectors, R and n to whole tiles of rows). Each call runs
the block about ``--flops`` / (2 R n kp) times; prints the best of 3 as
GFLOP/s, one row per block. Asserts nothing; the unit tests check the
tiles the package uses against NumPy.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

from fastsoftmax._kernels._config import JIT, VECTOR_BYTES
from fastsoftmax._kernels._outer import _make_backward, _make_forward


def _kernels(R: int, C: int):
    """Return (forward, backward) njit functions running R x C tiles over a whole block."""
    fwd_tile, bwd_tile = _make_forward(R, C), _make_backward(R, C)

    @njit(**JIT)
    def forward(X, Wp, Z, reps):
        rows, L = X.shape[0] - X.shape[0] % R, VECTOR_BYTES // X.itemsize
        cols = Wp.shape[1] - Wp.shape[1] % (C * L)
        for _ in range(reps):
            for q in range(0, rows, R):
                for j in range(0, cols, C * L):
                    fwd_tile(X, q, Wp, j, Z, q, 0, X.shape[1], True)

    @njit(**JIT)
    def backward(X, E, G, reps):
        n, L = X.shape[1] - X.shape[1] % R, VECTOR_BYTES // X.itemsize
        cols = G.shape[1] - G.shape[1] % (C * L)
        for _ in range(reps):
            for f in range(0, n, R):
                for j in range(0, cols, C * L):
                    bwd_tile(X, 0, X.shape[0], E, j, G, f, False)

    return forward, backward


def _best(fn, args, rounds=3):
    fn(*args[:-1], 1)  # compile and warm
    best = np.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", default="4x3,8x3,4x6,6x4")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--blocks", default="48x784x192,48x784x960,96x100x192,48x64x192")
    ap.add_argument("--flops", type=float, default=2e9)
    args = ap.parse_args(argv)
    dt = np.dtype(args.dtype)
    tiles = [tuple(map(int, t.split("x"))) for t in args.tiles.split(",")]
    kernels = {t: _kernels(*t) for t in tiles}
    rng = np.random.default_rng(0)
    names = " | ".join(f"{R}x{C} forward | {R}x{C} backward" for R, C in tiles)
    print(f"{dt.name}, one thread, GFLOP/s of each tile's products over a whole block "
          f"(best of 3 calls of about {args.flops:.0e} flops)")
    print(f"| block (R, n, kp) | {names} |")
    print("|---|" + "---:|" * (2 * len(tiles)))
    for R, n, kp in (tuple(map(int, b.split("x"))) for b in args.blocks.split(",")):
        spare = 8
        X = rng.random((R, n)).astype(dt)
        Wp = rng.random((n, kp)).astype(dt)
        Z = np.zeros((R + spare, kp), dt)
        E = rng.random((R + spare, kp)).astype(dt)
        G = np.zeros((n, kp), dt)
        reps = max(1, int(args.flops / (2 * R * n * kp)))
        cells = []
        for t in tiles:
            forward, backward = kernels[t]
            Rt, C = t
            L = VECTOR_BYTES // dt.itemsize
            cols = kp - kp % (C * L)
            f_flops = 2 * (R - R % Rt) * n * cols * reps
            b_flops = 2 * R * (n - n % Rt) * cols * reps
            cells.append(f"{f_flops / _best(forward, (X, Wp, Z, reps)) / 1e9:.0f}")
            cells.append(f"{b_flops / _best(backward, (X, E, G, reps)) / 1e9:.0f}")
        print(f"| ({R}, {n}, {kp}) | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
