"""Kernel-launch scaffolding shared by every caller of a parallel kernel.

A parallel kernel splits the rows into ``n_chunks`` near-equal ranges, one
per Numba thread (never more chunks than rows), and reports per chunk the
first row it could not process (or -1). These helpers size the chunk axis
and reduce that report; the thread count itself is set by
:func:`fastsoftmax._threads.thread_policy`.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import Any

import numpy as np

# Below this much work (:func:`launch_work`) a kernel call runs without a
# parallel region: waking Numba's workers (more after an idle pause, or when
# another process is busy) costs more than the work itself at this size
# (BENCHMARKS.md, "small problems").
SERIAL_WORK = 1 << 24
# The same inside a solver, whose kernel calls follow each other with the
# workers still awake: a launch then costs tens of microseconds, and a call
# of a few hundred thousand multiply-adds already gains from a second thread
# (BENCHMARKS.md, "small problems").
SERIAL_WORK_WARM = 1 << 18


# A caller's kernel calls that follow one another, each starting within
# LOOP_GAP_S of the previous one's end, come from a loop (an optimiser of
# the caller's own driving loss_and_grad, say): once such a run of calls
# has lasted LOOP_SPAN_S, its calls take SERIAL_WORK_WARM, as a solver's
# do. The OpenMP workers sleep once they have waited a few milliseconds for
# work, and waking them is what a first parallel call pays: on the 2-vCPU
# KVM guest measured, calls after 20 ms idle took 8-16 ms on two threads
# against 0.7-1.3 ms on one, where calls of a few hundred microseconds
# after gaps of up to 1 ms, idle or busy, took 1.3-1.8x as long on one
# thread as on two (after 5 ms gaps, 1.1-1.5x). Ten calls after an idle
# spell, taken in parallel from their third, cost 2.3-4.4x the time of ten
# on one thread (BENCHMARKS.md, "Sixteenth session"). So, as in renting
# before buying, a run of calls first spends on one thread about what a
# wake-up costs: a long loop then pays at most about twice what the better
# choice in hindsight would have, and a short burst never wakes the
# workers.
LOOP_GAP_S = 0.005
LOOP_SPAN_S = 0.01
_clock = time.perf_counter


class _Calls(threading.local):
    """The recent kernel calls of one Python thread (OpenMP keeps a team per calling thread)."""

    last_end = -math.inf
    loop_start = 0.0
    # The end of the last parallel region this thread ran (-inf: none yet).
    last_region_end = -math.inf


_calls = _Calls()

# After an idle spell, waking the workers costs what this host's OpenMP and
# scheduler make it: tens of microseconds on a bare machine. On the 2-vCPU
# KVM guest measured, an empty region took 5-20 us after gaps of up to 5
# ms, 140-190 us after 10-20 ms, and after longer gaps 0.1-8 ms, about 4.8
# on average: the sleeping worker's virtual CPU runs again only at a 4 ms
# timer tick, or the one after. Sparse calls of 1-3 ms on one thread took
# 10-14 ms on two after a pause (BENCHMARKS.md, "Forty-seventh session").
# So a call that comes at least COLD_GAP_S after this thread's last
# parallel region (its workers asleep: after gaps of 30-200 ms every
# region met the tick), and would go parallel, first wakes them with an
# empty region, timed (:func:`_wake_probe`). That costs it little: the
# region is what its own would have paid first. On that guest the call's
# own region then pays about as much again where the probe was dear (a
# probe of 6.3-7.6 ms, the call after it 8-10 ms above its warm time;
# after probes of 0.1 ms, 0.3-1 ms above: the worker's virtual CPU sleeps
# again between the two), so a cold parallel call costs CALL_WAKES probes.
# From WAKE_SAMPLES such wake-ups on (the last WAKE_WINDOW kept), a call
# after such a gap stays on the calling thread while what one thread adds
# to its time, its work at UNIT_S a unit times 1 - 1/p on p threads (the
# calling thread does 1/p of it either way), is less than CALL_WAKES times
# their mean (the expected wake-up, however the cheap and dear ones mix):
# below :func:`cold_serial_work`, never above COLD_SERIAL_MAX. The first
# region of a thread is not a sample: it starts the team.
COLD_GAP_S = 0.05
CALL_WAKES = 2
WAKE_SAMPLES = 3
WAKE_WINDOW = 16
# A unit of launch_work on one thread, near the slow end of those measured
# on the Zen 4 host (gradients and predictions, dense and sparse: 0.03-0.12
# ns; benchmarks/serial_parallel.py --part units): on a host where a unit
# is slower the limit's work takes longer than the wake-up, where faster
# shorter.
UNIT_S = 1e-10
COLD_SERIAL_MAX = 1 << 28
_wake_samples: collections.deque[float] = collections.deque(maxlen=WAKE_WINDOW)
_wake_lock = threading.Lock()
_probe_loaded = False


def calls_in_a_loop() -> bool:
    """Count a new kernel call on this thread; return whether it comes in a loop.

    A loop: calls each within :data:`LOOP_GAP_S` of the last one's end, for
    :data:`LOOP_SPAN_S` so far.
    """
    now = _clock()
    calls = _calls
    if now - calls.last_end >= LOOP_GAP_S:
        calls.loop_start = now
    return now - calls.loop_start >= LOOP_SPAN_S


def serial_call(work: int, warm: bool = False, n_threads: int | None = None) -> bool:
    """Count a kernel call of ``work`` (:func:`launch_work`); return whether it runs on one thread.

    Below :data:`SERIAL_WORK`, or :data:`SERIAL_WORK_WARM` for a solver's
    calls (``warm``) and calls in a loop (:func:`calls_in_a_loop`), the
    call runs on the calling thread alone: its caller runs the kernel's
    one chunk (:func:`run_one_chunk`) or the parallel kernel at one
    thread (``_threads.kernel_call``), and says when it has ended
    (:func:`call_ended`). After an idle spell the limit is this host's
    :func:`cold_serial_work` (:data:`COLD_GAP_S`); ``n_threads`` (None:
    the count in force) is the call's, on which its wake-up is measured
    (one thread: nothing to wake, the call runs there).
    """
    if warm or calls_in_a_loop():
        return work < SERIAL_WORK_WARM
    if work < SERIAL_WORK:
        return True
    since = _clock() - _calls.last_region_end
    if since < COLD_GAP_S or since == math.inf or work >= COLD_SERIAL_MAX:
        # The workers are awake, or the thread has no team yet (its first
        # region starts one: not a wake-up), or the work is large.
        return False
    if n_threads is None:
        n_threads = numba_thread_count()
    if n_threads < 2:
        return True  # nothing to wake
    if work < cold_serial_work(n_threads):
        return True
    _wake_probe(n_threads)
    return False


def cold_serial_work(n_threads: int) -> int:
    """Return the work below which a call after an idle spell stays on one thread.

    An idle spell: :data:`COLD_GAP_S`. :data:`CALL_WAKES` times the mean of
    the last :data:`WAKE_WINDOW` wake-ups measured in this process, over
    what a unit of work on one thread adds to a call's time against
    ``n_threads``: :data:`UNIT_S` (1 - 1/``n_threads``). Between :data:`SERIAL_WORK` and
    :data:`COLD_SERIAL_MAX`; :data:`SERIAL_WORK` while fewer than
    :data:`WAKE_SAMPLES` are known.
    """
    with _wake_lock:
        samples = list(_wake_samples)
    if len(samples) < WAKE_SAMPLES or n_threads < 2:
        return SERIAL_WORK
    wake = CALL_WAKES * sum(samples) / len(samples)
    return int(min(COLD_SERIAL_MAX,
                   max(SERIAL_WORK, wake / (UNIT_S * (1 - 1 / n_threads)))))


def _wake_probe(p: int) -> None:
    """Wake this thread's workers with an empty region on ``p`` threads; record what it took.

    The call that follows runs on those threads and finds them awake (on
    the guest measured, not always: see :data:`COLD_GAP_S`). The region
    runs inside ``_threads.numba_threads``, which serialises launches
    where the threading layer needs it.
    """
    from ._kernels._checks import _first_nonfinite_row
    from ._threads import numba_threads

    global _probe_loaded
    if not _probe_loaded:
        # Compiled or loaded from the cache on one thread first: that time
        # is not a wake-up.
        with numba_threads(1):
            _first_nonfinite_row(np.zeros((1, 1)), np.empty(1, dtype=np.int64))
        _probe_loaded = True
    rows, bad = np.zeros((p, 1)), np.empty(p, dtype=np.int64)
    with numba_threads(p):
        start = _clock()
        _first_nonfinite_row(rows, bad)
        took = _clock() - start
    _calls.last_region_end = _clock()
    with _wake_lock:
        _wake_samples.append(took)


def call_ended(parallel: bool = False) -> None:
    """Note that a kernel call on this thread has just ended (:func:`calls_in_a_loop`).

    ``parallel``: it ran a parallel region on more than one thread.
    """
    now = _clock()
    _calls.last_end = now
    if parallel:
        _calls.last_region_end = now


def region_ended() -> None:
    """Note that a parallel region on more than one thread has just ended on this thread."""
    _calls.last_region_end = _clock()


def launch_work(m: int, n: int, k: int) -> int:
    """Multiply-add equivalents of one pass over (m, n) data with k classes.

    The products' m n k, plus each row's own work, measured in the same
    unit: the max, exp, sum, log and error of k logits (about 8 per class)
    and a fixed cost per row (about 256: the loop, the label, the
    per-row sums). On (300000, 20, 2) that row work is most of the pass:
    counted as m n k alone (12 million) it ran on one thread for 18 ms where
    two took 13 ms (measured).
    """
    return m * (n * k + 8 * k + 256)


def sparse_launch_work(m: int, nnz: int, k: int) -> int:
    """:func:`launch_work` of one pass over CSR data: m rows, nnz stored entries, k classes.

    In the dense unit (a multiply-add of the dense kernels, 0.045-0.075 ns
    on one core of the 2-vCPU Zen 4 host measured): a stored entry costs
    about 128 for its index, its row of W and the scatter of its error,
    plus 4 per class; a row as in :func:`launch_work`. Fitted on one
    thread over CSR shapes of 250,000-750,000 entries, 2-50 classes and W
    of 2 KB to 2 MB: 6.3-7.6 ns an entry, 0.25-0.39 ns an entry and class
    (BENCHMARKS.md, "Forty-sixth session"). So (2000 x 2000, 2 % stored,
    10 classes), 1.1 ms on one thread, counts as 14 million: below
    :data:`SERIAL_WORK`, as a dense call of that time is.
    """
    return nnz * (4 * k + 128) + m * (8 * k + 256)


# numba.np.ufunc.parallel once its threading layer is launched (None before).
_layer: Any = None


def numba_thread_count() -> int:
    """Return this thread's Numba thread count (``numba.get_num_threads()``).

    Once the threading layer is launched, read through the layer's own
    function: Numba's public call takes a process-wide lock and checks the
    launch every time, and a small call reads the count several times
    (alone after an idle pause, 77 microseconds against 31 on the 2-vCPU
    guest measured; BENCHMARKS.md, "Forty-eighth session").
    """
    layer = _layer
    if layer is None:
        import numba

        count = numba.get_num_threads()
        _note_launch()
        return count
    return layer._get_num_threads()


def set_numba_thread_count(n: int) -> None:
    """``numba.set_num_threads(n)`` for a count already checked (1 to ``NUMBA_NUM_THREADS``).

    As :func:`numba_thread_count`, through the layer's own function once launched.
    """
    layer = _layer
    if layer is None or type(n) is not int or not 1 <= n <= _thread_limit:
        import numba

        numba.set_num_threads(n)  # its checks raise for a count out of range
        _note_launch()
        return
    layer._set_num_threads(n)


_thread_limit = 0  # NUMBA_NUM_THREADS, read with the layer


def launched_thread_limit() -> int:
    """Return ``NUMBA_NUM_THREADS`` once Numba's threading layer is launched, else 0.

    The launched layer's pool is that size for the rest of the process.
    """
    return _thread_limit if _layer is not None else 0


def _note_launch() -> None:
    """Keep Numba's parallel module for the two functions above once its layer is launched."""
    global _layer, _thread_limit
    import numba
    from numba.np.ufunc import parallel

    _thread_limit = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    if (getattr(parallel, "_is_initialized", False)
            and callable(getattr(parallel, "_get_num_threads", None))
            and callable(getattr(parallel, "_set_num_threads", None))):
        _layer = parallel


