"""A calibration cell's two timings, several times over: X read back to back, X from memory.

    python benchmarks/calibration_cells.py [--dtype float64] [--repeats 3]
                                           [--cells 96,10 112,10 784,10 784,2 3040,48]

Each repeat times every cell as the calibration does
(``_calibration._time_cell``, under the package's thread policy, nothing
written) and prints, per cell, the rows / GEMM time ratio with the cell's
X read call after call and with each call reading the least recently read
of ``_calibration.cold_copies`` (X from memory), with the times behind
them. Where the two regimes disagree, the size of a problem's X decides
between them (``_calibration._ratio``); the spread over repeats is how
far one calibration's choice can be trusted. Asserts nothing.
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

from fastsoftmax import _calibration as cal
from fastsoftmax._threads import thread_policy


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    ap.add_argument("--repeats", type=at_least_one, default=3)
    ap.add_argument("--cells", nargs="+", default=["96,10", "112,10", "784,10", "784,2",
                                                    "3040,48"])
    args = ap.parse_args(argv)
    cells = [tuple(map(int, c.split(","))) for c in args.cells]
    print(f"{args.dtype}: rows / GEMM time per cell (ms behind each), X read back to back "
          f"and from memory ({cal.COLD_X_BYTES >> 20} MB of copies)")
    print("| repeat | (n, k) | X MB | back to back | from memory |\n|---:|---|---:|---:|---:|")
    with thread_policy(None):
        for repeat in range(args.repeats):
            for n, k in cells:
                e = cal._time_cell(n, k, args.dtype, np.random.default_rng(repeat))
                cold = (f"{e['rows_cold_s'] / e['gemm_cold_s']:.2f} ({e['rows_cold_s'] * 1e3:.2f} "
                        f"/ {e['gemm_cold_s'] * 1e3:.2f})" if "rows_cold_s" in e else "-")
                print(f"| {repeat} | ({n}, {k}) | {e['x_bytes'] / 1e6:.0f} | "
                      f"{e['rows_s'] / e['gemm_s']:.2f} ({e['rows_s'] * 1e3:.2f} / "
                      f"{e['gemm_s'] * 1e3:.2f}) | {cold} |", flush=True)


if __name__ == "__main__":
    main()
