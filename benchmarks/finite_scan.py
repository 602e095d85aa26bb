"""The NaN/inf scan of the input: NumPy's test against the compiled scan, by size.

    python benchmarks/finite_scan.py [--shapes 20x5,300x10,655x100,5000x100,40000x100]
                                     [--rounds 200]

``fastsoftmax._validation.first_nonfinite_row`` takes NumPy's test below
``SCAN_FROM`` entries and the compiled parallel scan from there (whose
first use in a process loads it from Numba's cache, or compiles it on an
empty one). Per shape (float64, all finite), the median microseconds of
one call each way, the two alternating, the compiled scan loaded first.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

from fastsoftmax import _validation


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="20x5,300x10,655x100,5000x100,40000x100")
    ap.add_argument("--rounds", type=at_least_one, default=200)
    args = ap.parse_args(argv)
    ways = {"numpy": 1 << 62, "compiled": 1}
    default = _validation.SCAN_FROM
    print(f"SCAN_FROM = {default} entries; median us of {args.rounds} calls each way")
    print("| shape | entries | NumPy us | compiled us | NumPy / compiled |")
    print("|---|---:|---:|---:|---:|")
    try:
        for shape in args.shapes.split(","):
            m, n = map(int, shape.split("x"))
            a = np.random.default_rng(0).standard_normal((m, n))
            times: dict[str, list[float]] = {w: [] for w in ways}
            for scan_from in ways.values():  # warm-up: the compiled scan loaded
                _validation.SCAN_FROM = scan_from
                _validation.first_nonfinite_row(a)
            for _ in range(args.rounds):
                for w, scan_from in ways.items():
                    _validation.SCAN_FROM = scan_from
                    t0 = time.perf_counter()
                    _validation.first_nonfinite_row(a)
                    times[w].append(time.perf_counter() - t0)
            med = {w: float(np.median(t)) * 1e6 for w, t in times.items()}
            print(f"| {shape} | {m * n} | {med['numpy']:.1f} | {med['compiled']:.1f} "
                  f"| {med['numpy'] / med['compiled']:.2f} |", flush=True)
    finally:
        _validation.SCAN_FROM = default


if __name__ == "__main__":
    main()
