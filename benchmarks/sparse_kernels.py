"""Measurements of the sparse (CSR) kernels; prints one table per section.

    python -m benchmarks.sparse_kernels [grad] [memory] [sgd] [wide] [convert] [compile]
                                        [--rounds N]

(no section: all of them). Every timing is the median of N interleaved
rounds (default 7) after one warm-up call of each contender, so that a
burst of load on a shared machine hits all contenders alike; the ratios
are the figures to read, absolute times move with the machine's load.

grad     loss and gradient, k = 20, float32 and float64, on
         make_text_like(100,000 x 100,000, 60 terms per row) and on
         200,000 x 2,000,000, 20 terms per row: fastsoftmax._sparse with
         each scheme (per-chunk scatter; error rows + column pass over the
         transposed copy; error rows and columns panel by panel over the
         panel copy) on 1 and 2 threads, against the SciPy reference
         (X @ W, stable softmax, X.T @ E).
memory   peak RSS of one loss_and_grad, and of three iterations of a Newton and
         of an L-BFGS fit, on 200,000 x 2,000,000 with 20 terms per row,
         k = 20, in a fresh subprocess, minus the RSS before X was built.
sgd      one SGD epoch (20,000 rows, 60 terms per row, k = 20, batches of 32)
         as n grows at fixed nnz: O(nnz k) per update without momentum,
         O(n k) with.
wide     on 200,000 x 2,000,000, 20 terms per row, k = 20, float32 and float64:
         the kernels that gather rows of W (or V) at random from memory,
         an SGD epoch (batches of 1 and 64), a Hessian product and
         predict_labels, the last two against SciPy (X @ V, the softmax
         Hessian's rows, X.T @ S; argmax of X @ W + b).
convert  as_csr on CSR (the validation scan), CSR with int64 indices, CSC
         and COO input, against one loss_and_grad call.
compile  cold compile seconds of every sparse entry point, in a subprocess
         whose NUMBA_CACHE_DIR is a new empty folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np

from fastsoftmax import _sparse, datasets, reference

K = 20


def _machine() -> str:
    from fastsoftmax._calibration import cpu_model

    model = cpu_model()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{os.cpu_count()} cores, {model}; Numba {numba.__version__}, "
            f"{numba.config.NUMBA_NUM_THREADS} threads; 1-min load average {load:.2f}")


def _interleaved(fns: dict, rounds: int) -> dict:
    """Median seconds of each callable over interleaved rounds, after a warm-up."""
    for f in fns.values():
        f()
    times: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            t = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t)
    return {name: float(np.median(v)) for name, v in times.items()}


# ---------------------------------------------------------------- sections
GRAD_PROBLEMS = (
    ("100,000 x 100,000, ~60 nonzeros per row", 100_000, 100_000, 60),
    ("200,000 x 2,000,000, ~20 nonzeros per row", 200_000, 2_000_000, 20),
)


def _grad_contenders(X, y, W, b, csr, XT, panels) -> dict:
    fns = {}
    for T in (2, 1):
        fns[f"scatter, {T} thread(s)"] = (
            lambda T=T: _sparse.loss_and_grad(csr, y, None, W, b, 1e-4, n_threads=T))
        fns[f"transpose, {T} thread(s)"] = (
            lambda T=T: _sparse.loss_and_grad(csr, y, None, W, b, 1e-4, n_threads=T, XT=XT))
        fns[f"panels, {T} thread(s)"] = (
            lambda T=T: _sparse.loss_and_grad(csr, y, None, W, b, 1e-4, n_threads=T,
                                              XT=panels[T]))
    fns["SciPy reference"] = lambda: reference.loss_and_grad(X, y, W, b, alpha=1e-4)
    return fns


def bench_grad(rounds: int) -> None:
    for title, m, n, per_row in GRAD_PROBLEMS:
        print(f"\n## loss and gradient: {title}, k = 20, alpha = 1e-4")
        print("| dtype | contender | median ms | reference / this |")
        print("|---|---|---:|---:|")
        for dt in (np.float32, np.float64):
            X, y = datasets.make_text_like(m, n, K, per_row, random_state=0, dtype=dt)
            rng = np.random.default_rng(0)
            W = (0.1 * rng.standard_normal((n, K))).astype(dt)
            b = np.zeros(K, dt)
            csr = _sparse.as_csr(X)
            t = time.perf_counter()
            XT = _sparse.transpose(csr)
            t_transpose = time.perf_counter() - t
            _sparse.panels(csr, K, 2)  # compiled before it is timed
            t = time.perf_counter()
            panels = {2: _sparse.panels(csr, K, 2)}
            t_panels = time.perf_counter() - t
            panels[1] = _sparse.panels(csr, K, 1)
            chosen = _sparse.gradient_scheme(csr, K, 2)
            med = _interleaved(_grad_contenders(X, y, W, b, csr, XT, panels), rounds)
            ref = med["SciPy reference"]
            name = np.dtype(dt).name
            for label, sec in med.items():
                mark = " (chosen)" if label == f"{chosen}, 2 thread(s)" else ""
                print(f"| {name} | {label}{mark} | {sec * 1e3:.1f} | {ref / sec:.2f} |")
            print(f"| {name} | (nnz {X.nnz:,}; transpose(csr) once: "
                  f"{t_transpose * 1e3:.0f} ms, {XT.nbytes / 2**20:.0f} MB; panels(csr) "
                  f"once: {t_panels * 1e3:.0f} ms, {panels[2].nbytes / 2**20:.0f} MB, "
                  f"{panels[2].ptr.shape[0]} panels) | | |")


_MEMORY_CHILD = r"""
import json, sys, time
import numpy as np

