"""Cold compile time with Numba's compiler as it is and as this package adjusts it (target 5).

    python benchmarks/numba_passes.py [--switch inline|ssa|copies|wrappers|locks|all] [--rounds 3]
                                      [--cases float64:auto,float32:sgd,float32:grad:rows]
                                      [--processes 1]

Each case is ``DTYPE:ENTRY[:STRATEGY]``: ``benchmarks/compile_time.py DTYPE
ENTRY`` in a fresh process on an empty Numba cache (import and the first
call, every kernel it needs compiled), with ``FASTSOFTMAX_STRATEGY`` set to
STRATEGY where given. Each case runs ``--rounds`` times with the
adjustment to Numba's compiler that ``--switch`` names left as Numba has
it (``FASTSOFTMAX_NUMBA_AS_IS`` set to that name) and as this package has
it (the variable unset), the two alternating, the order swapped every
round: ``inline`` (this package's helpers copied with one scope per IR
copy, ``fastsoftmax._kernels._inline``), ``ssa`` (SSA reconstruction on
the blocks naming each variable only, ``_ssa``), ``copies`` (copy
propagation's rounds compared without deep copies, ``_copies``),
``wrappers`` (the parallel loops' wrapper libraries compiled inside their
kernel only, ``_wrappers``), ``locks`` (one process at a time compiling a
kernel signature, ``_locks``) or ``all`` of them (the default). Prints per case
the median wall seconds (what a user waits) and CPU seconds of the child
process under each, and their ratio.

``--processes N`` starts N copies of the case at once on one empty cache
(as joblib's or Dask's workers on one machine start): the wall seconds are
then until the last one is done, the CPU seconds those of all N.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

HERE = Path(__file__).resolve().parent
SETTINGS = ("numba", "")
SWITCHES = ("inline", "ssa", "copies", "wrappers", "locks", "all")


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_case(case: str, switch: str, setting: str, processes: int = 1) -> tuple[float, float]:
    """(wall, cpu) seconds of one cold run of ``case``, ``switch`` as Numba has it or not.

    ``processes`` copies started at once on one empty cache: wall until the
    last is done, the CPU of all.
    """
    dtype, entry, *strategy = case.split(":")
    env = dict(os.environ, FASTSOFTMAX_NUMBA_AS_IS=switch if setting == "numba" else "")
    env.pop("FASTSOFTMAX_STRATEGY", None)
    if strategy:
        env["FASTSOFTMAX_STRATEGY"] = strategy[0]
    with tempfile.TemporaryDirectory(prefix="fastsoftmax-cold-cache-") as cache:
        env["COMPILE_TIME_CACHE"] = cache
        cpu0, t0 = child_cpu(), time.perf_counter()
        procs = [subprocess.Popen([sys.executable, str(HERE / "compile_time.py"), dtype, entry],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(processes)]
        errors = [p.communicate()[1] for p in procs]
        wall, cpu = time.perf_counter() - t0, child_cpu() - cpu0
    for p, err in zip(procs, errors, strict=True):
        if p.returncode:
            raise SystemExit(f"{case} ({switch}: {setting or 'this package'}'s) failed:\n"
                             f"{err[-2000:]}")
    return wall, cpu


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--switch", choices=SWITCHES, default="all")
    ap.add_argument("--rounds", type=at_least_one, default=3)
    ap.add_argument("--cases", default="float64:auto,float32:sgd,float32:grad:rows")
    ap.add_argument("--processes", type=at_least_one, default=1)
    args = ap.parse_args(argv)
    cases = args.cases.split(",")
    for case in cases:
        if len(case.split(":")) not in (2, 3):
            ap.error(f"--cases: {case!r} is not DTYPE:ENTRY[:STRATEGY]")
    times = {(c, s): [] for c in cases for s in SETTINGS}
    for r in range(args.rounds):
        for case in cases:
            for setting in SETTINGS if r % 2 == 0 else SETTINGS[::-1]:
                times[case, setting].append(run_case(case, args.switch, setting,
                                                     args.processes))
    together = (f"{args.processes} processes at once on one empty cache"
                if args.processes > 1 else "fresh process per run")
    print(f"cold compile, {together}, medians of {args.rounds} rounds; "
          f"FASTSOFTMAX_NUMBA_AS_IS={args.switch} against unset")
    print("| case | Numba's: wall s | cpu s | this package's: wall s | cpu s "
          "| this package's / Numba's (wall, cpu) |")
    print("|---|---:|---:|---:|---:|---|")
    for case in cases:
        numba = np.median(times[case, "numba"], axis=0)
        ours = np.median(times[case, ""], axis=0)
        print(f"| {case} | {numba[0]:.1f} | {numba[1]:.1f} | {ours[0]:.1f} | {ours[1]:.1f} "
              f"| **{ours[0] / numba[0]:.2f}**, {ours[1] / numba[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
