"""A call after an idle pause: where its time goes (target 1 below m n k = 1e8).

    python benchmarks/cold_calls.py [--part calls,mid,predict,sparse,pieces,hold,warm,wake,
                                            regions,openmp,overhead]
                                    [--rounds 15]
                                    [--pause 0.5]

``calls``: ``fastsoftmax.loss_and_grad`` on small float32 problems, each
call timed back to back ("warm") and after ``--pause`` seconds asleep
("cold"), beside the kernel's chunk function alone on the same arguments
(the work of the call on the calling thread, as a call after a pause runs
it, without the Python around it: checks, labels, the thread policy, the
engine's choices). The difference is what the call's Python costs. A last
column times the chunk after the pause with X read by NumPy just before
(outside the timing): how much of its cold time is X's coming from memory.

``mid``: whole ``loss_and_grad`` calls above ``_launch.SERIAL_WORK`` (a
few milliseconds each), warm and cold, as they run (after a pause on one
thread below this host's ``_launch.cold_serial_work``), on one thread and
on every thread whatever their work, alternating round by round.

``predict``: a fitted model's ``predict_proba`` on a small batch of rows
(dense, and one batch of CSR rows), and ``fastsoftmax.softmax`` on as many
rows of logits, warm and cold: what an application serving predictions now
and then waits for.

``sparse``: ``fastsoftmax.loss_and_grad``, ``fastsoftmax.hessp`` and a
fitted model's ``predict_proba`` on small CSR problems, the same three
ways.

``pieces``: pieces of a small call alone, back to back and each after
20 ms asleep (enough for a cold call on the host measured): an empty
function call, one small NumPy allocation, the thread policy with and
without BLAS, BLAS held alone (its libraries' get and set calls; then
each library alone), the L2
strength's check, 2,000 labels' check and the L2 term on 10 x 100 float32
weights. Pieces measured alone each pay what a call shares among them
(NumPy's own code, say): a call's total is less than their sum.

``hold``: ``loss_and_grad`` on small problems of the GEMM strategy, warm
and cold, holding BLAS as it does (only the library its kernels call) and
every loaded library (as before the hold was per library), alternating
round by round.

``warm``: the other side, nothing cold: small ``loss_and_grad`` calls
back to back (the median of ``--rounds`` x 100 calls after 50, per
shape and dtype), and a fitted model's ``predict_proba`` and ``predict``
on 100 rows of 64 features: what a call's Python adds to a kernel of a
few microseconds, for a caller in a loop (an optimiser's, a server's).

``wake``: what ``_launch._wake_probe`` measures: an empty parallel region
on every thread, each after ``--pause`` seconds asleep, straight away,
after a one-thread region (as a call's input scan on the calling thread)
and after the calling thread has been busy for 2 ms (as a call's Python
and data preparation), and asleep for a random time between half the
pause and the pause (gaps of one length can meet a periodic wake-up at
one phase only); every time in order, then their median and mean and the
one-thread limit (``_launch.cold_serial_work``) that mean gives.

``regions``: what one Numba parallel region (``prange`` over two threads,
a given amount of arithmetic per thread) costs back to back and after the
same pause, in a child process per threading environment: the default
(none set), ``GOMP_SPINCOUNT`` of 0, 10,000 and 100,000, and
``OMP_WAIT_POLICY=passive``. It shows
why a call after an idle spell runs on the calling thread
(``_launch.SERIAL_WORK``): waking the OpenMP workers costs more than small
calls take.

``openmp``: the same region as a plain C program (an ``omp parallel``
region of two threads doing the same work, built with ``gcc -O2 -fopenmp`` in a temporary
folder; skipped, with a line saying so, where no gcc is found), under the
same environments: whether the cost is GNU OpenMP's own or Numba's.

``overhead``: every contender of ``benchmarks/_contenders.py`` (fastsoftmax
and its peers) on a float32 problem of 16 x 4 x 3, where the kernel takes
microseconds and a call is its overhead: validation, dispatch, the thread
and BLAS settings, the outputs. Each in its own processes, back to back
and after ``--pause`` asleep: what a small call pays after an idle spell
before any work, beside what each peer pays.

Prints Markdown tables of medians over ``--rounds``; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import time

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

SHAPES = [(2000, 100, 10), (10000, 20, 10), (1000, 100, 100)]
# Calls above _launch.SERIAL_WORK (16.8 M units): 23, 27, 80, 163 and 442 M.
MID_SHAPES = [(10000, 200, 10), (20000, 100, 10), (60000, 100, 10), (20000, 784, 10),
              (40000, 100, 100)]
REPS = (1, 100, 1000, 10000)
# GNU OpenMP's workers spin GOMP_SPINCOUNT times (300,000 by default) for
# new work before they sleep; the counts between show how the spin decides
# what a region costs warm and cold.
ENVS = ({}, {"GOMP_SPINCOUNT": "0"}, {"GOMP_SPINCOUNT": "10000"},
        {"GOMP_SPINCOUNT": "100000"}, {"OMP_WAIT_POLICY": "passive"})


def _warm_and_cold(fn, rounds: int, pause: float, lead: int = 1) -> tuple[float, float]:
    """Median seconds of fn() back to back (after ``lead`` calls) and after ``pause`` s asleep."""
    warm, cold = [], []
    for _ in range(rounds):
        for _ in range(lead):
            fn()
        t0 = time.perf_counter()
        fn()
        warm.append(time.perf_counter() - t0)
        time.sleep(pause)
        t0 = time.perf_counter()
        fn()
        cold.append(time.perf_counter() - t0)
    return float(np.median(warm)), float(np.median(cold))


HOWS = ("rule", "one", "every")


@contextlib.contextmanager
def _threads_as(how: str):
    """Calls as the rule decides ("rule"), on one thread ("one"), on every thread ("every")."""
    from fastsoftmax import _launch

    names = ("SERIAL_WORK", "SERIAL_WORK_WARM", "COLD_SERIAL_MAX")
    saved = [getattr(_launch, name) for name in names]
    if how != "rule":
        for name in names:
            setattr(_launch, name, 0 if how == "every" else 1 << 62)
    try:
        yield
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(_launch, name, value)


def _three_ways(calls, rounds: int, pause: float) -> list[str]:
    """Per call, "warm" and "cold" cells: median µs as it runs / on one thread / on every thread.

    Round by round, each way in turn: three calls, a pause (the warm-up's
    loop ended, _launch.calls_in_a_loop), then one call back to back and
    one after ``pause`` asleep (:func:`_warm_and_cold`).
    """
    times: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for how in HOWS:
            with _threads_as(how):
                for i, call in enumerate(calls):
                    for _ in range(3):
                        call()
                    time.sleep(pause)
                    times.setdefault((how, i), []).append(_warm_and_cold(call, 1, pause))
    return [" / ".join(f"{1e6 * float(np.median([t[j] for t in times[(how, i)]])):.0f}"
                       for how in HOWS)
            for i in range(len(calls)) for j in range(2)]


def _launch_of(call) -> tuple:
    """(chunk function, kernel, arguments, work) of the kernel launch that call() makes.

    The engine's own launch, seen through ``DenseEngine._run``: after a
    pause, one chunk on the calling thread.
    """
    from fastsoftmax import _dense

    seen = []
    run = _dense.DenseEngine._run

    def spy(self, chunk_fn, kernel, args):
        if not self._serial:
            raise SystemExit("the call ran on every thread: the chunk alone would not be its work")
        seen.append((chunk_fn, kernel, args, self._work))
        return run(self, chunk_fn, kernel, args)

    _dense.DenseEngine._run = spy
    try:
        call()
    finally:
        _dense.DenseEngine._run = run
    return seen[-1]


def _call(rng, m: int, n: int, k: int):
    """A ``loss_and_grad`` call on a float32 (m, n) problem of k classes, zero weights."""
    import fastsoftmax as fs

    X = rng.standard_normal((m, n), dtype=np.float32)
    y = rng.integers(0, k, m)
    return functools.partial(fs.loss_and_grad, X, y, np.zeros((n, k), np.float32),
                             np.zeros(k, np.float32), alpha=1e-4)


def calls(rounds: int, pause: float) -> None:
    from fastsoftmax._launch import run_one_chunk

    print(f"µs, float32, medians of {rounds}; cold: after {pause:g} s asleep")
    print("| (m, n, k) | call, warm | call, cold | chunk alone, warm | chunk alone, cold "
          "| the call's Python, warm | cold | chunk alone, cold, X read first |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for m, n, k in SHAPES:
        call = _call(rng, m, n, k)
        time.sleep(pause)
        launch = _launch_of(call)
        chunk = functools.partial(run_one_chunk, launch[0], launch[2])
        X = launch[2][0]

        for _ in range(10):
            call()
            chunk()
        # Calls back to back for LOOP_SPAN_S count as a loop and run on every
        # thread (_launch.calls_in_a_loop): end that run before the rounds.
        time.sleep(pause)
        whole, alone = _warm_and_cold(call, rounds, pause), _warm_and_cold(chunk, rounds, pause)
        after_read = []
        for _ in range(rounds):
            time.sleep(pause)
            # X read by NumPy after the pause, outside the timing: what is
            # left of the chunk's cold time is not X's coming from memory.
            float(X.sum())
            t0 = time.perf_counter()
            chunk()
            after_read.append(time.perf_counter() - t0)
        us = [1e6 * t for t in (*whole, *alone, whole[0] - alone[0], whole[1] - alone[1],
                                float(np.median(after_read)))]
        print(f"| ({m}, {n}, {k}) | " + " | ".join(f"{t:.0f}" for t in us) + " |")


def mid(rounds: int, pause: float) -> None:
    print(f"\nµs, float32, medians of {rounds}; cold: after {pause:g} s asleep; "
          "as it runs / on one thread / on every thread")
    print("| (m, n, k) | launch_work | call, warm | call, cold |\n|---|---:|---:|---:|")
    from fastsoftmax._launch import launch_work

    rng = np.random.default_rng(0)
    for m, n, k in MID_SHAPES:
        cells = _three_ways([_call(rng, m, n, k)], rounds, pause)
        print(f"| ({m}, {n}, {k}) | {launch_work(m, n, k) / 1e6:.0f} M | " + " | ".join(cells)
              + " |")


# (rows, features, classes) of the batches predicted; the last as CSR rows
# with 2 % of their entries stored.
PREDICT_SHAPES = [(100, 64, 10), (1000, 784, 10), (1000, 100, 100)]
SPARSE_SHAPE = (100, 1000, 10)


def predict(rounds: int, pause: float) -> None:
    import warnings

    import scipy.sparse

    import fastsoftmax as fs

    print(f"\nµs, float32, medians of {rounds}; cold: after {pause:g} s asleep")
    print("| (rows, n, k) | predict_proba, warm | cold | softmax, warm | cold |")
    print("|---|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for m, n, k in [*PREDICT_SHAPES, SPARSE_SHAPE]:
        sparse = (m, n, k) == SPARSE_SHAPE
        X = (scipy.sparse.random(4 * m, n, density=0.02, format="csr", random_state=0,
                                 dtype=np.float32) if sparse
             else rng.standard_normal((4 * m, n), dtype=np.float32))
        y = np.arange(4 * m) % k
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a few iterations: the weights only need to exist
            est = fs.SoftmaxRegression(solver="lbfgs", max_iter=3).fit(X, y)
        rows = X[:m]
        Z = rng.standard_normal((m, k), dtype=np.float32)
        calls = (functools.partial(est.predict_proba, rows), functools.partial(fs.softmax, Z))
        for _ in range(10):
            for call in calls:
                call()
        time.sleep(pause)  # end the warm-up's loop (_launch.calls_in_a_loop)
        us = [1e6 * t for call in calls for t in _warm_and_cold(call, rounds, pause)]
        shape = f"({m}, {n}, {k}){', CSR' if sparse else ''}"
        print(f"| {shape} | " + " | ".join(f"{t:.0f}" for t in us) + " |")


# (rows, features, classes, fraction of entries stored) of the CSR problems.
SPARSE_CALLS = [(1000, 1000, 10, 0.02), (5000, 2000, 10, 0.01), (2000, 5000, 20, 0.005),
                (20000, 1000, 10, 0.005)]


def sparse(rounds: int, pause: float) -> None:
    import warnings

    import scipy.sparse

    import fastsoftmax as fs
    from fastsoftmax._launch import sparse_launch_work

    print(f"\nµs, float32, medians of {rounds}; cold: after {pause:g} s asleep; "
          "as it runs / on one thread / on every thread")
    print("| (m, n, k), stored | sparse_launch_work | loss_and_grad, warm | cold | hessp, warm "
          "| cold | predict_proba, warm | cold |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for m, n, k, density in SPARSE_CALLS:
        X = scipy.sparse.random(m, n, density=density, format="csr", random_state=0,
                                dtype=np.float32)
        y = np.arange(m) % k
        W, V = rng.normal(scale=0.1, size=(2, n, k)).astype(np.float32)
        b = np.zeros(k, np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a few iterations: the weights only need to exist
            est = fs.SoftmaxRegression(solver="lbfgs", max_iter=3).fit(X, y)
        cells = _three_ways([functools.partial(fs.loss_and_grad, X, y, W, b, alpha=1e-4),
                             functools.partial(fs.hessp, X, y, W, b, V, alpha=1e-4),
                             functools.partial(est.predict_proba, X)], rounds, pause)
        print(f"| ({m}, {n}, {k}), {density:.1%} | {sparse_launch_work(m, X.nnz, k) / 1e6:.0f} M"
              " | " + " | ".join(cells) + " |")


# (m, n, k) of hold's calls: the GEMM strategy by the fixed rule (short
# rows, or many classes) in both dtypes.
HOLD_SHAPES = [(1000, 20, 100), (1000, 100, 100), (2000, 20, 10)]


def hold(rounds: int, pause: float) -> None:
    import fastsoftmax as fs
    from fastsoftmax import _calibration, _objective
    from fastsoftmax._threads import blas_libraries, load_kernel_blas

    load_kernel_blas()
    per_library = _objective.single_threaded_blas

    def every_library(needed=True, library=None):
        return per_library(needed)

    print(f"\nµs, medians of {rounds}; cold: after {pause:g} s asleep; BLAS libraries "
          f"loaded: {len(blas_libraries())}; the kernels' library / every library")
    print("| (m, n, k) | dtype | strategy | warm | cold |\n|---|---|---|---:|---:|")
    rng = np.random.default_rng(0)
    for m, n, k in HOLD_SHAPES:
        for dtype in (np.float32, np.float64):
            X = rng.standard_normal((m, n)).astype(dtype)
            y = np.arange(m) % k
            W, b = np.zeros((n, k), dtype), np.zeros(k, dtype)
            call = functools.partial(fs.loss_and_grad, X, y, W, b, alpha=1e-4)
            strategy = _calibration.strategy(n, k, np.dtype(dtype), work=m * n * k)
            times: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
            for _ in range(rounds):
                for way, factory in enumerate((per_library, every_library)):
                    _objective.single_threaded_blas = factory
                    try:
                        for _ in range(3):
                            call()
                        time.sleep(pause)
                        times[way].append(_warm_and_cold(call, 1, pause))
                    finally:
                        _objective.single_threaded_blas = per_library
            cells = [" / ".join(f"{1e6 * float(np.median([t[j] for t in times[way]])):.0f}"
                                for way in (0, 1)) for j in range(2)]
            print(f"| ({m}, {n}, {k}) | {np.dtype(dtype).name} | {strategy} | "
                  + " | ".join(cells) + " |")


def wake(rounds: int, pause: float) -> None:
    import numba

    from fastsoftmax import _launch
    from fastsoftmax._kernels._checks import _first_nonfinite_row

    p = numba.get_num_threads()
    rows, bad = np.zeros((p, 1)), np.empty(p, dtype=np.int64)
    scanned, one = np.zeros((1000, 100)), np.empty(1, dtype=np.int64)
    _first_nonfinite_row(rows, bad)  # the team started, the kernel loaded

    def one_thread_region():
        numba.set_num_threads(1)
        _first_nonfinite_row(scanned, one)
        numba.set_num_threads(p)

    def busy():
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass

    print(f"\nms, an empty region on {p} threads after {pause:g} s asleep, {rounds} times in order")
    print("| before the region | each | median | mean | limit (units) |\n|---|---|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for label, before in (("nothing", None), ("a one-thread region", one_thread_region),
                          ("2 ms busy", busy), ("nothing, asleep 0.5-1x as long", None)):
        ms = []
        for _ in range(rounds):
            time.sleep(pause * rng.uniform(0.5, 1.0) if label.endswith("as long") else pause)
            if before is not None:
                before()
            t0 = time.perf_counter()
            _first_nonfinite_row(rows, bad)
            ms.append(1e3 * (time.perf_counter() - t0))
        mean = float(np.mean(ms))
        saved = list(_launch._wake_samples)
        _launch._wake_samples.clear()
        _launch._wake_samples.extend(1e-3 * t for t in ms[-_launch.WAKE_WINDOW:])
        limit = _launch.cold_serial_work(p)  # what the process's own samples would give
        _launch._wake_samples.clear()
        _launch._wake_samples.extend(saved)
        print(f"| {label} | {' '.join(f'{t:.2f}' for t in ms)} | {np.median(ms):.2f} | "
              f"{mean:.2f} | {limit:,} |")


def pieces(rounds: int, pause: float) -> None:
    import fastsoftmax as fs
    from fastsoftmax._penalty import penalize
    from fastsoftmax._threads import blas_libraries, single_threaded_blas, thread_policy
    from fastsoftmax._validation import check_alpha, check_labels

    X = np.ones((200, 10))
    fs.loss_and_grad(X, np.arange(200) % 3, np.zeros((10, 3)))  # Numba and BLAS loaded
    y = np.arange(2000) % 10
    g, w = np.ones((2, 10, 100), np.float32)

    def policy(blas):
        with thread_policy(None, blas=blas):
            pass

    def blas():
        with single_threaded_blas():
            pass

    def one_library(lib):
        # What _threads._hold and _blas_exit do for one library.
        original = lib.get_num_threads()
        if original is not None and original != 1:
            lib.set_num_threads(1)
            lib.set_num_threads(original)

    from fastsoftmax._threads import _blas_controller

    libraries = [(f"one library held ({lib.internal_api}, {os.path.basename(lib.filepath)})",
                  functools.partial(one_library, lib))
                 for lib in _blas_controller().lib_controllers]
    items = [("an empty function call", lambda: None),
             ("np.empty(1000)", functools.partial(np.empty, 1000)),
             ("thread_policy(None)", functools.partial(policy, True)),
             ("thread_policy(None, blas=False)", functools.partial(policy, False)),
             ("single_threaded_blas()", blas),
             *libraries,
             ("check_alpha(1e-4)", functools.partial(check_alpha, 1e-4)),
             ("check_labels, 2,000 labels", functools.partial(check_labels, y, 2000, 10)),
             ("penalize, 10 x 100 float32", functools.partial(penalize, 1.0, g, w, 1e-4))]
    print(f"\nµs, medians of {rounds}; cold: after 0.02 s asleep; BLAS libraries "
          f"loaded: {len(blas_libraries())}")
    print("| piece | warm | cold |\n|---|---:|---:|")
    for name, fn in items:
        fn()
        warm, cold = _warm_and_cold(fn, rounds, 0.02)
        print(f"| {name} | {1e6 * warm:.1f} | {1e6 * cold:.1f} |")


def _region_child(rounds: int, pause: float) -> None:
    from numba import njit, prange

    @njit(parallel=True)
    def region(a, reps):
        s = 0.0
        for i in prange(a.shape[0]):
            x = a[i]
            for _ in range(reps):
                x = x * 0.999999 + 1e-7
            s += x
        return s

    a = np.ones(2000)
    region(a, 1)
    out = {}
    for reps in REPS:
        out[reps] = _warm_and_cold(functools.partial(region, a, reps), rounds, pause)
    print(json.dumps(out))


def _by_environment(run) -> None:
    """Print a table row per entry of ENVS: ``run(env)`` gives (warm s, cold s) per REPS."""
    print("| environment | " + " | ".join(f"reps {r}, warm | cold" for r in REPS) + " |")
    print("|---|" + "---:|---:|" * len(REPS))
    for extra in ENVS:
        env = {k: v for k, v in os.environ.items()
               if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
        env.update(extra)
        name = " ".join(f"{k}={v}" for k, v in extra.items()) or "default"
        cells = " | ".join(f"{1e6 * w:.0f} | {1e6 * c:.0f}" for w, c in run(env))
        print(f"| {name} | {cells} |")


def regions(rounds: int, pause: float) -> None:
    print(f"\nµs per parallel region (2,000 iterations, reps multiply-adds each), "
          f"medians of {rounds}; cold: after {pause:g} s asleep")

    def run(env):
        done = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(rounds),
                               "--pause", str(pause)], env=env, capture_output=True,
                              text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1]).values()

    _by_environment(run)


# One parallel region of two threads, 1,000 reps multiply-adds per thread
# (the work of the Numba region's 2,000 iterations), timed
# back to back and after the pause: prints "reps warm_s cold_s" per line.
_C_REGION = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + 1e-9 * t.tv_nsec; }
static volatile double sink[16];
static double region(long reps) {
    double t0 = now();
    #pragma omp parallel num_threads(2)
    { double x = 1.0; for (long i = 0; i < 1000 * reps; i++) x = x * 0.999999 + 1e-7;
      sink[8 * omp_get_thread_num()] += x; }
    return now() - t0;
}
static int cmp(const void *a, const void *b) { double d = *(const double *)a - *(const double *)b;
                                               return (d > 0) - (d < 0); }
int main(int argc, char **argv) {
    int rounds = atoi(argv[1]); double pause = atof(argv[2]);
    double *w = malloc(rounds * sizeof *w), *c = malloc(rounds * sizeof *c);
    for (int a = 3; a < argc; a++) {
        long reps = atol(argv[a]);
        for (int r = 0; r < rounds; r++) {
            region(reps); w[r] = region(reps);
            usleep((useconds_t)(pause * 1e6)); c[r] = region(reps);
        }
        qsort(w, rounds, sizeof *w, cmp); qsort(c, rounds, sizeof *c, cmp);
        printf("%ld %.9f %.9f\n", reps, w[rounds / 2], c[rounds / 2]);
    }
    return 0;
}
"""