def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return -1

def reset_peak():
    # Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False

dtype, which, n_threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
# which: "scatter", "transpose" (its copy of X built before the peak is
# reset, reported as xt_bytes) or "reference".
from fastsoftmax import _sparse, datasets, reference
# Compile (or load from the cache) on a small problem first.
Xs, ys = datasets.make_text_like(200, 300, 20, 5, random_state=0, dtype=dtype)
cs = _sparse.as_csr(Xs)
_sparse.loss_and_grad(cs, ys, None, np.zeros((300, 20), dtype), np.zeros(20, dtype),
                      n_threads=n_threads)
reference.loss_and_grad(Xs, ys, np.zeros((300, 20), dtype), np.zeros(20, dtype))
rss0 = status("VmRSS")
X, y = datasets.make_text_like(200_000, 2_000_000, 20, 20, random_state=0, dtype=dtype)
csr = _sparse.as_csr(X)
x_bytes = csr.nbytes
W = np.full((X.shape[1], 20), 0.01, dtype)
b = np.zeros(20, dtype)
XT = _sparse.transpose(csr) if which == "transpose" else None
xt_bytes = XT.nbytes if XT is not None else 0
ok = reset_peak()
before = status("VmRSS")
t = time.perf_counter()
if which == "reference":
    loss, gW, gb = reference.loss_and_grad(X, y, W, b, alpha=1e-4)
elif which.startswith("fit-"):
    import warnings
    from fastsoftmax import SoftmaxRegression
    w_bytes = W.nbytes
    del W  # the fit makes its own weights
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SoftmaxRegression(which[4:], alpha=1e-4, max_iter=3, n_threads=n_threads).fit(X, y)
else:
    loss, gW, gb = _sparse.loss_and_grad(csr, y, None, W, b, 1e-4, n_threads=n_threads, XT=XT)
if not which.startswith("fit-"):
    w_bytes = W.nbytes
seconds = time.perf_counter() - t
peak = status("VmHWM")
print(json.dumps(dict(rss0=rss0, before=before, peak=peak, x_bytes=x_bytes, xt_bytes=xt_bytes,
                      w_bytes=w_bytes, y_bytes=y.nbytes, nnz=int(X.nnz), reset=ok,
                      seconds=seconds)))
