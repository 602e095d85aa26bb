"""One process at a time compiles a kernel signature; the others load it from the cache.

Processes started together on an empty cache -- joblib's or Dask's workers
on one machine, a test runner's workers -- each reach the same kernels
first and each compiled them: the same single-threaded work once per
process, side by side on cores the others need. Numba's cache has no
lock: each process writes the same entry in turn.

Here a process about to compile one of this package's kernels for a
signature first takes a lock file beside the cache entry (``flock``, one
file per function and signature, so different kernels still compile side
by side). A process arriving while another holds it waits, then finds the
entry in the cache and loads it; the first one compiles and saves as
Numba would. The file is removed when its compile ends. Nothing about the
compiled code changes.

Never a deadlock: a kernel's compile takes the locks of the kernels it
calls, never of its callers, and waiting gives up after :data:`WAIT_S`
seconds (then the process compiles, as without the lock). A cache
directory where the file cannot be created or locked (a read-only one, a
file system without ``flock``) and Windows (no ``fcntl``) compile as
before, without waiting. ``FASTSOFTMAX_NUMBA_AS_IS=locks`` leaves Numba's
compile as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator

from numba.core import sigutils
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher

from .._settings import left_to_numba
from ._cache import KernelsLocator

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

# The longest wait for another process's compile of a signature: far over
# the slowest kernel's compile on a slow host (about a minute), short
# enough that a process stopped while holding the lock delays the others
# by minutes, not for ever.
WAIT_S = 600.0
_POLL_S = 0.02

_numba_compile = None


def lock_path(dispatcher: Dispatcher, sig) -> str | None:
    """Return the lock file for compiling ``dispatcher`` for ``sig``.

    None where no lock is taken: a function of another package, one
    without a cache, a signature already compiled in this process.
    """
    cache = getattr(dispatcher, "_cache", None)
    try:
        if not isinstance(cache._impl.locator, KernelsLocator):  # type: ignore[union-attr]
            return None
        index = cache._cache_file._index_name  # type: ignore[union-attr]
        folder = cache._cache_path  # type: ignore[union-attr]
    except AttributeError:  # a NullCache, or a Numba with other internals
        return None
    args, _ = sigutils.normalize_signature(sig)
    if tuple(args) in dispatcher.overloads:
        return None
    key = hashlib.sha256(str(tuple(args)).encode()).hexdigest()[:16]
    return os.path.join(folder, f"{index.removesuffix('.nbi')}.{key}.lock")


def acquire(path: str, wait_s: float | None = None) -> int | None:
    """Take the lock file ``path``; return its descriptor, or None without a lock.

    Waits while another process holds it, up to ``wait_s`` seconds
    (:data:`WAIT_S` by default). None where the file cannot be created or
    locked, or when the wait ran out.
    """
    if fcntl is None:  # pragma: no cover - Windows
        return None
    deadline = time.monotonic() + (WAIT_S if wait_s is None else wait_s)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        os.close(fd)
                        return None
                    time.sleep(_POLL_S)
        except OSError:  # no flock on this file system
            os.close(fd)
            return None
        # The holder we waited for removed the file when it was done, and
        # a third process may have created and locked a new one: the lock
        # counts only on the file the path names now.
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except OSError:
            pass
        os.close(fd)


def release(path: str, fd: int) -> None:
    """Remove the lock file ``path`` and let go of its lock (``fd`` from :func:`acquire`)."""
    with contextlib.suppress(OSError):
        os.unlink(path)
    os.close(fd)


@contextlib.contextmanager
def held(path: str | None) -> Iterator[None]:
    """Hold the lock file ``path`` (None: no lock) for the block."""
    fd = None if path is None else acquire(path)
    try:
        yield
    finally:
        if fd is not None:
            release(path, fd)  # type: ignore[arg-type]


def _compile(self, sig):
    """``Dispatcher.compile``, with this package's kernels compiled under their lock file."""
    path = lock_path(self, sig)
    if path is None:
        return _numba_compile(self, sig)
    # Numba's own lock first: the one thread of this process that compiles
    # takes the lock files, so two threads never wait on each other's.
    with global_compiler_lock, held(path):
        return _numba_compile(self, sig)


def install() -> bool:
    """Compile this package's kernels under a lock file per signature (once).

    Returns whether it is installed: False without ``fcntl`` (Windows), or
    where ``FASTSOFTMAX_NUMBA_AS_IS`` names ``locks``. Raises ValueError,
    before anything changes, where that variable names anything unknown.
    """
    global _numba_compile
    as_is = left_to_numba()
    if _numba_compile is not None:
        return True
    if "locks" in as_is or fcntl is None:
        return False
    _numba_compile = Dispatcher.compile
    Dispatcher.compile = _compile  # type: ignore[method-assign]
    return True


def installed() -> bool:
    """Return whether :func:`install` has put :func:`_compile` in place."""
    return _numba_compile is not None
