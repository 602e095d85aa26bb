"""The thread policy: one place decides how many threads compute.

``n_threads`` is the one knob. Inside every fastsoftmax call that computes
(a fit, ``loss_and_grad``, ``hessp``, a prediction) :func:`thread_policy`

* runs Numba's parallel kernels on ``n_threads`` workers (None: Numba's
  current setting, by default every core), set for the calling Python
  thread only and restored on return, even on error;
* holds every BLAS library loaded in the process (OpenBLAS, MKL, BLIS) at
  one thread, and restores the user's settings on return. ``loss_and_grad``,
  ``hessp`` and predictions hold only the library their kernels call
  (``_blas_choice.kernel_library``), and only where they call one (the
  dense GEMM strategy and dense predictions; the rows and sparse kernels
  call none): getting and setting each library's count is most of the
  policy's cost in a small call.

The one exception is work that is BLAS alone, the labels of dense data
(one matrix product per block of rows): :func:`blas_map` runs the blocks
on a pool of Python threads, each calling BLAS at one thread, and no Numba
kernel runs.

Why BLAS is held at one thread: fastsoftmax parallelises over row chunks
itself, and the BLAS calls it makes are either inside those chunks (the
GEMM strategy: one call per chunk at a time) or on (n, k)-sized vectors
between kernel calls (scipy's L-BFGS-B). A multithreaded BLAS pool woken
there keeps its threads spinning after the call and takes the cores away
from Numba's workers in the next kernel: a default-settings fit ran several
times slower than the same fit with BLAS at one thread (BENCHMARKS.md,
"threads"). Setting and restoring the limit costs microseconds, so it is
done per call, never left behind.

Why BLAS-only work runs on Python threads rather than BLAS's own: an
OpenBLAS pool keeps every worker but the caller spinning for about 0.1 s
after each multithreaded call (2^28 clock ticks, its THREAD_TIMEOUT), and
lowering its thread count does not stop them. Labels computed that way
took a core from the next fit for that long: an SGD epoch of MNIST size
run right after ``score`` took 1.6-2x as long as one run back to back
(BENCHMARKS.md, "Sixth session"). Idle Python threads block instead of
spinning, and BLAS at one thread never wakes its pool.

Numba's threading layer is not chosen here: changing it is a global side
effect on the user's process (docs/user_guide/functions.rst, "Threads").
"""

from __future__ import annotations

import contextlib
import numbers
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ._launch import (
    call_ended,
    launched_thread_limit,
    numba_thread_count,
    region_ended,
    serial_call,
    set_numba_thread_count,
)

T = TypeVar("T")
R = TypeVar("R")

# Numba is imported by the functions that need it, not here: a process that
# only predicts labels of dense data (the command line's ``predict``), or
# asks for ``--version``, never imports it (about 0.2 s).

_controller = None
_controller_modules = -1  # len(sys.modules) when the controller was built
_controller_lock = threading.Lock()
# The BLAS libraries held at one thread now, over all Python threads, by
# file path: [the blocks holding it, its count's setter (_count_calls), the
# count to restore when the last leaves (None: it was at one thread already)].
_blas_held: dict[str, list] = {}
# The file paths each open block that holds every library holds: a
# library loaded while it is open joins it (load_kernel_blas).
_blas_all_blocks: list[list[str]] = []
_kernel_blas_loaded = False
_launch_lock = threading.RLock()  # serialises kernel launches under "workqueue"
_layer_safe: bool | None = None  # Numba's threading layer is thread-safe (None: unknown)


def thread_limit() -> int:
    """Return Numba's maximum thread count, ``NUMBA_NUM_THREADS``."""
    import numba

    # numba.core.config assigns this from a function (``global``), so mypy
    # does not see it as a module attribute.
    return numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]


def check_n_threads(n_threads: int | None) -> int | None:
    """Validate an ``n_threads`` argument; None means Numba's current value."""
    if n_threads is None:
        return None
    # A plain int within the pool that Numba's launched layer has (its size
    # is fixed from then on) needs neither the ABC check nor Numba's config:
    # after an idle pause those took 40 microseconds of a small call
    # (BENCHMARKS.md, "Forty-ninth session").
    if type(n_threads) is int and 1 <= n_threads <= launched_thread_limit():
        return n_threads
    if isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral):
        raise TypeError(f"n_threads must be an int or None, got {type(n_threads).__name__}")
    limit = thread_limit()
    if not 1 <= int(n_threads) <= limit:
        raise ValueError(
            f"n_threads must be between 1 and {limit} (NUMBA_NUM_THREADS), got {n_threads}"
        )
    return int(n_threads)


