"""What the padding of the classes to whole vectors costs the GEMM tiles' block products.

    python benchmarks/class_remainder.py [--dtype float32] [--k 100] [--ns 100,784,3000]
                                         [--rows 192] [--blocks 8] [--flops 2e9] [--rounds 5]

A measurement behind a possible change, not a benchmark of the package. The
outer-product tiles (``fastsoftmax._kernels._outer``) compute whole vectors
of classes: k = 100 float32 classes are 7 vectors of 16 lanes, 112 columns,
12 of them zero. For one thread and ``--blocks`` blocks of ``--rows`` rows
of n features, each block's two products (Z = Xb W, G += Xbᵀ E) three ways,
alternating, the best of ``--rounds``:

- ``padded``: as the package runs them, W and G padded to kp columns;
- ``whole``: the kv = L floor(k / L) classes of whole vectors alone (no
  remainder: a bound, not a gradient);
- ``whole + rest``: those, and the last r = k - kv classes the rows
  kernels' way (``_ahead.logits_prefetching``: dot products along the
  features against the r rows of Wᵀ; ``_backward.accumulate4_cols``: the
  backward into an r x n block of G stored transposed), r / L of a
  vector's multiply-adds.

The table gives each time over ``padded``'s. Before timing, ``whole + rest``
is checked against NumPy on one block (both products).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from numba import njit

from fastsoftmax._kernels._ahead import logits_prefetching
from fastsoftmax._kernels._backward import accumulate4_cols
from fastsoftmax._kernels._config import JIT, VECTOR_BYTES
from fastsoftmax._kernels._outer import backward_block, forward_block, spare_rows_for


@njit(**JIT)
def _products(X, R, W, Z, E, G, reps):
    """Both block products over every block: ``padded`` (W, G of kp columns), ``whole`` (kv)."""
    for _ in range(reps):
        for r0 in range(0, X.shape[0] - R + 1, R):
            forward_block(X, r0, R, W, Z)
            backward_block(X, r0, R, E, G, False)


@njit(**JIT)
def _whole_rest(X, R, Wv, Wr, br, Zv, Zr, Ev, Er, Gv, Gr, reps):
    n = X.shape[1]
    for _ in range(reps):
        for r0 in range(0, X.shape[0] - R + 1, R):
            forward_block(X, r0, R, Wv, Zv)
            h = 0
            while h < R:
                nb = 8 if h + 8 <= R else 4
                logits_prefetching(X, r0 + h, nb, Wr, br, Zr, h, 0, 0)
                h += nb
            backward_block(X, r0, R, Ev, Gv, False)
            for h in range(0, R, 4):
                accumulate4_cols(X, r0 + h, r0 + h + 1, r0 + h + 2, r0 + h + 3, Er, h, Gr, 0, n)


def _case(n: int, k: int, R: int, blocks: int, dt: np.dtype, rng):
    """The arrays of one block size: X, the padded operands, the split ones."""
    L = VECTOR_BYTES // dt.itemsize
    kp, kv = -(-k // L) * L, k // L * L
    spare = spare_rows_for(k, dt.itemsize)
    X = rng.standard_normal((R * blocks, n)).astype(dt)
    W = rng.standard_normal((n, k)).astype(dt)
    Wp = np.zeros((n, kp), dt)
    Wp[:, :k] = W
    E = rng.standard_normal((R + spare, k)).astype(dt)
    padded = (Wp, np.zeros((R + spare, k), dt), E, np.zeros((n, kp), dt))
    # The rest's logits and errors as columns kv: of the block's own (R, k)
    # arrays (views, as a kernel would hold them); the whole vectors' part
    # in (R, kv) arrays of their own (the tiles store rows of whole vectors).
    Z = np.zeros((R, k), dt)
    split = (np.ascontiguousarray(W[:, :kv]), np.ascontiguousarray(W[:, kv:].T),
             np.zeros(k - kv, dt), np.zeros((R + 1, kv), dt), Z[:, kv:],
             np.ascontiguousarray(E[:R + 1, :kv]), E[:R, kv:], np.zeros((n, kv), dt),
             np.zeros((k - kv, n), dt))
    return X, W, E, padded, split, kv


def _check(X, W, E, split, R, kv, dt) -> None:
    """Assert the rest's two products against NumPy on the first block."""
    Wv, Wr, br, Zv, Zr, Ev, Er, Gv, Gr = (a.copy() if a.flags.owndata else a for a in split)
    Gr[:] = 0
    Zr[:] = 0
    _whole_rest(X[:R], R, Wv, Wr, br, Zv, Zr, Ev, Er, Gv, Gr, 1)
    Xb = X[:R].astype(np.float64)
    tol = 1e-4 if dt == np.float32 else 1e-10
    np.testing.assert_allclose(Zr, Xb @ W[:, kv:], rtol=tol, atol=tol * X.shape[1])
    np.testing.assert_allclose(Gr.T, Xb.T @ E[:R, kv:], rtol=tol, atol=tol * R)


def _seconds(fn, args, reps) -> float:
    t0 = time.perf_counter()
    fn(*args, reps)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--ns", default="100,784,3000")
    ap.add_argument("--rows", type=at_least_one, default=192)
    ap.add_argument("--blocks", type=at_least_one, default=8)
    ap.add_argument("--flops", type=float, default=2e9)
    ap.add_argument("--rounds", type=at_least_one, default=5)
    args = ap.parse_args(argv)
    dt = np.dtype(args.dtype)
    L = VECTOR_BYTES // dt.itemsize
    if args.k % L == 0 or args.k < L:
        ap.error(f"--k {args.k}: no rest after whole vectors of {L} {dt.name} lanes "
                 f"(k a multiple of {L}, or fewer than {L} classes)")
    if args.rows % 4 or args.rows < 8:
        ap.error("--rows a multiple of 4, at least 8")
    ns = [int(v) for v in args.ns.split(",")]
    if any(n < 1 for n in ns):
        ap.error(f"--ns {args.ns}: features at least 1")
    rng = np.random.default_rng(0)
    print(f"{dt.name}, k = {args.k} ({args.k // L} whole vectors of {L} and "
          f"{args.k % L} classes), one thread, blocks of {args.rows} rows; "
          f"best of {args.rounds}, ms per pass over {args.blocks} blocks")
    print("| n | padded ms | whole ms | whole + rest ms | whole / padded | "
          "whole + rest / padded |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in ns:
        X, W, E, padded, split, kv = _case(n, args.k, args.rows, args.blocks, dt, rng)
        _check(X, W, E, split, args.rows, kv, dt)
        reps = max(1, round(args.flops / (4 * X.shape[0] * n * args.k)))
        Wv, Wr, br, Zv, Zr, Ev, Er, Gv, Gr = split
        runs = {"padded": (_products, (X, args.rows, *padded)),
                "whole": (_products, (X, args.rows, Wv, Zv, Ev, Gv)),
                "rest": (_whole_rest, (X, args.rows, *split))}
        for fn, fn_args in runs.values():
            fn(*fn_args, 1)  # compile and warm
        best = {name: np.inf for name in runs}
        for _ in range(args.rounds):  # the three alternating
            for name, (fn, fn_args) in runs.items():
                best[name] = min(best[name], _seconds(fn, fn_args, reps))
        ms = {name: 1e3 * t / reps for name, t in best.items()}
        print(f"| {n} | {ms['padded']:.3f} | {ms['whole']:.3f} | {ms['rest']:.3f} | "
              f"{ms['whole'] / ms['padded']:.3f} | {ms['rest'] / ms['padded']:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()