def run_one_chunk(chunk_fn, args) -> None:
    """Run a kernel's work as one chunk on the calling thread (``args`` sized for one chunk).

    Every parallel kernel is a ``prange`` over chunks calling one compiled
    chunk function, so the chunk function called from Python runs the same
    machine code with no parallel region around it. The parallel kernel run
    at one thread instead (as once, when its body was compiled into the
    region) took the same time back to back (0.92-1.07x), 40-65
    microseconds more on 64-1,000 rows after 10 ms idle, and the chunk
    alone 60-115 more after a 0.5 s pause: the region's entry, and Numba's
    thread count set and restored (BENCHMARKS.md, "Fiftieth session").
    """
    chunk_fn(0, *args)


def n_chunks(m: int) -> int:
    """Return the chunk count for ``m`` rows: one per thread in force, at most m."""
    return max(1, min(int(m), numba_thread_count()))


# Alignment of the buffers the register tiles stream through (a cache line,
# and one 512-bit vector): an unaligned 64-byte load spans two lines and
# costs two. With the kernels' weights and partial sums aligned, the float32
# rows kernel ran 1.1-1.5x faster at 2 threads on (m, 20 ... 784, 2 ... 10)
# shapes (BENCHMARKS.md, "Seventh session"). The user's X is read where it is:
# copying blocks of it into aligned scratch cost more than the split loads.
ALIGN = 64


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """Return an uninitialised C-contiguous array whose data starts on an :data:`ALIGN` boundary."""
    dtype = np.dtype(dtype)
    size = math.prod(shape) * dtype.itemsize
    raw = np.empty(size + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + size].view(dtype).reshape(shape)


