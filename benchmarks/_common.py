"""Shared settings of the benchmark suite.

``make test`` collects these files with benchmarking disabled, so every case
runs once as a smoke test on the small shapes. ``make bench`` sets
FASTSOFTMAX_BENCH_FULL=1, which adds the large shapes the tables in
BENCHMARKS.md come from.
"""

import os

FULL = os.environ.get("FASTSOFTMAX_BENCH_FULL", "") not in ("", "0")


def shapes(small, full):
    """The small shapes always; the full ones only under FASTSOFTMAX_BENCH_FULL."""
    return list(small) + (list(full) if FULL else [])


def pedantic_or_call(benchmark, fn):
    """Warm up (compile, fill caches) once, then time fn with warm-up rounds."""
    fn()
    benchmark.extra_info["warmup"] = True
    return benchmark.pedantic(fn, rounds=7 if FULL else 1, warmup_rounds=1 if FULL else 0,
                              iterations=1)
