"""Shared settings of the benchmark suite.

``make test`` collects these files with benchmarking disabled, so every case
runs once as a smoke test on the small shapes. ``make bench`` sets
FASTSOFTMAX_BENCH_FULL=1, which adds the large shapes the tables in
BENCHMARKS.md come from.
"""

import argparse
import contextlib
import os
import warnings

from fastsoftmax.cli import _positive as at_least_one  # noqa: F401  (the scripts' counts)
from fastsoftmax.cli import _shape_arg as shape_arg  # noqa: F401  (one shape MxNxK)

FULL = os.environ.get("FASTSOFTMAX_BENCH_FULL", "") not in ("", "0")


def shapes(small, full):
    """The small shapes always; the full ones only under FASTSOFTMAX_BENCH_FULL."""
    return list(small) + (list(full) if FULL else [])


def comma_list(choices):
    """An argparse type: a comma-separated list of ``choices``, each at most once, in order."""
    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",")]
        if any(item not in choices for item in items) or len(set(items)) != len(items):
            raise argparse.ArgumentTypeError(
                f"{text!r}: a comma-separated list of {', '.join(choices)}, each at most once")
        return items
    return parse


def best_of(f, reps: int) -> float:
    """The shortest of ``reps`` back-to-back calls of f, in seconds."""
    import time

    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def median_of(f, reps: int) -> float:
    """The median of ``reps`` back-to-back calls of f after one untimed call, in seconds."""
    import statistics
    import time

    f()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def pedantic_or_call(benchmark, fn):
    """Warm up (compile, fill caches) once, then time fn with warm-up rounds."""
    fn()
    benchmark.extra_info["warmup"] = True
    return benchmark.pedantic(fn, rounds=7 if FULL else 1, warmup_rounds=1 if FULL else 0,
                              iterations=1)


def objective(X, y, k, *, strategy=None, n_threads=None):
    """The fused objective as a callable obj(W (n, k), b, alpha=0) -> (loss, grad_W, grad_b)."""
    import numpy as np

    from fastsoftmax._data import make_dataset
    from fastsoftmax._objective import Objective
    from fastsoftmax._threads import thread_policy

    obj = Objective(make_dataset(X, np.asarray(y, dtype=np.int64), None, None, k),
                    strategy=strategy)

    def call(W, b, alpha=0.0):
        with thread_policy(n_threads):
            return obj.loss_grad(np.ascontiguousarray(W.T), b, alpha)

    call.strategy = obj.strategy
    return call


def sgd_epoch(X, y, W, b, order, batch_size, **params):
    """A callable running one compiled SGD epoch from (W, b) in the given order."""
    import numpy as np

    from fastsoftmax import SoftmaxRegression
    from fastsoftmax._data import make_dataset
    from fastsoftmax._params import check_params
    from fastsoftmax._solvers.sgd import SGDState, run_epoch
    from fastsoftmax._threads import thread_policy

    k = W.shape[1]
    data = make_dataset(X, np.asarray(y, dtype=np.int64), None, None, k)
    p = check_params(SoftmaxRegression("sgd", batch_size=batch_size, **params))
    steps = -(-X.shape[0] // batch_size)

    def call():
        with thread_policy(None):
            return run_epoch(data, SGDState.start(W.T, b), order, p, steps_per_epoch=steps)

    return call


@contextlib.contextmanager
def local_cluster(n_workers: int):
    """A Dask client on a local cluster of ``n_workers`` single-threaded worker processes.

    Its start-up and shutdown chatter is silenced (not ours); ":0" takes a free
    dashboard port, so clusters of other test workers never clash.
    """
    import distributed

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                           processes=True, dashboard_address=":0",
                                           silence_logs=50)
        client = distributed.Client(cluster)
    try:
        yield client
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client.close()
            cluster.close()
