"""The GEMM blocks' byte budget for narrow rows of many classes, candidate by candidate.

    python benchmarks/narrow_blocks.py [--dtype float32] [--rounds 7] [--quick]

For shapes of narrow rows (at most ``_dense._NARROW_FEATURES`` features)
and many classes, times ``loss_and_grad`` with each of
``_calibration.NARROW_CANDIDATES`` as the budget of X's block and the
logits' (``_dense.gemm_block_rows``), interleaved round by round, and
prints per shape the block rows each gives, the median time and the time
over the shape's fastest; the last line is what this host's calibration
chose. The calibration times only ``_calibration.NARROW_SHAPES``, with
small calls: this is the check of its choice on other shapes and larger
ones. Asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

import fastsoftmax as fs
from fastsoftmax import _calibration as cal
from fastsoftmax import _dense
from fastsoftmax._data import make_dataset

SHAPES = [(20000, 100, 100), (20000, 50, 200), (10000, 20, 1000), (40000, 20, 250),
          (20000, 128, 64), (30000, 64, 64), (20000, 100, 48)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--rounds", type=at_least_one, default=7)
    ap.add_argument("--quick", action="store_true", help="two small shapes (a smoke test)")
    args = ap.parse_args(argv)
    dt = np.dtype(args.dtype)
    shapes = [(m // 20, n, k) for m, n, k in SHAPES[:2]] if args.quick else SHAPES
    calls = 3 if args.quick else 10
    chosen = cal.narrow_block_bytes(dt)
    rng = np.random.default_rng(0)
    print(f"loss_and_grad ms, {dt.name}, 2 threads, medians of {args.rounds} interleaved rounds "
          f"of {calls} calls; per candidate budget: block rows, ms, time / the shape's fastest")
    print("| (m, n, k) | " + " | ".join(f"{c >> 10} KiB" for c in cal.NARROW_CANDIDATES)
          + " |\n|---|" + "---:|" * len(cal.NARROW_CANDIDATES))
    lookup = _dense.narrow_block_bytes
    try:
        for m, n, k in shapes:
            X = rng.standard_normal((m, n)).astype(dt)
            y = rng.integers(0, k, m)
            W = (0.01 * rng.standard_normal((n, k))).astype(dt)
            b = np.zeros(k, dt)
            rows = {}
            for c in cal.NARROW_CANDIDATES:
                # The engine reads the budget through this lookup, the name
                # _dense imported; the block rows printed are an engine's.
                _dense.narrow_block_bytes = lambda *a, c=c, **kw: c
                data = make_dataset(X, y, None, None, k)
                rows[c] = _dense.DenseEngine(data, "gemm", keep_scratch=True)._rows
            got: dict[int, list[float]] = {c: [] for c in cal.NARROW_CANDIDATES}
            for _ in range(args.rounds):
                for c in cal.NARROW_CANDIDATES:
                    _dense.narrow_block_bytes = lambda *a, c=c, **kw: c
                    for _ in range(2):
                        fs.loss_and_grad(X, y, W, b)
                    times = []
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        fs.loss_and_grad(X, y, W, b)
                        times.append(time.perf_counter() - t0)
                    got[c].append(float(np.median(times)))
            med = {c: float(np.median(v)) for c, v in got.items()}
            best = min(med.values())
            cells = [f"{rows[c]} rows, {med[c] * 1e3:.2f}, **{med[c] / best:.2f}**"
                     for c in cal.NARROW_CANDIDATES]
            print(f"| ({m}, {n}, {k}) | " + " | ".join(cells) + " |", flush=True)
    finally:
        _dense.narrow_block_bytes = lookup
    print(f"this host's calibration: {chosen >> 10} KiB")


if __name__ == "__main__":
    main()
