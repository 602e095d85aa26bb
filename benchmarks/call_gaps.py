"""Small calls of the function API at a given gap between calls: one thread or all.

    python benchmarks/call_gaps.py [--rounds 5] [--gaps 0,0.1,1,5,20] [--quick]

``loss_and_grad`` on small float32 problems (below ``_launch.SERIAL_WORK``),
called in a loop with a gap before every call: the calling thread asleep
("idle": the process waits, as for a user's input or a file) or busy
("busy": the process computes, as an optimiser's own code does). Three
launch settings, interleaved round by round: always one chunk on the
calling thread, always the parallel kernel on every thread, and the
library's rule (one chunk unless the calls come in a loop:
``_launch.calls_in_a_loop``). A last row per shape times a burst of ten
calls after 0.3 s idle, the case ``_launch.LOOP_SPAN_S`` is for. Prints
one Markdown table of median microseconds per call; asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

import fastsoftmax as fs
from fastsoftmax import _launch

SHAPES = [(10000, 20, 10), (2000, 100, 10), (1000, 20, 100), (1000, 100, 100)]
SETTINGS = ("one chunk", "parallel", "rule")


def _set(setting: str, defaults: tuple[int, int]) -> None:
    work, warm = {"one chunk": (1 << 62, 1 << 62), "parallel": (0, 0), "rule": defaults}[setting]
    _launch.SERIAL_WORK, _launch.SERIAL_WORK_WARM = work, warm


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _per_call(fn, gap_s: float, busy: bool, calls: int) -> float:
    """Median seconds of ``calls`` calls, each after ``gap_s`` idle or busy."""
    times = []
    for _ in range(calls):
        if gap_s:
            (_busy if busy else time.sleep)(gap_s)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _burst(fn, calls: int = 10) -> float:
    """Seconds per call of ``calls`` back-to-back calls after 0.3 s idle."""
    time.sleep(0.3)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=at_least_one, default=5)
    ap.add_argument("--gaps", default="0,0.1,1,5,20", help="milliseconds, comma-separated")
    ap.add_argument("--quick", action="store_true", help="one shape, few calls (a smoke test)")
    args = ap.parse_args(argv)
    gaps = [float(g) / 1000 for g in args.gaps.split(",")]
    shapes = SHAPES[1:2] if args.quick else SHAPES
    calls = 5 if args.quick else 30
    defaults = (_launch.SERIAL_WORK, _launch.SERIAL_WORK_WARM)
    rng = np.random.default_rng(0)
    print(f"loss_and_grad µs per call, float32, medians of {args.rounds} interleaved rounds")
    print("| (m, n, k) | gap before each call | " + " | ".join(SETTINGS)
          + " | one chunk / rule |\n|---|---|" + "---:|" * (len(SETTINGS) + 1))
    try:
        for m, n, k in shapes:
            X = rng.standard_normal((m, n)).astype(np.float32)
            y = rng.integers(0, k, m)
            W = (0.1 * rng.standard_normal((n, k))).astype(np.float32)
            b = np.zeros(k, np.float32)

            def fn(X=X, y=y, W=W, b=b):
                fs.loss_and_grad(X, y, W, b)

            for setting in SETTINGS:  # warm-up: compilation, caches, scratch
                _set(setting, defaults)
                for _ in range(calls):
                    fn()
            cases = [(f"{g * 1e3:g} ms {kind}" if g else "none", g, kind == "busy")
                     for g in gaps for kind in (("idle", "busy") if g else ("",))]
            for label, gap, busy in [*cases, ("10 calls after 0.3 s idle", None, False)]:
                got: dict[str, list[float]] = {s: [] for s in SETTINGS}
                for _ in range(args.rounds):
                    for setting in SETTINGS:
                        _set(setting, defaults)
                        got[setting].append(_burst(fn) if gap is None
                                            else _per_call(fn, gap, busy, calls))
                med = {s: float(np.median(v)) * 1e6 for s, v in got.items()}
                print(f"| ({m}, {n}, {k}) | {label} | "
                      + " | ".join(f"{med[s]:.0f}" for s in SETTINGS)
                      + f" | **{med['one chunk'] / med['rule']:.2f}** |", flush=True)
    finally:
        _set("rule", defaults)


if __name__ == "__main__":
    main()