def aligned_zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """Return :func:`aligned_empty`'s array, zeroed."""
    a = aligned_empty(shape, dtype)
    a.fill(0)
    return a


def aligned_row(n: int, itemsize: int, pad_bytes: int = 0) -> int:
    """Entries per row of a (..., n) buffer whose rows all start aligned.

    At least ``pad_bytes`` are left free after the first n entries of a row.
    """
    per = ALIGN // itemsize
    return -(-(n + -(-pad_bytes // itemsize)) // per) * per


def aligned_rows(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Return a copy of the 2-D ``a`` (r, n) whose rows all start aligned: (r, n') zero-padded.

    For the rows kernels' weights, which read the first n entries of each
    row (n from X) and nothing beyond. ``out``: an earlier result of this
    function for an array of a's shape and dtype, whose padding is still
    zero; a's entries are copied into it and it is returned.
    """
    r, n = a.shape
    if out is not None:
        out[:, :n] = a
        return out
    out = aligned_empty((r, aligned_row(n, a.dtype.itemsize)), a.dtype)
    out[:, :n] = a
    out[:, n:] = 0
    return out


def first_bad(bad_row: np.ndarray) -> int:
    """Return the smallest non-negative entry of a per-chunk report, or -1."""
    if bad_row.shape[0] == 1:  # one chunk: the report itself (no boolean mask to build)
        return max(int(bad_row[0]), -1)
    hits = bad_row[bad_row >= 0]
    return int(hits.min()) if hits.size else -1


def rowwise_kernel(n_classes: int):
    """Return the row-wise softmax kernel for rows of ``n_classes`` entries.

    ``_kernels._rowwise._rowwise_lanes`` from ``_kernels._common.LANES_FROM``
    entries on (the row maximum in whole vectors), ``_rowwise`` below.
    """
    from ._kernels import _rowwise
    from ._kernels._common import LANES_FROM

    return _rowwise._rowwise_lanes if n_classes >= LANES_FROM else _rowwise._rowwise


def status_arrays(chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the per-chunk OUT arrays of the row-wise kernels: first bad row, status code."""
    return np.empty(chunks, dtype=np.int64), np.empty(chunks, dtype=np.int64)
