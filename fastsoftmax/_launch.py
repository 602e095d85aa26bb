"""Kernel-launch scaffolding shared by every caller of a parallel kernel.

A parallel kernel splits the rows into ``n_chunks`` near-equal ranges, one
per Numba thread (never more chunks than rows), and reports per chunk the
first row it could not process (or -1). These helpers size the chunk axis
and reduce that report; the thread count itself is set by
:func:`fastsoftmax._threads.thread_policy`.
"""

from __future__ import annotations

import numba
import numpy as np

# Below this many multiply-adds (m n k) a kernel call runs without a
# parallel region: waking Numba's workers (more after an idle pause, or when
# another process is busy) costs more than the work itself at this size
# (BENCHMARKS.md, "small problems").
SERIAL_WORK = 1 << 24
# The same inside a solver, whose kernel calls follow each other with the
# workers still awake: a launch then costs tens of microseconds, and a call
# of a few hundred thousand multiply-adds already gains from a second thread
# (BENCHMARKS.md, "small problems").
SERIAL_WORK_WARM = 1 << 18


def n_chunks(m: int) -> int:
    """Return the chunk count for ``m`` rows: one per thread in force, at most m."""
    return max(1, min(int(m), numba.get_num_threads()))


def first_bad(bad_row: np.ndarray) -> int:
    """Return the smallest non-negative entry of a per-chunk report, or -1."""
    hits = bad_row[bad_row >= 0]
    return int(hits.min()) if hits.size else -1


def status_arrays(chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the per-chunk OUT arrays of the row-wise kernels: first bad row, status code."""
    return np.empty(chunks, dtype=np.int64), np.empty(chunks, dtype=np.int64)
