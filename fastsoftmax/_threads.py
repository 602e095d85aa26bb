"""Thread control: Numba's worker count per call, BLAS threads off inside
compiled parallel regions."""

from __future__ import annotations

import contextlib
import numbers
import threading
from collections.abc import Iterator

import numba

_controller = None
_controller_lock = threading.Lock()


def check_n_threads(n_threads: int | None) -> int | None:
    """Validate an ``n_threads`` argument; None means Numba's current value."""
    if n_threads is None:
        return None
    if isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral):
        raise TypeError(f"n_threads must be an int or None, got {type(n_threads).__name__}")
    limit = numba.config.NUMBA_NUM_THREADS
    if not 1 <= int(n_threads) <= limit:
        raise ValueError(
            f"n_threads must be between 1 and {limit} (NUMBA_NUM_THREADS), got {n_threads}"
        )
    return int(n_threads)


@contextlib.contextmanager
def numba_threads(n_threads: int | None) -> Iterator[int]:
    """Run the block with ``n_threads`` Numba threads; yield the count in force.

    Numba's thread count is thread-local, so a value set here affects only
    calls made from this Python thread, and it is restored on exit, even
    when the block raises.
    """
    previous = numba.get_num_threads()
    if n_threads is None or n_threads == previous:
        yield previous
        return
    numba.set_num_threads(n_threads)
    try:
        yield n_threads
    finally:
        numba.set_num_threads(previous)


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit BLAS to one thread for the block.

    The GEMM strategy calls BLAS from every Numba worker at once; a
    multithreaded BLAS underneath would oversubscribe the cores. The
    threadpoolctl controller is built once, on first use, because building
    it scans every loaded library.
    """
    global _controller
    if _controller is None:
        with _controller_lock:
            if _controller is None:
                from threadpoolctl import ThreadpoolController

                _controller = ThreadpoolController()
    with _controller.limit(limits=1, user_api="blas"):
        yield