def openmp(rounds: int, pause: float) -> None:
    import shutil
    import tempfile

    print(f"\nµs per OpenMP region of a C program (2 threads, 1,000 reps multiply-adds "
          f"each), "
          f"medians of {rounds}; cold: after {pause:g} s asleep")
    gcc = shutil.which("gcc")
    if gcc is None:
        print("skipped: no gcc on this machine")
        return
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "region.c"), os.path.join(tmp, "region")
        with open(src, "w") as fh:
            fh.write(_C_REGION)
        subprocess.run([gcc, "-O2", "-fopenmp", src, "-o", exe], check=True)

        def run(env):
            done = subprocess.run([exe, str(rounds), str(pause), *map(str, REPS)], env=env,
                                  capture_output=True, text=True, check=True)
            return [(float(w), float(c)) for _, w, c in
                    (line.split() for line in done.stdout.strip().splitlines())]

        _by_environment(run)


WARM_SHAPES = [(200, 20, 3), (500, 50, 5), (1000, 20, 10), (2000, 100, 10), (1000, 20, 100)]


def warm(rounds: int, pause: float) -> None:
    from _common import median_of  # benchmarks/ is on the path of a script run from it

    import fastsoftmax as fs

    calls = 100 * rounds

    def median_us(fn) -> float:
        for _ in range(49):  # median_of's own untimed call is the fiftieth
            fn()
        return 1e6 * median_of(fn, calls)

    print(f"\nµs, medians of {calls} calls back to back (after 50)")
    print("| call | (m, n, k) | dtype | µs |\n|---|---|---|---:|")
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        for m, n, k in WARM_SHAPES:
            X = rng.standard_normal((m, n)).astype(dt)
            y = rng.integers(0, k, m)
            W = (0.01 * rng.standard_normal((n, k))).astype(dt)
            t = median_us(functools.partial(fs.loss_and_grad, X, y, W, np.zeros(k, dt),
                                            alpha=1e-4))
            print(f"| loss_and_grad | ({m}, {n}, {k}) | {np.dtype(dt).name} | {t:.1f} |")
    X = rng.standard_normal((2000, 64))
    model = fs.SoftmaxRegression().fit(X, rng.integers(0, 10, 2000))
    batch = X[:100].copy()
    for name in ("predict_proba", "predict"):
        t = median_us(functools.partial(getattr(model, name), batch))
        print(f"| model.{name} | (100, 64, 10) | float64 | {t:.1f} |")


