"""Side-by-side ratio tables for BENCHMARKS.md (targets 1, 2, 4, 5).

On a shared machine only ratios measured in one run mean anything, so every
cell times its contenders interleaved (A, B, A, B, ...) after one warm-up
call each (compilation included there) and reports medians and their ratio.

    python benchmarks/ratios.py mnist|grid|threads|softmax|sgd|sgd-batches|strategies
                                [--max-gflop G]

prints a Markdown table. ``grid`` skips cells whose X exceeds 1 GB and, to
bound the run time, cells above --max-gflop (default 60) GFLOP per call.
"""

import argparse

import numpy as np
import scipy.special
from _common import at_least_one, objective, sgd_epoch  # noqa: E402  (run with benchmarks/ on PYTHONPATH)

import fastsoftmax as fs
from fastsoftmax import reference
from fastsoftmax.bench import interleaved


def _problem(m, n, k, dtype, rng):
    X = rng.standard_normal((m, n), dtype=np.float32).astype(dtype, copy=False)
    y = rng.integers(0, k, m)
    W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
    return X, y, W, np.zeros(k, dtype)


def loss_row(m, n, k, dtype, rng, rounds):
    X, y, W, b = _problem(m, n, k, dtype, rng)
    t_fs, t_ref = interleaved([lambda: fs.loss_and_grad(X, y, W, b),
                               lambda: reference.loss_and_grad(X, y, W, b)], rounds)
    gf = 4 * m * n * k / t_fs / 1e9
    gbs = X.nbytes / t_fs / 1e9
    return (f"| {m} | {n} | {k} | {dtype} | {t_ref * 1e3:.1f} | {t_fs * 1e3:.1f} | "
            f"**{t_ref / t_fs:.2f}** | {gf:.0f} | {gbs:.1f} |")