def _needs_serialising() -> bool:
    """Return True unless Numba's threading layer is known to be thread-safe.

    The "workqueue" layer (used when neither TBB nor OpenMP is available)
    aborts the whole process when two Python threads launch parallel
    kernels at once. The layer is known only after the first parallel
    launch; until then, be safe.
    """
    global _layer_safe
    if _layer_safe is None:
        import numba

        try:
            layer = numba.threading_layer()
        except ValueError:  # no parallel kernel has run yet
            return True
        _layer_safe = layer != "workqueue"
    return not _layer_safe


def _numba_enter(n_threads: int | None) -> tuple[int, int, bool]:
    """Enter a :func:`numba_threads` block: (count in force, count to restore, lock held)."""
    serial = _needs_serialising()
    if serial:
        _launch_lock.acquire()
    try:
        previous = numba_thread_count()
        if n_threads is None or n_threads == previous:
            return previous, previous, serial
        set_numba_thread_count(n_threads)
    except BaseException:
        if serial:
            _launch_lock.release()
        raise
    return n_threads, previous, serial


def _numba_exit(in_force: int, previous: int, serial: bool) -> None:
    """Leave a :func:`numba_threads` block entered by :func:`_numba_enter`."""
    try:
        if in_force != previous:
            set_numba_thread_count(previous)
    finally:
        if serial:
            _launch_lock.release()


@contextlib.contextmanager
def numba_threads(n_threads: int | None) -> Iterator[int]:
    """Run the block with ``n_threads`` Numba threads; yield the count in force.

    Numba's thread count is thread-local, so a value set here affects only
    calls made from this Python thread, and it is restored on exit, even
    when the block raises. Under the non-thread-safe "workqueue" threading
    layer the blocks of different Python threads are serialised by a
    (re-entrant) lock.
    """
    state = _numba_enter(n_threads)
    try:
        yield state[0]
    finally:
        _numba_exit(*state)


def _blas_controller():
    """Return the BLAS threadpoolctl controller, rebuilt when new modules may have loaded one.

    Building it scans every loaded shared library (about a millisecond), so
    it is kept; a library loaded later (torch's MKL, say) comes with a new
    Python module, which the module count notices. Call with the lock held.
    """
    global _controller, _controller_modules
    if _controller is None or _controller_modules != len(sys.modules):
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController().select(user_api="blas")
        _controller_modules = len(sys.modules)
        _count_calls.clear()
        for lib in _controller.lib_controllers:
            _count_calls[lib.filepath] = _library_counts(lib)
    return _controller


# Per library file path (the controller's libraries): its (get, set) of the
# thread count.
_count_calls: dict[str, tuple[Callable[[], Any], Callable[[int], Any]]] = {}


