"""One process at a time compiles a kernel signature (``fastsoftmax._kernels._locks``).

The lock files themselves here; that processes started at once on an empty
cache compile each signature once between them is
``tests/test_concurrency.py::test_cache_shared_by_processes_started_at_once``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from _helpers import fresh_process_env
from numba import typeof, types

from fastsoftmax._kernels import _locks

pytestmark = pytest.mark.skipif(not _locks.installed(), reason="no fcntl: no compile locks")

WAITER = r"""
import os, sys
from fastsoftmax._kernels import _locks
path, marker = sys.argv[1:]
print("ready", flush=True)
fd = _locks.acquire(path, wait_s=120)
# the holder writes the marker just before it lets go
print("after" if fd is not None and os.path.exists(marker) else "before", flush=True)
_locks.release(path, fd)
"""


def test_a_held_lock_makes_another_process_wait_then_passes_it_on(tmp_path):
    path, marker = str(tmp_path / "k.lock"), tmp_path / "released"
    fd = _locks.acquire(path)
    assert fd is not None
    with subprocess.Popen([sys.executable, "-c", WAITER, path, str(marker)],
                          env=fresh_process_env(), stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)  # the waiter is in acquire() by now, or soon after
        marker.touch()
        _locks.release(path, fd)
        assert proc.stdout.readline().strip() == "after"
        proc.wait(timeout=120)
    assert proc.returncode == 0
    assert not os.path.exists(path)  # each holder removes the file when it is done


def test_the_wait_gives_up_and_compiles_without_the_lock(tmp_path):
    path = str(tmp_path / "k.lock")
    fd = _locks.acquire(path)
    start = time.monotonic()
    assert _locks.acquire(path, wait_s=0.2) is None  # another open file: flock refuses it
    assert time.monotonic() - start >= 0.2
    _locks.release(path, fd)
    again = _locks.acquire(path, wait_s=0)
    assert again is not None
    _locks.release(path, again)


def test_a_folder_where_no_file_can_be_made_takes_no_lock(tmp_path):
    assert _locks.acquire(str(tmp_path / "missing" / "k.lock"), wait_s=60) is None
    with _locks.held(None):
        pass


def test_at_most_one_holder_while_files_come_and_go(tmp_path):
    """Threads (separate open files, as separate processes would have) taking
    and releasing one lock path, each holder removing the file: never two
    holders at once, whichever file each waited on."""
    path = str(tmp_path / "k.lock")
    holders, most, errors = [0], [0], []
    guard = threading.Lock()

    def work():
        for _ in range(30):
            fd = _locks.acquire(path, wait_s=60)
            if fd is None:
                errors.append("no lock")
                return
            with guard:
                holders[0] += 1
                most[0] = max(most[0], holders[0])
            time.sleep(0.001)
            with guard:
                holders[0] -= 1
            _locks.release(path, fd)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert most[0] == 1


def test_the_lock_path_names_the_kernel_and_signature():
    from numba import njit

    from fastsoftmax._kernels._checks import _first_bad_distribution_row

    # Any-layout arrays: signatures nothing in the package compiles (its
    # arrays reach the kernels C-contiguous), so none is compiled already.
    idx = typeof(np.zeros(1, np.int64))
    sig64 = (types.Array(types.float64, 2, "A"), types.float64, idx)
    sig32 = (types.Array(types.float32, 2, "A"), types.float64, idx)
    folder = _first_bad_distribution_row._cache._cache_path
    paths = {name: _locks.lock_path(_first_bad_distribution_row, sig)
             for name, sig in (("64", sig64), ("32", sig32))}
    assert os.path.dirname(paths["64"]) == folder
    assert os.path.basename(paths["64"]).startswith("_checks._first_bad_distribution_row-")
    assert paths["64"] != paths["32"]
    assert _locks.lock_path(_first_bad_distribution_row, sig64) == paths["64"]

    @njit
    def elsewhere(x):  # not this package's: Numba's compile as it is
        return x

    assert _locks.lock_path(elsewhere, (typeof(1.0),)) is None
    elsewhere(1.0)
    from fastsoftmax._kernels._common import _row_max

    row = np.zeros(3)
    _row_max(row)
    assert _locks.lock_path(_row_max, (typeof(row),)) is None  # compiled already