"""


def _memory_run(dtype: str, which: str, n_threads: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, dtype, which, str(n_threads)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_memory() -> None:
    print("\n## peak memory: loss_and_grad on 200,000 x 2,000,000, 20 nonzeros per row, "
          "k = 20 (fresh subprocess per line)")
    print("| dtype | contender | X (CSR) MB | W MB | Xᵀ copy MB | peak RSS - RSS before X MB | "
          "minus X MB | call's own peak MB | expected MB | seconds |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    mb = 1 / 2**20
    m, n = 200_000, 2_000_000
    for dt in ("float32", "float64"):
        item = np.dtype(dt).itemsize
        for which, T in (("scatter", 1), ("scatter", 2), ("transpose", 2), ("reference", 1),
                         ("fit-newton", 2), ("fit-lbfgs", 2)):
            r = _memory_run(dt, which, T)
            if not r["reset"]:
                print("| (VmHWM could not be reset: the peak includes building X) |")
            # scatter: result + (T - 1) parts, n k each; transpose: result n k + E m k.
            expected = {"scatter": T * n * K * item, "transpose": (n + m) * K * item}.get(which)
            label = ("SciPy reference" if which == "reference" else
                     f"SoftmaxRegression('{which[4:]}', max_iter=3).fit" if which.startswith("fit")
                     else f"{which}, {T} thread{'s' if T > 1 else ''}")
            print(f"| {dt} | {label} | {r['x_bytes'] * mb:.0f} | {r['w_bytes'] * mb:.0f} | "
                  f"{r['xt_bytes'] * mb:.0f} | {(r['peak'] - r['rss0']) * mb:.0f} | "
                  f"{(r['peak'] - r['rss0'] - r['x_bytes']) * mb:.0f} | "
                  f"{(r['peak'] - r['before']) * mb:.0f} | "
                  f"{'' if expected is None else f'{expected * mb:.0f}'} | "
                  f"{r['seconds']:.2f} |")


def bench_sgd(rounds: int) -> None:
    print("\n## SGD epoch vs n at fixed nnz: ~60 nonzeros per row, k = 20, batches of 32, "
          "alpha = 1e-4, float64")
    print("The launcher multiplies W by the epoch's scale factor once at the end (one O(n k) "
          "pass per epoch); the last column leaves that pass out.")
    print("| momentum | rows | n | nnz | ms per epoch | us per update | "
          "us per update without the final W *= wscale |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for momentum, m, ns in ((0.0, 20_000, (10_000, 100_000, 1_000_000)),
                            (0.9, 2_000, (10_000, 100_000, 1_000_000))):
        for n in ns:
            X, y = datasets.make_text_like(m, n, K, 60, random_state=0)
            csr = _sparse.as_csr(X)
            W = np.zeros((n, K))
            b = np.zeros(K)
            VW = np.zeros_like(W) if momentum else None
            order = np.random.default_rng(0).permutation(m)
            med = _interleaved(_sgd_contenders(csr, y, W, b, VW, order, momentum),
                               rounds if momentum == 0 else 3)
            updates = -(-m // 32)
            t = med["epoch"]
            rescale = med["W *= wscale"] if momentum == 0 else 0.0
            print(f"| {momentum} | {m:,} | {n:,} | {X.nnz:,} | {t * 1e3:.1f} | "
                  f"{t / updates * 1e6:.1f} | {(t - rescale) / updates * 1e6:.1f} |")


def _sgd_contenders(csr, y, W, b, VW, order, momentum) -> dict:
    def epoch():
        _sparse.sgd_epoch(csr, y, None, W, b, order, batch_size=32, eta0=0.1, alpha=1e-4,
                          momentum=momentum, VW=VW)

    def rescale():
        np.multiply(W, 1.0, out=W)

    return {"epoch": epoch, "W *= wscale": rescale}


WIDE = ("200,000 x 2,000,000, ~20 nonzeros per row", 200_000, 2_000_000, 20)


def bench_wide(rounds: int) -> None:
    """The kernels that gather rows of W at random, where W is far larger than the caches."""
    title, m, n, per_row = WIDE
    print(f"\n## Gathers from a large W: {title}, k = 20, alpha = 1e-4")
    print("| dtype | contender | median ms | SciPy / this |")
    print("|---|---|---:|---:|")
    peers = {"Hessian product": "Hessian product, SciPy", "predict_labels": "predict, SciPy"}
    for dt in (np.float32, np.float64):
        med = _interleaved(_wide_contenders(m, n, per_row, dt), rounds)
        name = np.dtype(dt).name
        for label, sec in med.items():
            ratio = f"{med[peers[label]] / sec:.2f}" if label in peers else ""
            print(f"| {name} | {label} | {sec * 1e3:.1f} | {ratio} |")


def _wide_contenders(m, n, per_row, dt) -> dict:
    X, y = datasets.make_text_like(m, n, K, per_row, random_state=0, dtype=dt)
    rng = np.random.default_rng(0)
    W = (0.01 * rng.standard_normal((n, K))).astype(dt)
    V = rng.standard_normal((n, K)).astype(dt)
    b = np.zeros(K, dt)
    c = np.zeros(K, dt)
    csr = _sparse.as_csr(X)
    XT = _sparse.transpose(csr) if _sparse.gradient_scheme(csr, K, 2) == "transpose" else None
    P = np.empty((m, K), dt)
    _sparse.loss_and_grad(csr, y, None, W, b, 1e-4, P=P, XT=XT)
    order = rng.permutation(m)
    W1 = W.copy()

    def epoch(batch_size):
        W1[...] = W
        _sparse.sgd_epoch(csr, y, None, W1, b.copy(), order, batch_size=batch_size,
                          eta0=0.01, alpha=1e-4)

    def scipy_hessp():
        U = X @ V + c
        S = P * U
        S -= P * S.sum(axis=1, keepdims=True)
        return X.T @ S / m + 1e-4 * V

    return {
        "SGD epoch, batch 1": lambda: epoch(1),
        "SGD epoch, batch 64": lambda: epoch(64),
        "Hessian product": lambda: _sparse.hessp(csr, P, None, V, c, 1e-4, XT=XT),
        "Hessian product, SciPy": scipy_hessp,
        "predict_labels": lambda: _sparse.predict_labels(csr, W, b),
        "predict, SciPy": lambda: (X @ W + b).argmax(axis=1),
    }


def bench_convert(rounds: int) -> None:
    print("\n## as_csr conversion: 100,000 x 100,000, ~60 nonzeros per row, float64")
    print("| input | median ms | / one loss_and_grad (2 threads) |")
    print("|---|---:|---:|")
    X, y = datasets.make_text_like(100_000, 100_000, K, 60, random_state=0)
    X64 = X.copy()
    X64.indices = X64.indices.astype(np.int64)
    X64.indptr = X64.indptr.astype(np.int64)
    csc = X.tocsc()
    coo = X.tocoo()
    csr = _sparse.as_csr(X)
    W = np.full((X.shape[1], K), 0.01)
    b = np.zeros(K)
    fns = {
        "CSR, int32 indices (scan only)": lambda: _sparse.as_csr(X),
        "CSR, int64 indices (scan + narrowing)": lambda: _sparse.as_csr(X64),
        "CSC (tocsr + scan)": lambda: _sparse.as_csr(csc),
        "COO (tocsr + scan)": lambda: _sparse.as_csr(coo),
        "one loss_and_grad": lambda: _sparse.loss_and_grad(csr, y, None, W, b, n_threads=2),
    }
    med = _interleaved(fns, rounds)
    one = med["one loss_and_grad"]
    for name, t in med.items():
        print(f"| {name} | {t * 1e3:.1f} | {t / one:.2f} |")


_COMPILE_CHILD = r"""
import time
t0 = time.perf_counter()
import numpy as np
import scipy.sparse as sp
from fastsoftmax import _sparse
print(f"import {time.perf_counter() - t0:.1f}", flush=True)
# The last pass keeps int64 indices (as for n >= 2**31): what compiling every
# kernel for both index widths would add, which narrowing at the edge avoids.
for dt, wide in ((np.float32, False), (np.float64, False), (np.float64, True)):
    _sparse._INT32_MAX = 0 if wide else np.iinfo(np.int32).max
    X = sp.random(40, 30, density=0.2, format="csr", random_state=0, dtype=dt)
    y = np.arange(40) % 3
    W = np.zeros((30, 3), dt)
    b = np.zeros(3, dt)
    P = np.empty((40, 3), dt)
    X64 = X.copy()
    X64.indices = X64.indices.astype(np.int64)
    c = []  # filled by the first step
    steps = [
        ("as_csr, X as given (scan)", lambda: c.append(_sparse.as_csr(X64 if wide else X))),
        ("as_csr, int64 indices (scan)", lambda: _sparse.as_csr(X64)),
        ("loss_and_grad, scatter (+ _finish_partials)",
         lambda: _sparse.loss_and_grad(c[0], y, None, W, b, 0.1, P=P)),
        ("loss_and_grad, transpose (+ _csc_gather)",
         lambda: _sparse.loss_and_grad(c[0], y, None, W, b, 0.1, XT=_sparse.transpose(c[0]))),
        ("hessp", lambda: _sparse.hessp(c[0], P, None, W, b)),
        ("sgd_epoch", lambda: _sparse.sgd_epoch(c[0], y, None, W, b, np.arange(40),
                                                batch_size=4, eta0=0.1)),
        ("logits", lambda: _sparse.logits(c[0], W, b)),
        ("predict_labels", lambda: _sparse.predict_labels(c[0], W, b)),
    ]
    for name, f in steps:
        t = time.perf_counter()
        f()
        label = np.dtype(dt).name + (" (int64 indices kept)" if wide else "")
        print(f"{label}|{name}|{time.perf_counter() - t:.1f}", flush=True)
