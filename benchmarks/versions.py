"""The working tree's kernels against an earlier commit's, side by side in one process.

    python benchmarks/versions.py REV|FOLDER [--what grad|hessp|softmax|proba|sgdB]
                                      [--dtypes float32,float64]
                                      [--shapes 60000x784x10,300000x20x2,...] [--rounds 11]
                                      [--reuse-cache] [--threads 16,1]

``REV``'s ``fastsoftmax/`` is extracted with ``git archive`` into a
temporary folder (or copied, where ``REV`` is a folder holding a
``fastsoftmax/`` package: on a machine the tree was copied to without its
history) and imported as a second package (the package imports
itself relatively), with its own Numba cache there, and so is a copy of
the working tree's (``--reuse-cache``: the working tree itself, with
whatever its cache holds): two compiles of the same kernel can run more
than 10 % apart (BENCHMARKS.md, "Eighteenth session"), and a working tree
compiled once would carry one compile's luck into every run. Then, per
shape, the public function of each version is timed interleaved after a
warm-up: median over ``--rounds`` rounds of the best of 5 calls. Both
versions choose their strategy the same way (``FASTSOFTMAX_STRATEGY``, if
set, holds for both). Prints a Markdown table with the two times, new / old, and the
largest difference of the results relative to their largest entry; asserts
nothing. ``--threads``: time each shape at each of these Numba thread
counts (``numba.set_num_threads``; by default the process's count).
``--what softmax`` reads a shape m x k (the middle number ignored);
``sgdB`` (``sgd1``, ``sgd16``, ``sgd64``, ...) times one SGD epoch in
batches of B rows (the epoch of ``fastsoftmax.bench``'s SGD case: eta
0.01, no momentum);
``proba`` times ``predict_proba`` of a model whose weights are set by hand.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
from io import BytesIO
from pathlib import Path

import numpy as np
from _common import at_least_one, best_of  # benchmarks/ is on the path of a script run from it

import fastsoftmax as new

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ("60000x784x10,128000x784x2,26000x784x10,7000x3000x10,200000x100x10,"
          "300000x20x2,300000x20x10,100000x300x20,30000x784x48,100000x20x100,"
          "10000x20x1000,2000x100x1000")


def import_revision(rev: str, where: Path):
    """Import ``rev``'s fastsoftmax package (or that of the folder ``rev``) as fastsoftmax_old."""
    if (Path(rev) / "fastsoftmax").is_dir():
        shutil.copytree(Path(rev) / "fastsoftmax", where / "fastsoftmax_old",
                        ignore=shutil.ignore_patterns("__pycache__"))
        return _import_from(where, "fastsoftmax_old")
    archive = subprocess.run(["git", "archive", rev, "fastsoftmax"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    (where / "fastsoftmax").rename(where / "fastsoftmax_old")
    return _import_from(where, "fastsoftmax_old")


def import_working_tree(where: Path):
    """Import a copy of the working tree's package (no compiled kernels) as fastsoftmax_new."""
    shutil.copytree(ROOT / "fastsoftmax", where / "fastsoftmax_new",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return _import_from(where, "fastsoftmax_new")


def _import_from(where: Path, name: str):
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    return importlib.import_module(name)


def calls(module, what: str, m: int, n: int, k: int, dtype: str):
    rng = np.random.default_rng(0)
    if what == "softmax":
        Z = (3 * rng.standard_normal((m, k))).astype(dtype)
        return lambda: module.softmax(Z)
    X = rng.standard_normal((m, n), dtype=np.float32).astype(dtype)
    y = rng.integers(0, k, m)
    W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
    b = np.zeros(k, dtype)
    if what.startswith("sgd"):
        return _sgd_epoch(module, X, y, W, b, int(what[3:]), rng.permutation(m))
    if what == "grad":
        return lambda: module.loss_and_grad(X, y, W, b, alpha=1e-3)
    if what == "proba":
        est = _model(module, X, W, b)
        return lambda: est.predict_proba(X)
    V = rng.standard_normal((n, k)).astype(dtype)
    c = rng.standard_normal(k).astype(dtype)
    return lambda: module.hessp(X, y, W, b, V, c, alpha=1e-3)


def _model(module, X, W, b):
    """A fitted ``SoftmaxRegression`` of ``module`` with coef_ = Wᵀ and intercept_ = b."""
    k = W.shape[1]
    rows = np.arange(2 * k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one iteration: a convergence warning
        est = module.SoftmaxRegression(max_iter=1).fit(X[rows % X.shape[0]], rows % k)
    est.coef_ = np.ascontiguousarray(W.T)
    est.intercept_ = b.copy()
    return est


def _sgd_epoch(module, X, y, W, b, batch_size: int, order):
    """One epoch of ``module``'s SGD (eta 0.01, no momentum) from (W, b), in ``order``;
    the call returns the weights it ends with.

    Built from the version's own modules: its ``bench._sgd_case`` imports
    ``fastsoftmax`` by name, so an older version's case would time the
    working tree's epoch.
    """
    def sub(name):
        return importlib.import_module(f"{module.__name__}.{name}")

    sgd = sub("_solvers.sgd")
    k = W.shape[1]
    data = sub("_data").make_dataset(X, y.astype(np.int64), None, None, k)
    params = sub("_params").check_params(module.SoftmaxRegression(
        "sgd", alpha=0.0, eta0=0.01, momentum=0.0, nesterov=False, learning_rate="constant",
        batch_size=batch_size))
    steps = -(-X.shape[0] // batch_size)

    def epoch():
        state = sgd.SGDState.start(W.T, b)
        sgd.run_epoch(data, state, order, params, steps_per_epoch=steps)
        return state.coef

    return epoch


def _what(text: str) -> str:
    """The --what argument: one of the fixed names, or sgd followed by a batch size."""
    if text in ("grad", "hessp", "softmax", "proba") or (
            text.startswith("sgd") and text[3:].isdigit() and int(text[3:]) > 0):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: expected grad, hessp, softmax, proba or "
                                     "sgdB with B a positive batch size (sgd1, sgd64, ...)")


def _difference(a, b) -> float:
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    worst = 0.0
    for u, v in zip(a, b, strict=True):
        u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
        worst = max(worst, float(np.abs(u - v).max() / max(np.abs(u).max(), 1e-300)))
    return worst


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rev")
    ap.add_argument("--what", type=_what, default="grad",
                    help="grad, hessp, softmax, proba or sgdB (B: the batch size)")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=at_least_one, default=11)
    ap.add_argument("--reuse-cache", action="store_true",
                    help="time the working tree with its own Numba cache, not a fresh copy")
    ap.add_argument("--threads", default="", help="Numba thread counts, e.g. 16,1")
    args = ap.parse_args(argv)
    import numba

    threads = [int(t) for t in args.threads.split(",") if t] or [numba.get_num_threads()]
    with tempfile.TemporaryDirectory(prefix="fastsoftmax-versions-") as tmp:
        old = import_revision(args.rev, Path(tmp))
        current = new if args.reuse_cache else import_working_tree(Path(tmp))
        print(f"{args.what}: {args.rev} (old) against the working tree (new), medians of "
              f"{args.rounds} interleaved rounds of the best of 5 calls")
        print("| (m, n, k) | dtype | threads | old ms | new ms | new / old | difference |\n"
              "|---|---|---:|---:|---:|---:|---:|")
        for dtype in args.dtypes.split(","):
            for shape in args.shapes.split(","):
                m, n, k = map(int, shape.split("x"))
                fo = calls(old, args.what, m, n, k, dtype)
                fn = calls(current, args.what, m, n, k, dtype)
                for t in threads:
                    numba.set_num_threads(t)
                    a, b = fo(), fn()  # the SGD epochs return nothing to compare
                    diff = "-" if a is None else f"{_difference(a, b):.0e}"
                    times = np.array([[best_of(fo, 5), best_of(fn, 5)]
                                      for _ in range(args.rounds)])
                    to, tn = np.median(times, axis=0)
                    print(f"| ({m}, {n}, {k}) | {dtype} | {t} | {to * 1e3:.2f} | "
                          f"{tn * 1e3:.2f} | **{tn / to:.2f}** | {diff} |", flush=True)


if __name__ == "__main__":
    main()