OVERHEAD_SHAPE = (16, 4, 3)  # m, n, k: a kernel of a few microseconds, the call is all overhead
OVERHEAD_PROCESSES = 3


def _overhead_child(name: str, rounds: int, pause: float) -> None:
    """Print {"warm": s, "cold": s} of contender ``name`` on OVERHEAD_SHAPE ({"skipped": why})."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _contenders import make, problem

    X, y, W, b = problem(*OVERHEAD_SHAPE, "float32")
    fn = make(name, X, y, W, b, 1e-4, len(os.sched_getaffinity(0)))
    if fn is None:
        print(json.dumps({"skipped": f"{name} is not installed"}))
        return
    for _ in range(50):
        fn()
    # 20 calls before each warm one: the last cold call's effects gone.
    warm, cold = _warm_and_cold(fn, rounds, pause, lead=20)
    print(json.dumps({"warm": warm, "cold": cold}))


def overhead(rounds: int, pause: float) -> None:
    """What one call costs besides its work, warm and cold, fastsoftmax beside every peer.

    Each contender of ``_contenders.CONTENDERS`` on a float32 problem of
    OVERHEAD_SHAPE (a kernel of microseconds), in its own processes
    (OVERHEAD_PROCESSES each, contenders interleaved), at every CPU, in the
    default environment: the median over ``rounds`` calls back to back and
    after ``pause`` seconds asleep, then the median over the processes.
    """
    from _contenders import CONTENDERS

    m, n, k = OVERHEAD_SHAPE
    print(f"\nµs per call on a float32 ({m}, {n}, {k}) problem: medians over "
          f"{OVERHEAD_PROCESSES} processes of the medians of {rounds} calls (cold: after "
          f"{pause:g} s asleep)")
    print("| contender | warm | cold |")
    print("|---|---:|---:|")
    found: dict[str, list[dict]] = {name: [] for name in CONTENDERS}
    for _ in range(OVERHEAD_PROCESSES):
        for name in CONTENDERS:
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--overhead-child", name,
                 "--rounds", str(rounds), "--pause", str(pause)],
                capture_output=True, text=True, check=True).stdout
            found[name].append(json.loads(out.strip().splitlines()[-1]))
    for name, runs in found.items():
        if "skipped" in runs[0]:
            print(f"| {name} | {runs[0]['skipped']} | |")
            continue
        warm = np.median([r["warm"] for r in runs])
        cold = np.median([r["cold"] for r in runs])
        print(f"| {name} | {1e6 * warm:.0f} | {1e6 * cold:.0f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part",
                    default="calls,mid,predict,sparse,pieces,hold,warm,wake,regions,openmp,"
                            "overhead",
                    help="comma-separated: calls, mid, predict, sparse, pieces, hold, warm, "
                         "wake, regions, openmp, overhead")
    ap.add_argument("--rounds", type=at_least_one, default=15)
    ap.add_argument("--pause", type=float, default=0.5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--overhead-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _region_child(args.rounds, args.pause)
        return
    if args.overhead_child:
        _overhead_child(args.overhead_child, args.rounds, args.pause)
        return
    parts = args.part.split(",")
    unknown = set(parts) - {"calls", "mid", "predict", "sparse", "pieces", "hold", "warm",
                            "wake", "regions", "openmp", "overhead"}
    if unknown:
        ap.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    for name, run in (("calls", calls), ("mid", mid), ("predict", predict), ("sparse", sparse),
                      ("pieces", pieces), ("hold", hold), ("warm", warm), ("wake", wake),
                      ("regions", regions), ("openmp", openmp), ("overhead", overhead)):
        if name in parts:
            run(args.rounds, args.pause)


if __name__ == "__main__":
    main()
