"""Prototype register tiles in broadcast form: how close the two products get to the FMA peak.

    python benchmarks/broadcast_tiles.py [--shape 20000x100x128] [--rounds 15]

A measurement for the performance issue's many-class cells, not part of
the package. The rows kernels take each logit as a dot product along the
features (a vector of features per row and class, a horizontal sum per
row and class at the end); these tiles instead vectorise along the
classes, as BLAS micro-kernels do:

* forward, Z = X W: R rows x C vectors of 16 classes (float32) held in
  registers; each step of the feature loop loads C vectors of a row of W
  (W in (n, k) layout) and broadcasts one entry of each of the R rows of X;
* backward, G = Xᵀ E: F features x C vectors of 16 classes in registers;
  each step of the loop over rows loads C vectors of a row of E and
  broadcasts F entries of that row of X. Rows go in blocks of 512 (X and E
  of a block stay in L2 while every block of features and classes passes
  over them); each thread sums into its own G.

Both run on 2 threads (one chunk of rows each), written in LLVM IR as the
tiles of ``fastsoftmax._kernels._ahead`` are. Restrictions of the
prototype: float32, k a multiple of 32, n a multiple of 5, m a multiple of
8 (no masked edges). Prints GFLOP/s of each against NumPy's product
(OpenBLAS) on the same arrays and a 2000 x 2000 sgemm of the same run;
checks the results against NumPy.
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import at_least_one, median_of  # benchmarks/ is on the path of a script run from it
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from fastsoftmax._kernels._ahead import _intrinsic_fn
from fastsoftmax._kernels._width import _widen

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F32 = ir.FloatType()
_VEC = ir.VectorType(_F32, 16)
_ZERO = ir.Constant(_VEC, [0.0] * 16)

# Tile sizes: forward 4 rows x 2 vectors, backward 5 features x 2 vectors
# (4 x 2 ran at 0.68-0.76x of 5 x 2 backward: eight accumulators do not
# cover the FMA latency there).
ROWS, FEATURES, VECTORS, ROW_BLOCK = 4, 5, 2, 512


def _c(v):
    return ir.Constant(_I64, v)


def _fma(builder):
    return _intrinsic_fn(builder.module, "llvm.fma.v16f32", _VEC, [_VEC] * 3)


def _broadcast(b, ptr):
    x = b.insert_element(ir.Constant(_VEC, ir.Undefined), b.load(ptr), ir.Constant(_I32, 0))
    return b.shuffle_vector(x, x, ir.Constant(ir.VectorType(_I32, 16), [0] * 16))


def _vectors(b, ptr, count):
    return [b.load(b.bitcast(b.gep(ptr, [_c(16 * c)]), _VEC.as_pointer()), align=4)
            for c in range(count)]


def _loop(b, start, stop, n_acc, body):
    """Build ``for t in [start, stop): accs = body(t, accs)``; return the final accumulators."""
    pre = b.block
    loop = b.append_basic_block("bt.loop")
    after = b.append_basic_block("bt.after")
    b.cbranch(b.icmp_signed("<", start, stop), loop, after)
    b.position_at_end(loop)
    t = b.phi(_I64)
    t.add_incoming(start, pre)
    accs = [b.phi(_VEC) for _ in range(n_acc)]
    for a in accs:
        a.add_incoming(_ZERO, pre)
    new = body(t, accs)
    t1 = b.add(t, _c(1))
    end = b.block
    t.add_incoming(t1, end)
    for a, v in zip(accs, new, strict=True):
        a.add_incoming(v, end)
    b.cbranch(b.icmp_signed("<", t1, stop), loop, after)
    b.position_at_end(after)
    out = []
    for v in new:
        s = b.phi(_VEC)
        s.add_incoming(_ZERO, pre)
        s.add_incoming(v, end)
        out.append(s)
    return out


@intrinsic
def _forward_tile(typingctx, X, i, W, j, Z):
    """Z[i:i+ROWS, j:j+16 VECTORS] = X[i:i+ROWS] @ W[:, j:j+16 VECTORS]."""
    sig = types.void(X, i, W, j, Z)

    def codegen(context, b, sig, args):
        _widen(b.function, prefer=False)
        i_ = context.cast(b, args[1], sig.args[1], types.int64)
        j_ = context.cast(b, args[3], sig.args[3], types.int64)
        xa = context.make_array(sig.args[0])(context, b, args[0])
        wa = context.make_array(sig.args[2])(context, b, args[2])
        za = context.make_array(sig.args[4])(context, b, args[4])
        n = b.extract_value(xa.shape, 1)
        k = b.extract_value(wa.shape, 1)
        fma = _fma(b)
        rows = [b.gep(xa.data, [b.mul(b.add(i_, _c(r)), n)]) for r in range(ROWS)]

        def body(f, accs):
            wv = _vectors(b, b.gep(wa.data, [b.add(b.mul(f, k), j_)]), VECTORS)
            return [b.call(fma, [_broadcast(b, b.gep(rows[r], [f])), wv[c],
                                 accs[r * VECTORS + c]])
                    for r in range(ROWS) for c in range(VECTORS)]

        sums = _loop(b, _c(0), n, ROWS * VECTORS, body)
        for r in range(ROWS):
            zrow = b.gep(za.data, [b.add(b.mul(b.add(i_, _c(r)), k), j_)])
            for c in range(VECTORS):
                b.store(sums[r * VECTORS + c],
                        b.bitcast(b.gep(zrow, [_c(16 * c)]), _VEC.as_pointer()), align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _backward_tile(typingctx, X, lo, hi, f0, E, j, G):
    """G[f0:f0+FEATURES, j:j+16 VECTORS] += X[lo:hi, f0:f0+FEATURES]ᵀ @ E[lo:hi, j:j+16 VECTORS]."""
    sig = types.void(X, lo, hi, f0, E, j, G)

    def codegen(context, b, sig, args):
        _widen(b.function, prefer=False)
        lo_, hi_, f0_, j_ = (context.cast(b, args[q], sig.args[q], types.int64)
                             for q in (1, 2, 3, 5))
        xa = context.make_array(sig.args[0])(context, b, args[0])
        ea = context.make_array(sig.args[4])(context, b, args[4])
        ga = context.make_array(sig.args[6])(context, b, args[6])
        n = b.extract_value(xa.shape, 1)
        k = b.extract_value(ea.shape, 1)
        fma = _fma(b)

        def body(i, accs):
            ev = _vectors(b, b.gep(ea.data, [b.add(b.mul(i, k), j_)]), VECTORS)
            xrow = b.gep(xa.data, [b.add(b.mul(i, n), f0_)])
            return [b.call(fma, [_broadcast(b, b.gep(xrow, [_c(r)])), ev[c],
                                 accs[r * VECTORS + c]])
                    for r in range(FEATURES) for c in range(VECTORS)]

        sums = _loop(b, lo_, hi_, FEATURES * VECTORS, body)
        for r in range(FEATURES):
            grow = b.gep(ga.data, [b.add(b.mul(b.add(f0_, _c(r)), k), j_)])
            for c in range(VECTORS):
                p = b.bitcast(b.gep(grow, [_c(16 * c)]), _VEC.as_pointer())
                b.store(b.fadd(b.load(p, align=4), sums[r * VECTORS + c]), p, align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit(parallel=True, fastmath=True)
def forward(X, W, Z):
    m = X.shape[0]
    k = W.shape[1]
    for c in prange(2):
        for i in range(m * c // 2 // ROWS * ROWS, m * (c + 1) // 2 // ROWS * ROWS, ROWS):
            for j in range(0, k, 16 * VECTORS):
                _forward_tile(X, i, W, j, Z)


@njit(parallel=True, fastmath=True)
def backward(X, E, Gp):
    m, n = X.shape
    k = E.shape[1]
    for c in prange(2):
        G = Gp[c]
        G[:] = 0
        hi = m * (c + 1) // 2
        for r0 in range(m * c // 2, hi, ROW_BLOCK):
            r1 = min(hi, r0 + ROW_BLOCK)
            for f0 in range(0, n, FEATURES):
                for j in range(0, k, 16 * VECTORS):
                    _backward_tile(X, r0, r1, f0, E, j, G)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="20000x100x128", help="m x n x k")
    ap.add_argument("--rounds", type=at_least_one, default=15)
    a = ap.parse_args()
    m, n, k = (int(v) for v in a.shape.split("x"))
    if k % (16 * VECTORS) or n % FEATURES or m % (2 * ROWS):
        raise SystemExit(f"the prototype needs k % {16 * VECTORS} == 0, n % {FEATURES} == 0, "
                         f"m % {2 * ROWS} == 0")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((m, n)).astype(np.float32)
    W = rng.standard_normal((n, k)).astype(np.float32)
    E = rng.standard_normal((m, k)).astype(np.float32)
    Z = np.zeros((m, k), np.float32)
    Gp = np.zeros((2, n, k), np.float32)
    tiles = {"forward X W": lambda: forward(X, W, Z), "backward Xᵀ E": lambda: backward(X, E, Gp)}
    numpy_fns = {"forward X W": lambda: X @ W, "backward Xᵀ E": lambda: X.T @ E}
    # The tiles first, before any NumPy product: OpenBLAS's threads spin
    # for about 0.1 s after each of its calls and take the cores from
    # Numba's (the tiles ran 2.5-3x slower right after one; BENCHMARKS.md,
    # "Twenty-fourth session").
    t_tiles = {name: median_of(fn, a.rounds) for name, fn in tiles.items()}
    t_numpy = {name: median_of(fn, a.rounds) for name, fn in numpy_fns.items()}
    A = rng.standard_normal((2000, 2000)).astype(np.float32)
    square = 2 * 2000 ** 3 / median_of(lambda: A @ A, 5) / 1e9
    np.testing.assert_allclose(Z, X @ W, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(Gp.sum(axis=0), X.T @ E, rtol=1e-3, atol=1e-2)
    flop = 2 * m * n * k
    print(f"({m}, {n}, {k}) float32, 2 threads; square sgemm (2000) {square:.0f} GFLOP/s")
    print("| product | tiles ms | tiles GFLOP/s | % of square sgemm | NumPy ms | NumPy GFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, t in t_tiles.items():
        rate = flop / t / 1e9
        print(f"| {name} | {t * 1e3:.2f} | {rate:.0f} | {100 * rate / square:.0f} % | "
              f"{t_numpy[name] * 1e3:.2f} | {flop / t_numpy[name] / 1e9:.0f} |")


if __name__ == "__main__":
    main()
