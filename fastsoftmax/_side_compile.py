"""A kernel a fit needs later, compiled meanwhile in a second process on a spare core.

On an empty cache a first Newton fit compiles its kernels one after the
other: the gradient pass, then the Hessian products' pass, each single
threaded (Numba compiles under one lock per process), while the other
cores wait. Here the fit, before its first gradient, starts a second
Python process that compiles the Hessian products' kernel (dense data's,
or the row pass of sparse data's) for the very signature the fit will
call it with, into the same disk cache, while this process compiles the
gradient's. When the fit reaches its first product,
the compile lock of :mod:`fastsoftmax._kernels._locks` makes it wait for
the second process if that one is still compiling, then it loads the
kernel from the cache; nothing about the compiled code changes. A
calibration of the dense strategy (:mod:`._calibration`, which compiles
both strategies' gradient kernels to time them) starts the process
before it compiles, for a Newton fit's products of both strategies and
the GEMM strategy's gradients (``_calibration._compile_aside``), and
waits for it, or stops it (:func:`finish`), before it times anything.

The process is started only where it can help and cannot be in the way:

* the kernel is not compiled in this process, nor in the cache for that
  signature (a second fit, or a second process, starts nothing);
* the compile locks are in force (POSIX ``flock``; not on Windows, nor
  with ``FASTSOFTMAX_NUMBA_AS_IS=locks``): without them both processes
  would compile it;
* a core is spare: this process may use at least two, and the load
  average over the last minute is below that count less one half (under
  a test runner's or a job's full load, nothing starts);
* this process runs a Python interpreter (not a frozen application, nor a
  program that embeds Python: :func:`python_interpreter`);
* ``FASTSOFTMAX_SIDE_COMPILE`` is not ``0``. ``1`` starts it whatever the
  load (the other conditions still hold).

The second process ends when its compile does, or when this process exits
(it is stopped then: a compile cut short leaves no cache entry, and the
next process compiles the kernel itself). BENCHMARKS.md, "Fortieth
session", has the first fit with and without it.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._settings import SettingError

SETTING = "FASTSOFTMAX_SIDE_COMPILE"

# The processes started and not yet seen to end (stopped at exit), and
# whether stop_all is registered to run at exit.
_started: list[subprocess.Popen] = []
_stop_at_exit = False


def setting() -> str:
    """Return ``FASTSOFTMAX_SIDE_COMPILE``: "auto" (unset or empty), "0" or "1".

    Raises :class:`~fastsoftmax._settings.SettingError` (a ValueError)
    naming the variable for any other value.
    """
    value = os.environ.get(SETTING, "").strip()
    if value in ("", "auto"):
        return "auto"
    if value in ("0", "1"):
        return value
    raise SettingError(f"{SETTING}={value!r}: takes 0 (never compile in a second process), "
                       "1 (whatever the load) or auto (when a core is spare)")


def spare_core() -> bool:
    """Return whether another core is free: 2+ usable, load average below that less 0.5."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    if cpus < 2:
        return False
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - no load average
        return False
    return load < cpus - 0.5


def python_interpreter() -> bool:
    """Return whether ``sys.executable`` is a Python interpreter that runs ``-c`` code.

    Not in a frozen application (PyInstaller and the like: the executable
    is the application itself) nor under a host program that embeds Python
    (its executable is the host's).
    """
    name = os.path.basename(sys.executable or "").lower()
    return not getattr(sys, "frozen", False) and name.startswith("python")


def in_cache(kernel: Any, types: tuple) -> bool:
    """Return whether ``kernel`` is compiled for ``types`` here or in its disk cache.

    Reads the cache's index only (as Numba does before loading an entry).
    True where Numba's internals are not the expected ones: then nothing
    is started.
    """
    if types in kernel.overloads:
        return True
    try:
        cache = kernel._cache
        key = cache._index_key(types, kernel.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - other internals, an unreadable index: start nothing
        return True


def start(kernels: Callable[[], Sequence[tuple[Any, tuple]]]) -> subprocess.Popen | None:
    """Compile ``kernels()``, [(kernel, argument types)], in a second process where it helps.

    Returns the process, or None where none was started (module
    docstring). ``kernels`` is called only once the cheap conditions
    hold. Raises SettingError for a bad ``FASTSOFTMAX_SIDE_COMPILE``.
    """
    from ._kernels import _locks

    mode = setting()
    if mode == "0" or not _locks.installed() or not python_interpreter():
        return None
    if mode == "auto" and not spare_core():
        return None
    todo = [(kernel, types) for kernel, types in kernels()
            if _locks.lock_path(kernel, types) is not None and not in_cache(kernel, types)]
    if not todo:
        return None
    global _stop_at_exit
    payload = pickle.dumps([(k.py_func.__module__, k.py_func.__qualname__, types)
                            for k, types in todo])
    # The second process imports this very package (not another copy on its
    # path), and never the current folder's.
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONSAFEPATH="1",
               PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        proc = subprocess.Popen([sys.executable, "-c", "from fastsoftmax._side_compile "
                                 "import main; main()"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        assert proc.stdin is not None
        proc.stdin.write(payload)  # a few hundred bytes: the pipe takes them at once
        proc.stdin.close()
    except OSError:
        return None
    if not _stop_at_exit:
        atexit.register(stop_all)
        _stop_at_exit = True
    _started[:] = [p for p in _started if p.poll() is None]
    _started.append(proc)
    return proc


def _stop(proc: subprocess.Popen) -> None:
    """Stop ``proc`` if it still runs (a compile cut short leaves no cache entry)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - ignores SIGTERM
            proc.kill()


def stop_all() -> None:
    """Stop the second processes still compiling (at exit)."""
    for proc in _started:
        _stop(proc)
    _started.clear()


def finish(proc: subprocess.Popen, wait_s: float) -> None:
    """Wait up to ``wait_s`` seconds for ``proc`` to end, then stop it if it still runs.

    For a caller about to time something, which must have the cores to
    itself: a kernel whose compile is stopped is compiled where it is
    first called, as without the second process.
    """
    try:
        proc.wait(timeout=max(wait_s, 0.0))
    except subprocess.TimeoutExpired:
        _stop(proc)


def main() -> None:
    """Compile each (module, name, argument types) read from stdin: the second process's work."""
    import importlib

    import fastsoftmax._kernels  # noqa: F401  (the cache locator and the compile locks)

    for module, name, types in pickle.load(sys.stdin.buffer):
        getattr(importlib.import_module(module), name).compile(types)
