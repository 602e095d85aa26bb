"""loss_and_grad of this checkout against the same at a git revision, processes alternating.

    python benchmarks/against_commit.py [--base HEAD] [--dtype float32]
                                        [--shapes 20000x100x100,100000x20x100,...]
                                        [--rounds 5] [--strategy gemm]
                                        [--what gradient|products|fits[,...]] [--quick]

A kernel change cannot keep its old form beside the new one in one process
when what changed is code generated below Numba (an IR intrinsic, a rule
inlined into every kernel). This script times the two versions of the whole
package instead: ``--base`` checked out into a temporary git worktree, then
``--rounds`` rounds of one process of each version in turn (base first in
the first round, then each round in the reverse order of the last),
each process timing every shape (``fastsoftmax.loss_and_grad``, alpha 1e-4,
default thread count, the medians of 9 batches of 10 calls after 5 untimed
calls, which take the compile or the cache load). The table gives the
medians over the rounds and their ratio (this checkout's time over the
base's: below 1, this checkout is faster).

The calibration's wisdom belongs to one version of the kernels' sources
(``fastsoftmax._calibration``): after a kernel change this checkout has
none until ``python -m fastsoftmax bench --calibrate``, and may choose
another strategy than the base. ``--strategy rows`` or ``gemm``
(``FASTSOFTMAX_STRATEGY`` in both processes) compares the kernels of one
strategy; without it, each version chooses as a user's process would.
Each process's kernel name is printed beside its time.

``--what products``: Hessian-vector products instead, as a Newton step
takes them (``Objective.hessian`` once: one gradient pass storing the
probabilities; then ``Hessian.matvec`` with a direction and an intercept
part timed, inside the thread policy that holds BLAS at one thread, as a
fit's solver runs it), the products' kernel printed. ``--what fits``: whole default
fits (``SoftmaxRegression().fit``, Newton's: mostly Hessian products) on
``strategy_fits.py``'s data (class prototypes plus noise), one warm-up fit
on 2,000 rows, then the median of ``--batches`` fits (3 unless given).

``--what`` takes several of these, comma-separated (``gradient,products,fits``):
a table each, in that order, from one worktree, so the base compiles its
kernels once for all of them.

``--quick``: one tiny shape, one round of 1 batch (a smoke test; the base
still compiles its kernels once, into the worktree).
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import at_least_one, comma_list  # benchmarks/ is on the path of a script run from it

ROOT = Path(__file__).resolve().parent.parent
SHAPES = "20000x100x100,100000x20x100,3000x784x100,10000x20x1000,2000x100x1000"


def worker(dtype: str, shapes: str, batches: int, what: str) -> None:
    """Time ``what`` at each shape with the fastsoftmax importable here.

    Prints JSON: {shape: (seconds, kernel)}.
    """
    import time

    import fastsoftmax as fs
    from fastsoftmax._data import make_dataset
    from fastsoftmax._objective import Objective

    rng = np.random.default_rng(0)
    out = {}
    for shape in shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        X = rng.standard_normal((m, n)).astype(dtype)
        y = rng.integers(0, k, m)
        W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
        b = np.zeros(k, dtype)
        data = make_dataset(X, y.astype(np.int64), None, None, k)
        obj = Objective(data)
        if what == "fits":
            out[shape] = (_fits(m, n, k, dtype, batches), obj.engine.describe()["products"])
            continue
        if what == "products":  # a Newton step's: P stored by one gradient pass, then products
            H = obj.hessian(np.ascontiguousarray(W.T), b, 1e-4)
            V = rng.standard_normal((k, n)).astype(dtype)
            c = rng.standard_normal(k).astype(dtype)

            # Under the thread policy, as a fit's solver calls it (BLAS held
            # at one thread); loss_and_grad enters it itself.
            call = functools.partial(_in_policy, functools.partial(H.matvec, V, c))
        else:
            call = functools.partial(fs.loss_and_grad, X, y, W, b, alpha=1e-4)
        for _ in range(5):
            call()
        times = []
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(10):
                call()
            times.append((time.perf_counter() - t0) / 10)
        kernel = obj.engine.describe()["products" if what == "products" else "kernel"]
        out[shape] = (statistics.median(times), kernel)
    print(json.dumps(out))


def _in_policy(call) -> None:
    """Run ``call()`` inside ``fastsoftmax._threads.thread_policy``, as the solvers do."""
    from fastsoftmax._threads import thread_policy

    with thread_policy(None):
        call()


def _fits(m: int, n: int, k: int, dtype: str, batches: int) -> float:
    """Median seconds of ``batches`` default fits on strategy_fits.py's data, after a warm-up."""
    import time

    from strategy_fits import problem

    from fastsoftmax import SoftmaxRegression

    X, y = problem(m, n, k, dtype)
    SoftmaxRegression(max_iter=2).fit(X[:2000], y[:2000])
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        SoftmaxRegression().fit(X, y)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


