"""A first fit on an empty cache with and without the second compiling process.

Each round runs ``benchmarks/compile_time.py DTYPE CASE kernels`` twice in
fresh processes, each on a new empty Numba cache: once with
``FASTSOFTMAX_SIDE_COMPILE=0`` (everything compiled in the fitting process)
and once in the default environment (the variable unset: a second process
compiles the Hessian products' kernel where a core is spare), the order
alternating from round to round. Prints one Markdown row per run: the load
average at its start, the seconds of import and first fit (the script's
total), and which kernels the fitting process compiled itself; then the
medians.

    python benchmarks/side_compile.py [--rounds 5] [--dtype float64] [--case auto]

The default case is the performance issue's target 5: import and a first
default fit (Newton) of 5,000 x 100, 3 classes, float64.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

HERE = Path(__file__).resolve().parent


def run(dtype: str, case: str, setting: str | None) -> tuple[float, list[str], float]:
    """(total seconds, kernels compiled here, load average at the start) of one cold process."""
    env = dict(os.environ)
    env.pop("FASTSOFTMAX_SIDE_COMPILE", None)
    if setting is not None:
        env["FASTSOFTMAX_SIDE_COMPILE"] = setting
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="fastsoftmax-side-") as cache:
        env["COMPILE_TIME_CACHE"] = cache
        out = subprocess.run([sys.executable, str(HERE / "compile_time.py"), dtype, case,
                              "kernels"], env=env, check=True, capture_output=True, text=True,
                             timeout=900).stdout.splitlines()
    total = float(out[-1].split()[-2])
    kernels = [line.split()[0] for line in out if line.startswith("    ")]
    return total, kernels, load


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=at_least_one, default=5)
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--case", default="auto")
    args = ap.parse_args(argv)
    settings = {"0 (one process)": "0", "default (unset)": None}
    times: dict[str, list[float]] = {name: [] for name in settings}
    print(f"`compile_time.py {args.dtype} {args.case}` on an empty cache, "
          f"{os.cpu_count()} CPUs, {args.rounds} rounds, the order alternating")
    print("| round | FASTSOFTMAX_SIDE_COMPILE | load at start | import + first fit s "
          "| compiled in the fitting process |")
    print("|---:|---|---:|---:|---|")
    for r in range(args.rounds):
        order = list(settings.items())
        for name, setting in order if r % 2 == 0 else order[::-1]:
            total, kernels, load = run(args.dtype, args.case, setting)
            times[name].append(total)
            print(f"| {r + 1} | {name} | {load:.2f} | {total:.1f} | "
                  f"{', '.join(kernels) or '(none timed)'} |", flush=True)
    print()
    print("| FASTSOFTMAX_SIDE_COMPILE | median s | against one process |")
    print("|---|---:|---:|")
    base = float(np.median(times["0 (one process)"]))
    for name, values in times.items():
        med = float(np.median(values))
        print(f"| {name} | {med:.1f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
