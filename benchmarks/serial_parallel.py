"""Small dense problems: one chunk on one thread against the parallel kernel on all.

    python benchmarks/serial_parallel.py [--rounds 9]

For a few shapes around the serial threshold (``_launch.SERIAL_WORK``,
counted by ``_launch.launch_work``), times the dense gradient (rows
strategy) run as one chunk on the calling thread and as the parallel kernel
on every thread, interleaved, back to back and each call after 0.2 s idle
(when the workers have gone to sleep). Prints one Markdown table, with the
launch decision the engine would make; asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fastsoftmax as fs
from fastsoftmax._data import make_dataset
from fastsoftmax._dense import DenseEngine
from fastsoftmax._launch import SERIAL_WORK
from fastsoftmax._threads import thread_policy

try:
    from fastsoftmax._launch import launch_work
except ImportError:  # an older checkout (PYTHONPATH=it): the threshold counted m n k

    def launch_work(m: int, n: int, k: int) -> int:
        return m * n * k

SHAPES = [(300000, 20, 2), (50000, 20, 2), (20000, 20, 10), (10000, 20, 2), (5000, 50, 5),
          (2000, 100, 2)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    fs.softmax(np.ones((100000, 50)))
    rng = np.random.default_rng(0)
    print("| (m, n, k) | engine's choice | one chunk ms | parallel ms | one / parallel | "
          "one chunk ms, after 0.2 s | parallel ms, after 0.2 s | one / parallel |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|")
    for m, n, k in SHAPES:
        X = rng.standard_normal((m, n)).astype(np.float32)
        data = make_dataset(X, rng.integers(0, k, m), None, None, k)
        coef = (0.1 * rng.standard_normal((k, n))).astype(np.float32)
        b = np.zeros(k, np.float32)
        engines = []
        for serial in (True, False):
            e = DenseEngine(data, "rows")
            e._serial = serial
            engines.append(e)
        cells = []
        with thread_policy(None):
            for e in engines:
                e.gradient(coef, b)
            for pause in (0.0, 0.2):
                times: list[list[float]] = [[], []]
                for _ in range(args.rounds):
                    for t, e in zip(times, engines, strict=True):
                        if pause:
                            time.sleep(pause)
                        t0 = time.perf_counter()
                        e.gradient(coef, b)
                        t.append(time.perf_counter() - t0)
                one, par = (float(np.median(t)) * 1e3 for t in times)
                cells += [f"{one:.2f}", f"{par:.2f}", f"**{one / par:.2f}**"]
        choice = "one chunk" if launch_work(m, n, k) < SERIAL_WORK else "parallel"
        print(f"| ({m}, {n}, {k}) | {choice} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