"""


def bench_compile() -> None:
    print("\n## cold compile seconds (NUMBA_CACHE_DIR = a new empty folder)")
    env = dict(os.environ, NUMBA_CACHE_DIR=tempfile.mkdtemp(prefix="fastsoftmax-sparse-cold-"))
    out = subprocess.run([sys.executable, "-c", _COMPILE_CHILD], check=True,
                         capture_output=True, text=True, env=env)
    print("| dtype | entry point | seconds |")
    print("|---|---|---:|")
    totals: dict = {}
    for line in out.stdout.strip().splitlines():
        if line.startswith("import"):
            print(f"| | import fastsoftmax._sparse | {line.split()[1]} |")
            continue
        dt, name, sec = line.split("|")
        totals[dt] = totals.get(dt, 0.0) + float(sec)
        print(f"| {dt} | {name} | {sec} |")
    for dt, total in totals.items():
        print(f"| {dt} | total (first calls) | {total:.1f} |")


def main(argv: list[str]) -> None:
    rounds = 7
    if "--rounds" in argv:
        i = argv.index("--rounds")
        rounds = int(argv[i + 1])
        del argv[i:i + 2]
    sections = argv or ["grad", "memory", "sgd", "wide", "convert", "compile"]
    print(f"Machine: {_machine()}")
    print(f"Medians of {rounds} interleaved rounds after a warm-up.")
    for name in sections:
        {"grad": lambda: bench_grad(rounds), "memory": bench_memory,
         "sgd": lambda: bench_sgd(rounds), "wide": lambda: bench_wide(rounds),
         "convert": lambda: bench_convert(rounds),
         "compile": bench_compile}[name]()
    print(f"\nAt the end: {_machine()}")


if __name__ == "__main__":
    main(sys.argv[1:])