def mnist_table(rng, rounds):
    """Target 1: fastsoftmax, the NumPy reference and (if installed) PyTorch's
    CPU forward + backward on the same arrays, interleaved in one run."""
    from _contenders import make

    print("| m | n | k | dtype | reference ms | torch ms | fastsoftmax ms | vs reference | "
          "vs torch | GFLOP/s | GB/s of X |\n"
          "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    m, n, k = 60000, 784, 10
    for dtype in ("float32", "float64"):
        X, y, W, b = _problem(m, n, k, dtype, rng)
        fns = [lambda: fs.loss_and_grad(X, y, W, b),  # noqa: B023
               lambda: reference.loss_and_grad(X, y, W, b)]  # noqa: B023
        tfn = make("torch", X, y, W, b, 0.0, 2)
        if tfn is not None:
            fns.append(tfn)
        t = interleaved(fns, rounds)
        t_torch = f"{t[2] * 1e3:.1f}" if tfn is not None else "not installed"
        vs_torch = f"**{t[2] / t[0]:.2f}**" if tfn is not None else "-"
        print(f"| {m} | {n} | {k} | {dtype} | {t[1] * 1e3:.1f} | {t_torch} | {t[0] * 1e3:.1f} | "
              f"**{t[1] / t[0]:.2f}** | {vs_torch} | {4 * m * n * k / t[0] / 1e9:.0f} | "
              f"{X.nbytes / t[0] / 1e9:.1f} |", flush=True)


LOSS_HEAD = ("| m | n | k | dtype | reference ms | fastsoftmax ms | ratio | GFLOP/s | GB/s of X |\n"
             "|---:|---:|---:|---|---:|---:|---:|---:|---:|")


def _sgd_epoch_fn(X, y, W, b, order, batch_size):
    return sgd_epoch(X, y, W, b, order, batch_size, alpha=0.0, eta0=0.01,
                     learning_rate="constant", momentum=0.0, nesterov=False)


def sgd_table(rng, rounds):
    """Target 6 at (60000, 784, 10): per-sample SGD against the NumPy loop
    (fastsoftmax.reference.sgd_epoch, batch 1), and an epoch of batch 64
    against one full-batch gradient (one Objective evaluation)."""
    print("| dtype | NumPy loop, B=1 s | fastsoftmax B=1 ms | ratio | B=64 epoch ms | "
          "full gradient ms | epoch / gradient |\n|---|---:|---:|---:|---:|---:|---:|")
    for dtype in ("float32", "float64"):
        X, y, W, b = _problem(60000, 784, 10, dtype, rng)
        order = rng.permutation(60000)
        ref = lambda: reference.sgd_epoch(X, y, W.copy(), b.copy(), order,  # noqa: E731,B023
                                          batch_size=1, eta=0.01)
        t_ref, t1 = interleaved([ref, _sgd_epoch_fn(X, y, W, b, order, 1)], max(1, rounds // 3))
        obj = objective(X, y, 10)
        t64, tg = interleaved([_sgd_epoch_fn(X, y, W, b, order, 64),
                               lambda: obj(W, b)], rounds)  # noqa: B023
        print(f"| {dtype} | {t_ref:.2f} | {t1 * 1e3:.1f} | **{t_ref / t1:.0f}** | "
              f"{t64 * 1e3:.1f} | {tg * 1e3:.1f} | **{t64 / tg:.2f}** |", flush=True)


SGD_BATCH_SHAPES = [(60000, 784, 10, 16), (60000, 784, 10, 256), (300000, 100, 10, 64)]


def sgd_batches_table(rng, rounds):
    """SGD epochs beyond target 4's two: batches run on one thread (16 rows),
    split by rows (256 rows of 784 features; 64 rows of 100), each against
    one full gradient."""
    print("| m, n, k | batch | dtype | epoch ms | full gradient ms | epoch / gradient |\n"
          "|---|---:|---|---:|---:|---:|")
    for (m, n, k, batch) in SGD_BATCH_SHAPES:
        for dtype in ("float32", "float64"):
            X, y, W, b = _problem(m, n, k, dtype, rng)
            order = rng.permutation(m)
            obj = objective(X, y, k)
            te, tg = interleaved([_sgd_epoch_fn(X, y, W, b, order, batch),
                                  lambda: obj(W, b)], rounds)  # noqa: B023
            print(f"| {m}, {n}, {k} | {batch} | {dtype} | {te * 1e3:.1f} | {tg * 1e3:.1f} | "
                  f"**{te / tg:.2f}** |", flush=True)


def strategy_table(rng, rounds):
    """Side-by-side rows vs gemm (Objective with the strategy forced)."""
    from fastsoftmax._calibration import strategy

    print("| m, n, k | dtype | rows ms | gemm ms | faster | rule picks |\n"
          "|---|---|---:|---:|---|---|")
    for (m, n, k) in [(100000, 20, 10), (100000, 32, 10), (100000, 50, 10),
                      (100000, 100, 10), (60000, 784, 2), (60000, 784, 10),
                      (50000, 784, 33), (30000, 784, 48), (20000, 784, 64),
                      (200000, 20, 2), (20000, 20, 100)]:
        for dtype in ("float32", "float64"):
            X, y, W, b = _problem(m, n, k, dtype, rng)
            objs = [objective(X, y, k, strategy=s) for s in ("rows", "gemm")]
            tr, tg = interleaved([lambda o=o: o(W, b) for o in objs], rounds)  # noqa: B023
            print(f"| {m}, {n}, {k} | {dtype} | {tr * 1e3:.1f} | {tg * 1e3:.1f} | "
                  f"{'rows' if tr < tg else 'gemm'} | {strategy(n, k, dtype, work=m * n * k)} |",
                  flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("table", choices=["mnist", "grid", "threads", "softmax", "sgd",
                                      "sgd-batches", "strategies"])
    ap.add_argument("--max-gflop", type=float, default=60.0)
    ap.add_argument("--rounds", type=at_least_one, default=7)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    if a.table == "mnist":
        mnist_table(rng, a.rounds)
    elif a.table == "grid":
        print(LOSS_HEAD)
        for dtype in ("float32", "float64"):
            for k in (2, 10, 100, 1000):
                for n in (20, 784, 3000):
                    for m in (1000, 20000, 200000):
                        size = m * n * np.dtype(dtype).itemsize
                        gflop = 4 * m * n * k / 1e9
                        if size > 1e9:
                            print(f"| {m} | {n} | {k} | {dtype} | skipped: X over 1 GB |||||")
                        elif gflop > a.max_gflop:
                            print(f"| {m} | {n} | {k} | {dtype} | not run: {gflop:.0f} GFLOP "
                                  "over the time cap |||||")
                        else:
                            rounds = a.rounds if gflop < 5 else 3
                            print(loss_row(m, n, k, dtype, rng, rounds), flush=True)
    elif a.table == "threads":
        print("| m | n | k | dtype | 1 thread ms | 2 threads ms | speed-up |\n"
              "|---:|---:|---:|---|---:|---:|---:|")
        for dtype in ("float32", "float64"):
            X, y, W, b = _problem(60000, 784, 10, dtype, rng)
            t1, t2 = interleaved([lambda: fs.loss_and_grad(X, y, W, b, n_threads=1),  # noqa: B023
                                  lambda: fs.loss_and_grad(X, y, W, b, n_threads=2)],  # noqa: B023
                                 a.rounds)
            print(f"| 60000 | 784 | 10 | {dtype} | {t1 * 1e3:.1f} | {t2 * 1e3:.1f} | "
                  f"**{t1 / t2:.2f}** |", flush=True)
    elif a.table == "sgd":
        sgd_table(rng, a.rounds)
    elif a.table == "sgd-batches":
        sgd_batches_table(rng, a.rounds)
    elif a.table == "strategies":
        strategy_table(rng, a.rounds)
    else:
        print("| function | shape | dtype | fastsoftmax ms | reference ms | scipy ms | "
              "vs reference | vs scipy |\n|---|---|---|---:|---:|---:|---:|---:|")
        for dtype in ("float32", "float64"):
            Z = (3 * rng.standard_normal((100000, 100))).astype(dtype)
            for name, f_fs, f_ref, f_sp in [
                ("softmax", fs.softmax, reference.softmax,
                 lambda Z: scipy.special.softmax(Z, axis=1)),
                ("log_softmax", fs.log_softmax, reference.log_softmax,
                 lambda Z: scipy.special.log_softmax(Z, axis=1)),
            ]:
                # the lambdas run inside this iteration: late binding is harmless
                t = interleaved([lambda: f_fs(Z), lambda: f_ref(Z),  # noqa: B023
                                 lambda: f_sp(Z)], a.rounds)  # noqa: B023
                print(f"| {name} | (100000, 100) | {dtype} | {t[0] * 1e3:.1f} | "
                      f"{t[1] * 1e3:.1f} | {t[2] * 1e3:.1f} | **{t[1] / t[0]:.2f}** | "
                      f"**{t[2] / t[0]:.2f}** |", flush=True)


if __name__ == "__main__":
    main()
