"""How good are the calibration's choices, and which margin serves best? (target 3)

    python benchmarks/strategy_margin.py [--calibrations 3] [--rounds 5] [--work 2e8]
                                         [--margins 0.85,0.9,0.95,1.0]
                                         [--dtypes float32,float64]
                                         [--cell-work 8388608,67108864]
                                         [--truths 1] [--cold-bytes 268435456]
                                         [--ns 16,48,...] [--ks 2,3,...]

The truth: on every cell of the calibration grid (k <= SMALL_K; above it
the choice is always GEMM, and so it is on the cells of more than MANY_K
classes and fewer than MANY_K_FEATURES features, which are charged as
such), both strategies of ``loss_and_grad`` at the
size users train (m n k about ``--work``), interleaved in this process,
medians of ``--rounds`` rounds of the best of 3 calls. Then
``--calibrations`` calibrations (``_calibration.calibrate(write=False)``:
nothing is written), and for each margin the decision of
``_calibration._winner`` on each cell from each calibration's timings,
charged at the truth: chosen time over the faster strategy's. With
several ``--cell-work`` values, the calibrations are repeated with each
as ``_calibration.CELL_WORK`` (how long a calibration's timed calls are).
Prints the truth's ratios and one row per cell work and margin (mean and
worst over the cells, the worst's cell, how many cells exceed 1.10x);
asserts nothing. About 6 minutes on 2 cores with the defaults when the
grid's classes went up to 48 (eight columns; now ten).

``--truths N`` (N >= 2) measures the truth N times, each a pass over the
whole grid on arrays of its own, charges the calibrations at the median of
the passes, and adds an "oracle" row: each pass's faster strategy charged
at every other pass. Where even that choice is more than 10 % slower, the
two strategies' order on that cell moved between passes by more than the
target's tolerance: the resolution a "within 10 %" verdict has on the host.

``--cold-bytes`` sets ``_calibration.COLD_X_BYTES``, the memory through
which a calibration's cold timings cycle copies of each cell's X (its
default makes the copies come from memory on any host; a small value
only checks that the script runs). ``--ns`` and ``--ks`` take a part of
the grid (features and classes of its cells; the default, all of it, also
times the cells on an X read ahead, as a calibration does, though only
the other timings are charged here).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from _common import at_least_one, best_of  # benchmarks/ is on the path of a script run from it

import fastsoftmax as fs
from fastsoftmax import _calibration as cal


def _forced(strategy, X, y, W, b):
    """``loss_and_grad`` with FASTSOFTMAX_STRATEGY set to ``strategy`` (read at each call)."""
    def call():
        os.environ["FASTSOFTMAX_STRATEGY"] = strategy
        fs.loss_and_grad(X, y, W, b)
    return call


def truth_rows(work: float, n: int, k: int) -> int:
    """Rows of the truth's X at (n, k): m n k about ``work``."""
    return int(min(300_000, max(cal.MIN_ROWS, round(work / (n * k), -3))))


