"""The command line at scale: ``fastsoftmax train`` and ``predict`` on a large file.

    python benchmarks/cli_scale.py                    # 200,000 x 50 CSV (~197 MB), 3 rounds
    python benchmarks/cli_scale.py --big-gb 5         # and a ~5 GB CSV, --chunksize 50000

Data: rows of 50 standard normal features and a string label
``class_0``..``class_9`` drawn from a softmax model (``argmax(X W + Gumbel
noise)``), written with a header (pyarrow's CSV writer when installed, else
pandas'; both write the shortest repr of each float).

Timed, in interleaved rounds (medians reported):

- ``fastsoftmax train big.csv -o m.npz`` as a subprocess against, in this
  process, ``pandas.read_csv`` + ``SoftmaxRegression().fit`` (the same
  lbfgs defaults);
- ``fastsoftmax predict m.npz big.csv -o p.csv`` against ``read_csv`` +
  ``predict`` + ``DataFrame.to_csv``;
- the same on the data as Parquet (``pandas.read_parquet`` for the
  baseline), when pyarrow is installed;
- the fixed cost that every subprocess pays and the in-process baseline
  does not: ``fastsoftmax --version`` (the interpreter and ``import
  fastsoftmax``) and train and predict on 2,000 rows (also loading the
  kernels from Numba's cache); the last column of the table subtracts the
  latter.

Peak RSS is each subprocess's own ``ru_maxrss``, read by a small parent
process (``getrusage(RUSAGE_CHILDREN)``), which also times it. With
``--big-gb G`` a CSV of about G GB is written and trained on once with
``--chunksize`` (peak RSS and time), and the streamed model's accuracy on
fresh rows is compared with a full-memory ``SoftmaxRegression("sgd")`` fit
on the same rows, read whole (or on ``--sample`` fresh rows). Prints
Markdown tables; asserts nothing.
Everything is written to a temporary folder (``--dir`` to keep and reuse).
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

from fastsoftmax import SoftmaxRegression

REPO = Path(__file__).resolve().parents[1]
N_FEATURES, N_CLASSES = 50, 10
TRUE_W = np.random.default_rng(12345).standard_normal((N_FEATURES, N_CLASSES)) * 0.5
NAMES = np.array([f"class_{c}" for c in range(N_CLASSES)])
MB = 1024 * 1024


def rows(m, seed):
    """(X, labels) of m rows from the fixed softmax model, seeded."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, N_FEATURES))
    y = np.argmax(X @ TRUE_W + rng.gumbel(size=(m, N_CLASSES)), axis=1)
    return X, NAMES[y]


def write_csv(path, m, seed, block=100_000):
    """Write m rows (in blocks of ``block``, each with its own seed) with a header."""
    columns = [f"f{j}" for j in range(N_FEATURES)] + ["label"]
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
    except ImportError:
        pa = None
    with open(path, "wb") as fh:
        for i, start in enumerate(range(0, m, block)):
            X, y = rows(min(block, m - start), seed * 100_003 + i)
            if pa is not None:
                table = pa.table({**{c: X[:, j] for j, c in enumerate(columns[:-1])},
                                  "label": y})
                pacsv.write_csv(table, fh, pacsv.WriteOptions(
                    include_header=i == 0, quoting_style="none"))
            else:
                frame = pd.DataFrame(X, columns=columns[:-1])
                frame["label"] = y
                frame.to_csv(fh, header=i == 0, index=False)


# Runs the command as its own child and reports that child's peak RSS: a
# process started straight from this (large) one would count this one's
# pages in its ru_maxrss, which Linux carries over fork and exec.
_MEASURE = r"""
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call(sys.argv[2:])
elapsed = time.perf_counter() - start
with open(sys.argv[1], "w") as fh:
    fh.write(f"{elapsed} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
sys.exit(code)
"""