TITLES = {"gradient": "loss_and_grad", "products": "Hessian products (P stored)",
          "fits": "default fits (Newton)"}


def run(tree: Path, args, what: str, batches: int) -> dict:
    """One worker process timing ``what`` on the package in ``tree``; {shape: (seconds, kernel)}."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    if args.strategy:
        env["FASTSOFTMAX_STRATEGY"] = args.strategy
    cmd = [sys.executable, "-W", "ignore", str(Path(__file__).resolve()), "--worker",
           "--dtype", args.dtype, "--shapes", args.shapes, "--batches", str(batches)]
    cmd += ["--what", what]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the timing process on {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--rounds", type=at_least_one, default=5)
    parser.add_argument("--batches", type=at_least_one, default=None)
    parser.add_argument("--strategy", choices=("rows", "gemm"), default=None)
    parser.add_argument("--what", type=comma_list(TITLES), default=["gradient"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        what, = args.what
        worker(args.dtype, args.shapes, args.batches, what)
        return
    if args.quick:
        args.shapes, args.rounds, args.batches = "300x20x40", 1, 1
    # {what: [{version: [{shape: (seconds, kernel)}, one a round]}]}
    runs: dict[str, dict[str, list[dict]]] = {w: {"base": [], "this": []} for w in args.what}
    with tempfile.TemporaryDirectory(prefix="fastsoftmax-base-") as tmp:
        base = Path(tmp) / "tree"
        added = subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base),
                                args.base], cwd=ROOT, capture_output=True, text=True)
        if added.returncode != 0:
            raise SystemExit(f"cannot check out --base {args.base!r}: {added.stderr.strip()}")
        try:
            for what in args.what:
                batches = args.batches if args.batches is not None else (
                    3 if what == "fits" else 9)
                # Each round's order the reverse of the last (base, this;
                # this, base; ...): a cost that falls on the first process
                # of a round, or one that drifts through the run, weighs on
                # both versions alike. In an A/A run (--base HEAD, three
                # rounds, base always first) the first process took
                # 1.05-1.19x the second's time at every one of nine shapes.
                for r in range(args.rounds):
                    order = (("base", base), ("this", ROOT))
                    for version, tree in order if r % 2 == 0 else order[::-1]:
                        runs[what][version].append(run(tree, args, what, batches))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT,
                           check=False)
    rev = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    for i, what in enumerate(args.what):
        if i:
            print()
        print(f"{TITLES[what]} ms, {args.dtype}, this checkout against {args.base} ({rev}), "
              f"medians of {args.rounds} alternating processes; strategy: "
              f"{args.strategy or 'as each version chooses'}")
        print("| (m, n, k) | base ms | this ms | this / base | base kernel | this kernel |")
        print("|---|---:|---:|---:|---|---|")
        for shape in args.shapes.split(","):
            t = {v: statistics.median(r[shape][0] for r in rs) * 1e3
                 for v, rs in runs[what].items()}
            kern = {v: rs[-1][shape][1] for v, rs in runs[what].items()}
            print(f"| ({shape.replace('x', ', ')}) | {t['base']:.3f} | {t['this']:.3f} | "
                  f"{t['this'] / t['base']:.2f} | {kern['base']} | {kern['this']} |",
                  flush=True)


if __name__ == "__main__":
    main()
