"""``fastsoftmax bench``: the speed-up over plain NumPy on this machine.

Times a few standard problems -- the fused loss and gradient, row-wise
softmax, one epoch of SGD -- with fastsoftmax and with the plain NumPy
implementations in :mod:`fastsoftmax.reference`, and prints one table of
medians and ratios. The contenders are timed alternately (A, B, A, B, ...)
after one warm-up call each, so a background load affects both alike; the
warm-up includes loading (or compiling) the kernels. The default run takes
well under a minute on 2 cores; ``--quick`` uses small shapes and takes a few
seconds (the test suite runs it).

Usage::

    fastsoftmax bench [--quick] [--rounds R] [--threads T]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable, Sequence

import numba
import numpy as np

from ._threads import thread_limit, thread_policy

__all__ = ["main", "interleaved"]


def interleaved(fns: Sequence[Callable[[], object]], rounds: int,
                settle: float = 0.2) -> list[float]:
    """Median seconds of each callable, timed alternately after one warm-up call each."""
    for f in fns:
        f()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for t, f in zip(times, fns, strict=True):
            # Let the previous contender's idle threads stop spinning
            # (OpenBLAS and OpenMP workers busy-wait after a call and would
            # take a core from the next one).
            time.sleep(settle)
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in times]


def _problem(m: int, n: int, k: int, dtype: str, rng: np.random.Generator):
    X = rng.standard_normal((m, n), dtype=np.float32).astype(dtype, copy=False)
    y = rng.integers(0, k, m)
    W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
    return X, y, W, np.zeros(k, dtype)


def _loss_case(m, n, k, dtype, rng):
    import fastsoftmax as fs
    from fastsoftmax import reference

    X, y, W, b = _problem(m, n, k, dtype, rng)
    return ("loss_and_grad", f"({m}, {n}, {k})", dtype,
            lambda: reference.loss_and_grad(X, y, W, b),
            lambda: fs.loss_and_grad(X, y, W, b))


def _softmax_case(m, k, dtype, rng):
    import fastsoftmax as fs
    from fastsoftmax import reference

    Z = (3 * rng.standard_normal((m, k))).astype(dtype)
    return ("softmax", f"({m}, {k})", dtype,
            lambda: reference.softmax(Z), lambda: fs.softmax(Z))


def _sgd_case(m, n, k, dtype, batch_size, rng):
    from fastsoftmax import SoftmaxRegression, reference
    from fastsoftmax._data import make_dataset
    from fastsoftmax._params import check_params
    from fastsoftmax._solvers.sgd import SGDState, run_epoch

    X, y, W, b = _problem(m, n, k, dtype, rng)
    order = rng.permutation(m)
    data = make_dataset(X, y.astype(np.int64), None, None, k)
    params = check_params(SoftmaxRegression("sgd", alpha=0.0, eta0=0.01, momentum=0.0,
                                            nesterov=False, learning_rate="constant",
                                            batch_size=batch_size))
    steps = -(-m // batch_size)

    def ours():
        run_epoch(data, SGDState.start(W.T, b), order, params, steps_per_epoch=steps)

    def numpy_loop():
        reference.sgd_epoch(X, y, W.copy(), b.copy(), order, batch_size=batch_size, eta=0.01)

    return (f"SGD epoch, batch {batch_size}", f"({m}, {n}, {k})", dtype, numpy_loop, ours)


def _cases(quick: bool, rng: np.random.Generator):
    if quick:
        yield _loss_case(3000, 784, 10, "float32", rng)
        yield _loss_case(2000, 20, 100, "float64", rng)
        yield _softmax_case(5000, 100, "float32", rng)
        yield _sgd_case(300, 784, 10, "float32", 1, rng)
        yield _sgd_case(2000, 784, 10, "float32", 64, rng)
        return
    for dtype in ("float32", "float64"):
        yield _loss_case(60000, 784, 10, dtype, rng)
    yield _loss_case(20000, 784, 100, "float32", rng)
    yield _loss_case(200000, 20, 10, "float32", rng)
    for dtype in ("float32", "float64"):
        yield _softmax_case(100000, 100, dtype, rng)
    # The NumPy loop pays its per-batch overhead whatever the batch size:
    # 5000 rows one at a time are enough to time it.
    yield _sgd_case(5000, 784, 10, "float32", 1, rng)
    yield _sgd_case(60000, 784, 10, "float32", 64, rng)


def _load() -> str:
    try:
        return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except (AttributeError, OSError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table; returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="fastsoftmax bench",
        description="Time fastsoftmax against plain NumPy (fastsoftmax.reference) on a few "
                    "standard shapes and print the speed-ups.")
    ap.add_argument("--quick", action="store_true",
                    help="small shapes, a few seconds (a smoke test, not a measurement)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="timed rounds per contender (default 5, 2 with --quick)")
    ap.add_argument("--threads", type=int, default=None,
                    help="Numba threads (default: Numba's current setting)")
    ap.add_argument("--calibrate", action="store_true",
                    help="instead: time both dense kernel strategies on a grid of shapes, "
                         "the GEMM block size for narrow rows and the BLAS library the GEMM "
                         "kernels call, and remember this host's winners (done by itself on "
                         "the first large fit otherwise)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 5)
    if rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.threads is not None:
        if not 1 <= args.threads <= thread_limit():
            ap.error(f"--threads must be between 1 and {thread_limit()}")
    with thread_policy(args.threads):
        if args.calibrate:
            _calibrate()
        else:
            _run(args.quick, rounds)
    return 0


def _calibrate() -> None:
    from . import _calibration as cal

    for dtype, table in cal.calibrate().items():
        print(f"{dtype}: faster kernel strategy by features (rows) and classes (columns; "
              f"gemm above {cal.SMALL_K}, and above {cal.MANY_K} on fewer than "
              f"{cal.MANY_K_FEATURES} features), X read back to back (in the caches where "
              "it fits)")
        _print_grid(cal.winner_grid(table))
        print(f"{dtype}: the same, X from memory (large problems)")
        _print_grid(cal.winner_grid(table, cold=True))
        ahead = cal.winner_grid(table, ahead=True, cold=True)
        if any(any(row) for row in ahead):
            print(f"{dtype}: the same, X from memory, timed again on an X the rows kernels "
                  "read ahead, for large problems (-: its own X is, or no X of such rows is)")
            _print_grid(ahead)
        print(f"{dtype}: GEMM blocks for narrow rows of many classes within "
              f"{table['narrow_block_bytes'] // 1024} KiB of X and logits")
        blas_ms = ", ".join(f"{name} {1e3 * sum(t):.1f} ms"
                            for name, t in table["blas_s"].items())
        print(f"{dtype}: the GEMM kernels multiply with {table['blas']}'s BLAS "
              f"(summed over {len(cal.BLAS_SHAPES)} shapes: {blas_ms})")
    print(f"written to {cal.wisdom_path()}")


def _print_grid(winners) -> None:
    """Print the calibration grid's winners (GRID_N x GRID_K) as a table, - where none."""
    from . import _calibration as cal

    print("| n \\ k | " + " | ".join(str(k) for k in cal.GRID_K) + " |")
    print("|---:|" + "---|" * len(cal.GRID_K))
    for n, row in zip(cal.GRID_N, winners, strict=True):
        print(f"| {n} | " + " | ".join(w or "-" for w in row) + " |")


def _run(quick: bool, rounds: int) -> None:
    print(f"fastsoftmax bench: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, {numba.get_num_threads()} Numba threads, "
          f"load average {_load()}, {rounds} rounds, medians")
    print("| task | shape (m, n, k) | dtype | NumPy ms | fastsoftmax ms | speed-up |")
    print("|---|---|---|---:|---:|---:|")
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for name, shape, dtype, ref_fn, our_fn in _cases(quick, rng):
        t_ref, t_ours = interleaved([ref_fn, our_fn], rounds, settle=0.0 if quick else 0.2)
        print(f"| {name} | {shape} | {dtype} | {t_ref * 1e3:.1f} | {t_ours * 1e3:.2f} | "
              f"**{t_ref / t_ours:.1f}x** |", flush=True)
    print(f"({time.perf_counter() - start:.0f} s; a busy machine lowers every ratio: "
          "check the load average above)")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