def run(*argv):
    """Run ``python -m fastsoftmax ARGV``: (seconds, peak RSS in bytes, stdout)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "usage"
        proc = subprocess.run([sys.executable, "-c", _MEASURE, str(report), sys.executable,
                               "-m", "fastsoftmax", *map(str, argv)],
                              capture_output=True, text=True, env=env, cwd=REPO)
        if proc.returncode != 0:
            sys.exit(f"fastsoftmax {' '.join(map(str, argv))} failed:\n{proc.stderr}")
        elapsed, peak_kb = report.read_text().split()
    return float(elapsed), int(peak_kb) * 1024, proc.stdout


def baseline_train(read, path):
    """read + SoftmaxRegression().fit in this process: (seconds, model)."""
    start = time.perf_counter()
    frame = read(path)
    y = frame.pop("label").to_numpy()
    X = frame.to_numpy(dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SoftmaxRegression().fit(X, y)
    return time.perf_counter() - start, model


def baseline_predict(read, path, model, out):
    """read + predict + to_csv in this process: seconds."""
    start = time.perf_counter()
    frame = read(path)
    X = frame.drop(columns="label").to_numpy(dtype=np.float64)
    pd.DataFrame({"label": model.predict(X)}).to_csv(out, index=False)
    return time.perf_counter() - start


def fmt_s(values):
    return f"{statistics.median(values):.2f} s"


def scale_tables(folder, n_rows, n_rounds):
    csv_path = folder / "big.csv"
    if not csv_path.exists():
        write_csv(csv_path, n_rows, seed=1)
    files = {"CSV": (csv_path, pd.read_csv)}
    try:
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        parquet_path = folder / "big.parquet"
        if not parquet_path.exists():
            pq.write_table(pacsv.read_csv(csv_path), parquet_path)
        files["Parquet"] = (parquet_path, pd.read_parquet)
    except ImportError:
        print("(pyarrow is not installed: no Parquet rows)\n")
    size = csv_path.stat().st_size
    x_bytes = n_rows * N_FEATURES * 8

    # Untimed warm-up: Numba's cache for fit and predict, the page cache for the files.
    small = folder / "small.csv"
    write_csv(small, 2000, seed=2)
    run("train", small, "-o", folder / "small.npz")
    run("predict", folder / "small.npz", small, "-o", folder / "small_p.csv")
    baseline_train(pd.read_csv, small)
    for path, read in files.values():
        read(path)

    times = {}
    rss = {}

    def note(key, seconds, peak=None):
        times.setdefault(key, []).append(seconds)
        if peak is not None:
            rss[key] = max(rss.get(key, 0), peak)

    for _ in range(n_rounds):
        seconds, peak, _ = run("--version")
        note(("start-up", "cli"), seconds, peak)
        # The fixed cost of a command: the same work on 2,000 rows.
        note(("train", "fixed"), run("train", small, "-o", folder / "small.npz")[0])
        note(("predict", "fixed"), run("predict", folder / "small.npz", small,
                                       "-o", folder / "small_p.csv")[0])
        for kind, (path, read) in files.items():
            model_path, out = folder / f"m_{kind}.npz", folder / f"p_{kind}.csv"
            seconds, peak, _ = run("train", path, "-o", model_path)
            note((f"train {kind}", "cli"), seconds, peak)
            seconds, model = baseline_train(read, path)
            note((f"train {kind}", "base"), seconds)
            seconds, peak, _ = run("predict", model_path, path, "-o", out)
            note((f"predict {kind}", "cli"), seconds, peak)
            note((f"predict {kind}", "base"), baseline_predict(read, path, model,
                                                              folder / "p_base.csv"))
    same = (folder / "p_CSV.csv").read_bytes() == (folder / "p_base.csv").read_bytes()

    print(f"### {n_rows:,} rows x {N_FEATURES} float columns + a string label "
          f"({size / 1e6:.0f} MB CSV), {N_CLASSES} classes\n")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at the end; medians of {n_rounds} "
          "interleaved rounds.\n")
    print("| task | `fastsoftmax` (subprocess) | baseline (in process) | ratio | target "
          "| ratio less the fixed cost |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in files:
        for task, base in (("train", "read + `fit`"), ("predict", "read + `predict` + "
                                                                 "`to_csv`")):
            cli, ref = times[(f"{task} {kind}", "cli")], times[(f"{task} {kind}", "base")]
            ratio = statistics.median(cli) / statistics.median(ref)
            fixed = statistics.median(times[(task, "fixed")])
            less = (statistics.median(cli) - fixed) / statistics.median(ref)
            print(f"| {task} {kind} | {fmt_s(cli)} | {fmt_s(ref)} ({base}) | {ratio:.2f}x "
                  f"| {'<= 2x' if kind == 'CSV' else ''} | {less:.2f}x |")
    print()
    print("| fixed cost (subprocess) | time |")
    print("|---|---:|")
    print(f"| `fastsoftmax --version`: Python and `import fastsoftmax` | "
          f"{fmt_s(times[('start-up', 'cli')])} |")
    for task in ("train", "predict"):
        print(f"| `fastsoftmax {task}` on 2,000 rows: also the model file, Numba's cache | "
              f"{fmt_s(times[(task, 'fixed')])} |")
    print(f"\nCLI predictions identical to the baseline's file: {same}\n")
    target = 3 * x_bytes + 200 * MB
    print("| subprocess | peak RSS | target |")
    print("|---|---:|---:|")
    for (task, _), peak in rss.items():
        goal = (f"<= 3 x {x_bytes / MB:.0f} MB + 200 MB = {target / MB:.0f} MB"
                if task == "train CSV" else "")
        print(f"| `fastsoftmax {task if task != 'start-up' else '--version'}` | "
              f"{peak / MB:.0f} MB | {goal} |")
    print()


def big_table(folder, gigabytes, chunksize, sample):
    path = folder / f"big_{gigabytes:g}gb.csv"
    probe = folder / "probe.csv"
    write_csv(probe, 10_000, seed=3)
    bytes_per_row = probe.stat().st_size / 10_000
    n_rows = int(gigabytes * 1e9 / bytes_per_row)
    if not path.exists():
        start = time.perf_counter()
        write_csv(path, n_rows, seed=4)
        print(f"(wrote {path.stat().st_size / 1e9:.2f} GB in "
              f"{time.perf_counter() - start:.0f} s)\n")
    model_path = folder / "m_big.npz"
    seconds, peak, out = run("train", path, "-o", model_path, "--chunksize", chunksize)
    X_test, y_test = rows(100_000, seed=5)
    streamed = float(np.mean(SoftmaxRegression.load(model_path).predict(X_test) == y_test))
    if sample:
        X, y = rows(sample, seed=6)
        what = f"on {sample:,} fresh rows"
    else:  # the very rows of the file, read whole
        frame = pd.read_csv(path)
        y = frame.pop("label").to_numpy().astype(str)
        X = frame.to_numpy(dtype=np.float64)
        del frame
        what = "on the same file's rows"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        reference = SoftmaxRegression("sgd", random_state=0).fit(X, y)
        fit_seconds = time.perf_counter() - start
    in_memory = float(np.mean(reference.predict(X_test) == y_test))
    print(f"### `fastsoftmax train big.csv -o m.npz --chunksize {chunksize}` on "
          f"{path.stat().st_size / 1e9:.2f} GB ({n_rows:,} rows)\n")
    print("| | value | target |")
    print("|---|---:|---:|")
    print(f"| time (first pass for the classes + 1 epoch) | {seconds:.0f} s | |")
    print(f"| peak RSS | {peak / MB:.0f} MB | <= 1024 MB |")
    print(f"| accuracy on 100,000 fresh rows, streamed model | {streamed:.4f} | |")
    print(f"| the same, `SoftmaxRegression('sgd').fit` {what}, in memory "
          f"({fit_seconds:.0f} s, {reference.n_iter_} epochs) | {in_memory:.4f} | |")
    print(f"| difference | {100 * (streamed - in_memory):+.2f} points | within 1 point |")
    print()
    print("```")
    print(out.strip())
    print("```")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=at_least_one, default=200_000)
    ap.add_argument("--rounds", type=at_least_one, default=3)
    ap.add_argument("--big-gb", type=float, default=0, metavar="G",
                    help="also train on a CSV of about G GB with --chunksize")
    ap.add_argument("--chunksize", type=at_least_one, default=50_000)
    ap.add_argument("--sample", type=int, default=0,
                    help="rows (fresh, from the same model) of the in-memory sgd fit the "
                         "streamed model is compared with; 0: the big file's own rows, read "
                         "whole (about 3x their float64 size in memory)")
    ap.add_argument("--dir", default=None, help="folder for the files (kept; reused)")
    ap.add_argument("--skip-scale", action="store_true", help="only the --big-gb run")
    a = ap.parse_args()
    folder = Path(a.dir or tempfile.mkdtemp(prefix="fastsoftmax-cli-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if not a.skip_scale:
            scale_tables(folder, a.rows, a.rounds)
        if a.big_gb:
            big_table(folder, a.big_gb, a.chunksize, a.sample)
    finally:
        if a.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