def _library_counts(lib) -> tuple[Callable[[], Any], Callable[[int], Any]]:
    """Return (get, set) of ``lib``'s thread count: OpenBLAS's own functions for its own pool.

    An OpenBLAS with its own (pthreads) pool has one process-wide count,
    which its ``openblas_get_num_threads`` and ``openblas_set_num_threads``
    read and write; they are called directly (under the names its builds
    export: SciPy's and NumPy's wheels prefix "scipy_", 64-bit integer
    builds suffix "64_"). threadpoolctl's methods, which every other
    library goes through, wrap the same calls in Python (the controlling
    thread, the symbol's lookup): after an idle pause, a hold's get and two
    sets through them took about twice the direct calls' time
    (BENCHMARKS.md, "Forty-ninth session"). Holds are counted here
    (:func:`_hold`), so the controlling thread is not needed.
    """
    dynlib = getattr(lib, "dynlib", None)
    if (dynlib is not None and lib.internal_api == "openblas"
            and getattr(lib, "threading_layer", None) == "pthreads"):
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_"):
                get = getattr(dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
                put = getattr(dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    return get, put
    return lib.get_num_threads, lib.set_num_threads


def _blas_enter(library: str | None = None) -> list[str]:
    """Hold every loaded BLAS library at one thread, or only the one at file path ``library``.

    Returns the file paths held, for :func:`_blas_exit`. Each library
    counts the blocks holding it: the first sets it to one thread, the
    last to leave restores its count, whatever the order blocks leave in.
    """
    with _controller_lock:
        libraries = _blas_controller().lib_controllers
        if library is not None:
            libraries = [lib for lib in libraries if lib.filepath == library]
        held = [_hold(lib) for lib in libraries]
        if library is None:
            _blas_all_blocks.append(held)
        return held


def _blas_exit(held: list[str]) -> None:
    """Leave a block entered by :func:`_blas_enter`, which returned ``held``."""
    with _controller_lock:
        for i, block in enumerate(_blas_all_blocks):
            if block is held:
                del _blas_all_blocks[i]
                break
        for path in held:
            entry = _blas_held[path]
            entry[0] -= 1
            if entry[0] == 0:
                del _blas_held[path]
                if entry[2] is not None:
                    entry[1](entry[2])


def _hold(lib) -> str:
    """Count one more block holding ``lib`` at one thread; return its file path (the lock held).

    The library's own count's get and set (:func:`_library_counts`; not
    threadpoolctl's ``limit``, with the report of every library it builds
    on entry and on exit: 6 microseconds a block where that took 14, next
    to calls of 100-200 microseconds); a library at one thread already is
    left alone.
    """
    entry = _blas_held.get(lib.filepath)
    if entry is not None:
        entry[0] += 1
        return lib.filepath
    get, put = _count_calls.get(lib.filepath) or _library_counts(lib)
    original = get()
    if original is None or original == 1:
        original = None
    else:
        put(1)
    _blas_held[lib.filepath] = [1, put, original]
    return lib.filepath


def load_kernel_blas() -> None:
    """Load the BLAS that the GEMM kernels call, and hold it to the limit in force.

    Numba's ``np.dot`` calls SciPy's BLAS (``scipy.linalg.cython_blas``,
    its own OpenBLAS build), which Numba loads only when a compiled kernel
    first multiplies, that is inside :func:`thread_policy`, after the limit
    was set on the libraries loaded until then. The new library then ran at
    its default thread count: a pool per kernel thread, left spinning for
    about 0.1 s after each call, and the first calls of a process's first
    GEMM fit took up to 3.5x as long (3000 x 784 x 100 float32: 16 ms per
    gradient against 4.6 ms, for the first ~130 ms, measured). The ``mkl``
    wheel's MKL, where installed, is loaded here too
    (:func:`._blas_choice.load_mkl`). Launchers of kernels that call BLAS
    call this first; importing the module costs about 0.1 s once, which the
    first product would have paid anyway.
    """
    global _kernel_blas_loaded, _controller
    if _kernel_blas_loaded:
        return
    import scipy.linalg.cython_blas  # noqa: F401  (loads the shared library)

    from ._blas_choice import load_mkl

    with _controller_lock:
        _kernel_blas_loaded = True
        if load_mkl([lib.internal_api for lib in _blas_controller().lib_controllers]):
            _controller = None  # loaded by ctypes: no new module tells the controller
        # The next block's controller sees the library; the open blocks that
        # hold every library take it now.
        _join_all_blocks()


def _join_all_blocks() -> None:
    """Have each open block that holds every library hold those loaded since it began.

    Call with the lock held.
    """
    if _blas_all_blocks:
        libraries = _blas_controller().lib_controllers
        for block in _blas_all_blocks:
            block.extend(_hold(lib) for lib in libraries if lib.filepath not in block)


def blas_libraries() -> list[str]:
    """Return the file paths of the BLAS libraries loaded now (those this module limits)."""
    with _controller_lock:
        return [lib.filepath for lib in _blas_controller().lib_controllers]


class single_threaded_blas:  # noqa: N801  (used as a function: ``with single_threaded_blas():``)
    """Limit every loaded BLAS library to one thread for the block, or one library, or none.

    BLAS's thread count is process-wide, so blocks entered from several
    Python threads at once share one limit: per library, the first block
    to enter sets it and the last to leave restores the original.
    (Nested threadpoolctl limits entered and left out of order would
    otherwise restore each other's values and leave BLAS limited for
    good.) A library loaded inside a block that holds every library, by
    :func:`load_kernel_blas`, joins it and is restored with the others.
    ``library``: the file path of the one library to hold, the one the
    block's kernels call (``._blas_choice.kernel_library``): its get and
    set calls cost about half of three libraries' after an idle pause
    (BENCHMARKS.md, "Forty-seventh session"). ``needed=False``: a block
    that calls no BLAS (the rows kernels, the sparse kernels) skips them
    all, which after an idle pause cost about 0.14 ms with three libraries
    loaded (BENCHMARKS.md, "Forty-sixth session").
    """

    __slots__ = ("_needed", "_library", "_held")

    def __init__(self, needed: bool = True, library: str | None = None):
        self._needed = needed
        self._library = library

    def __enter__(self) -> None:
        if self._needed:
            self._held = _blas_enter(self._library)

    def __exit__(self, *exc) -> None:
        if self._needed:
            _blas_exit(self._held)


class thread_policy:  # noqa: N801  (used as a function: ``with thread_policy(n):``)
    """Apply the package's thread policy to one computing call (module docstring).

    ``with thread_policy(n_threads) as nt:`` holds BLAS at one thread and
    runs Numba's kernels on ``n_threads`` (None: the current setting) for
    the block; ``nt`` is the number of Numba threads in force. Nested use is
    cheap: the inner block finds both settings already in place. A class
    rather than nested generator-based context managers: every call of the
    function API enters one, and after an idle pause each Python frame it
    runs costs tens of microseconds (BENCHMARKS.md, "Forty-fifth session").
    ``blas``: True holds every library; a file path, that library alone
    (the one the block's kernels call); False leaves BLAS to the block: a
    call that learns only inside it whether its kernels call BLAS holds it
    there (:class:`single_threaded_blas`).
    """

    __slots__ = ("_n_threads", "_numba", "_blas", "_held")

    def __init__(self, n_threads: int | None, blas: bool | str = True):
        self._n_threads = n_threads
        self._blas = blas

    def __enter__(self) -> int:
        blas = self._blas
        if blas is not False:
            self._held = _blas_enter(None if blas is True else blas)
        try:
            self._numba = _numba_enter(self._n_threads)
        except BaseException:
            if blas is not False:
                _blas_exit(self._held)
            raise
        return self._numba[0]

    def __exit__(self, *exc) -> None:
        try:
            _numba_exit(*self._numba)
        finally:
            if self._blas is not False:
                _blas_exit(self._held)


class kernel_call(thread_policy):  # noqa: N801  (used as a function, as thread_policy)
    """:class:`thread_policy` for one kernel call of ``work``, by the small-call rule.

    ``with kernel_call(n_threads, work) as nt:`` runs the block on one
    Numba thread where :func:`._launch.serial_call` says so (the parallel
    kernel then runs its one chunk on the calling thread and wakes no
    worker), else on ``n_threads``; BLAS is held at one thread as
    :class:`thread_policy`'s ``blas`` says. On leaving, the call's end is noted for
    :func:`._launch.calls_in_a_loop` where ``ends_call``: not for a scan of
    an input inside a larger call, whose kernel call is the one that counts.
    For launches without an engine of their own (predictions, the row-wise
    softmax, the scans); the engines decide per engine (``_dense``,
    ``_sparse_engine``).
    """

    __slots__ = ("_ends", "_parallel")

    def __init__(self, n_threads: int | None, work: int, *, blas: bool | str = True,
                 ends_call: bool = True):
        serial = n_threads == 1 or serial_call(work, n_threads=n_threads)
        super().__init__(1 if serial else n_threads, blas)
        self._ends = ends_call
        self._parallel = not serial

    def __exit__(self, *exc) -> None:
        try:
            super().__exit__(*exc)
        finally:
            if self._ends:
                call_ended(self._parallel)
            elif self._parallel:
                region_ended()


def blas_workers(n_threads: int | None) -> int:
    """Return the Python threads for BLAS-only work: ``n_threads``, or BLAS's own setting.

    BLAS's own setting is the largest thread count among the loaded BLAS
    libraries (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``
    or by default every core), so that the user's BLAS configuration
    still sizes this work. While a fastsoftmax call in another Python
    thread holds BLAS at one thread, that setting reads 1.
    """
    if n_threads is not None:
        return n_threads
    with _controller_lock:
        counts = [int(lib.num_threads) for lib in _blas_controller().lib_controllers]
    return max(counts, default=1)


# One pool per worker count, made on first use and kept: idle Python
# threads cost nothing (they block), and starting 16 of them per call would
# cost about a millisecond. A forked child inherits the pools' objects but
# not their threads, so it drops them and makes its own.
_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()
# Tasks per thread in :func:`blas_map` (see the comment there).
_GROUPS_PER_WORKER = 4


def _drop_pools() -> None:
    _pools.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_pools)


def _pool(workers: int) -> ThreadPoolExecutor:
    with _pools_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(
                workers, thread_name_prefix="fastsoftmax-blas")
        return pool


def blas_map(fn: Callable[[T], R], items: Iterable[T], n_threads: int | None) -> list[R]:
    """Return ``[fn(item) for item in items]``, computed on up to ``n_threads`` Python threads.

    For work that is BLAS alone (dense labels: one matrix product per block
    of rows). Every loaded BLAS library is held at one thread meanwhile
    (:func:`single_threaded_blas`): the parallelism is the Python threads',
    and no BLAS pool is woken, so none is left spinning after the call
    (module docstring). ``n_threads`` None: BLAS's own setting
    (:func:`blas_workers`). The results come back in the order of
    ``items``; if calls raise, the exception of the first such item in that
    order propagates (the later items may or may not have run).
    """
    items = list(items)
    workers = min(blas_workers(n_threads), len(items))
    with single_threaded_blas():
        if workers <= 1:
            return [fn(item) for item in items]
        # Consecutive items go together, a few groups per thread: one task
        # per item cost more than the products of small blocks (100,000 x
        # 100 x 100 in blocks of 163 rows: 18 % slower than BLAS's own
        # threads, measured), and a few groups per thread still even out a
        # thread that runs late.
        groups = min(len(items), _GROUPS_PER_WORKER * workers)
        bounds = [len(items) * g // groups for g in range(groups + 1)]

        def run(g: int) -> list[R]:
            return [fn(item) for item in items[bounds[g]:bounds[g + 1]]]

        return [r for part in _pool(workers).map(run, range(groups)) for r in part]