def truth(dtype: str, ns: list[int], ks: list[int], work: float, rounds: int,
          seed: int = 0) -> np.ndarray:
    """(len(ns), len(ks), 2) medians of (rows, gemm) seconds at the users' size."""
    out = np.empty((len(ns), len(ks), 2))
    rng = np.random.default_rng(seed)
    for i, n in enumerate(ns):
        for j, k in enumerate(ks):
            m = truth_rows(work, n, k)
            X = rng.standard_normal((m, n), dtype=np.float32).astype(dtype)
            y = rng.integers(0, k, m)
            W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
            b = np.zeros(k, dtype)
            calls = [_forced(s, X, y, W, b) for s in ("rows", "gemm")]
            for call in calls:
                call()
            times = [[best_of(c, 3) for c in calls] for _ in range(rounds)]
            out[i, j] = np.median(times, axis=0)
    os.environ.pop("FASTSOFTMAX_STRATEGY", None)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrations", type=at_least_one, default=3)
    ap.add_argument("--rounds", type=at_least_one, default=5)
    ap.add_argument("--work", type=float, default=2e8)
    ap.add_argument("--margins", default="0.85,0.9,0.95,1.0")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--cell-work", default=str(cal.CELL_WORK),
                    help="the calibrations' multiply-adds per timed call, one or more "
                         "(comma-separated; default: _calibration.CELL_WORK)")
    ap.add_argument("--truths", type=at_least_one, default=1,
                    help="passes of the truth (2 or more: their median, and an oracle row)")
    ap.add_argument("--cold-bytes", type=at_least_one, default=cal.COLD_X_BYTES,
                    help="bytes of X copies the calibrations' cold timings read in turn "
                         "(default: _calibration.COLD_X_BYTES)")
    ap.add_argument("--ns", help="the grid's feature counts to take (default: every one)")
    ap.add_argument("--ks", help="the grid's class counts to take, at most SMALL_K "
                                 "(default: every one)")
    args = ap.parse_args(argv)
    ns = _grid_part(ap, "--ns", args.ns, list(cal.GRID_N))
    ks = _grid_part(ap, "--ks", args.ks, [k for k in cal.GRID_K if k <= cal.SMALL_K])
    if args.truths < 1:
        ap.error("--truths: at least 1")
    if args.cold_bytes < 0:
        ap.error("--cold-bytes: at least 0")
    os.environ.pop("FASTSOFTMAX_STRATEGY", None)
    whole = ns == list(cal.GRID_N) and ks == [k for k in cal.GRID_K if k <= cal.SMALL_K]
    cells = None if whole else [(n, k) for n in ns for k in ks if cal.timed_shape(n, k)]
    dtypes = tuple(args.dtypes.split(","))
    passes: dict[str, list[np.ndarray]] = {dt: [] for dt in dtypes}
    for p in range(args.truths):  # passes alternate over the dtypes
        for dt in dtypes:
            passes[dt].append(truth(dt, ns, ks, args.work, args.rounds, seed=p))
    t = {dt: np.median(passes[dt], axis=0) for dt in dtypes}
    for dt in dtypes:
        print(f"\n{dt}: gemm / rows time at m n k = {args.work:g} (above 1: rows faster)")
        print("| n \\ k | " + " | ".join(map(str, ks)) + " |\n|---:|" + "---:|" * len(ks))
        for i, n in enumerate(ns):
            print(f"| {n} | " + " | ".join(f"{g / r:.2f}" for r, g in t[dt][i]) + " |")
    works = [int(float(w)) for w in args.cell_work.split(",")]
    saved = cal.CELL_WORK, cal.MARGIN, cal.COLD_X_BYTES
    cal.COLD_X_BYTES = args.cold_bytes
    try:
        calibrations = {}
        for work in works:
            cal.CELL_WORK = work
            calibrations[work] = [cal.calibrate(dtypes, cells=cells, blocks=False, write=False)
                                  for _ in range(args.calibrations)]
        print(f"\nchosen / faster strategy over the cells, {args.calibrations} calibrations "
              "per cell work (mean, worst and its cell (n, k), cells above 1.10x) per dtype")
        print("| cell work | margin | " + " | ".join(dtypes) + " |\n|---:|---:|"
              + "---|" * len(dtypes))
        for work in works:
            for margin in map(float, args.margins.split(",")):
                cal.MARGIN = margin
                row = [_charge(t[dt], ns, ks, [c[dt]["cells"] for c in calibrations[work]],
                               args.work, np.dtype(dt).itemsize)
                       for dt in dtypes]
                print(f"| {work:.3g} | {margin:g} | " + " | ".join(row) + " |", flush=True)
        if args.truths > 1:
            row = [_oracle(passes[dt], ns, ks) for dt in dtypes]
            print("| oracle | | " + " | ".join(row) + " |", flush=True)
    finally:
        cal.CELL_WORK, cal.MARGIN, cal.COLD_X_BYTES = saved


def _grid_part(ap: argparse.ArgumentParser, option: str, value: str | None,
               grid: list[int]) -> list[int]:
    """The grid values ``value`` names (comma-separated; None: all of ``grid``), in grid order."""
    if value is None:
        return grid
    try:
        picked = {int(v) for v in value.split(",")}
    except ValueError:
        ap.error(f"{option}: comma-separated integers, not {value!r}")
    if not picked or not picked <= set(grid):
        ap.error(f"{option}: values of {grid}, not {value!r}")
    return [v for v in grid if v in picked]


def _charge(truth_times: np.ndarray, ns: list[int], ks: list[int], calibrations: list[dict],
            work: float, itemsize: int) -> str:
    """Each calibration's choice on each cell, charged at the truth: chosen / faster time.

    The choice for the truth's X, as the lookup weighs a cell's two
    timings by the size of X (``_calibration._ratio``).
    """
    costs = []
    for timed in calibrations:
        for i, n in enumerate(ns):
            for j, k in enumerate(ks):
                x_bytes = truth_rows(work, n, k) * n * itemsize
                ratio = cal._ratio(timed, (n, k, False), x_bytes)
                choice = cal._winner(n, k, itemsize, ratio, 1.0)
                rows_s, gemm_s = truth_times[i, j]
                costs.append(((rows_s if choice == "rows" else gemm_s) / min(rows_s, gemm_s),
                              n, k))
    return _summary(costs)


def _oracle(passes: list[np.ndarray], ns: list[int], ks: list[int]) -> str:
    """Each truth pass's faster strategy per cell, charged at every other pass."""
    costs = []
    for a, chooser in enumerate(passes):
        for b, judge in enumerate(passes):
            if a == b:
                continue
            for i, n in enumerate(ns):
                for j, k in enumerate(ks):
                    pick = int(np.argmin(chooser[i, j]))
                    costs.append((judge[i, j, pick] / judge[i, j].min(), n, k))
    return _summary(costs)


def _summary(costs: list[tuple[float, int, int]]) -> str:
    """Mean, worst (with its cell) and count above 1.10x of chosen / faster ratios."""
    ratios = [c for c, _, _ in costs]
    worst = max(costs)
    return (f"{np.mean(ratios):.3f}, {worst[0]:.2f} ({worst[1]}, {worst[2]}), "
            f"{sum(x > 1.10 for x in ratios)} of {len(ratios)}")


if __name__ == "__main__":
    main()
