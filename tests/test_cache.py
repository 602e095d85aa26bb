"""Numba's on-disk cache (``cache=True`` on every kernel) and the absence of
global side effects at import.

Each test runs fresh Python processes, so that nothing compiled or loaded by
the test session itself can hide a problem: the first process, pointed at an
empty ``NUMBA_CACHE_DIR``, compiles and writes the kernels it uses; a second
process with the same directory must load every one of them from disk (cache
hits, no misses).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fastsoftmax

REPO = Path(fastsoftmax.__file__).resolve().parent.parent

# Calls a typical user makes; prints, per kernel dispatcher that did anything,
# the number of cache hits and misses in this process.
USE_KERNELS = r"""
import json
import numpy as np
import numba
from numba.core.registry import CPUDispatcher
import fastsoftmax as fs
from fastsoftmax import _kernels
from fastsoftmax._kernels import _checks, _fused, _rowwise

rng = np.random.default_rng(0)
X = rng.standard_normal((50, 4))
y = rng.integers(0, 3, size=50)
for _ in range(2):
    fs.loss_and_grad(X, y, np.zeros((4, 3)), np.zeros(3))
    fs.softmax(X)
    fs.logsumexp(X)

stats = {}
for module in (_checks, _fused, _rowwise):
    for name, obj in vars(module).items():
        if isinstance(obj, CPUDispatcher):
            hits = sum(obj.stats.cache_hits.values())
            misses = sum(obj.stats.cache_misses.values())
            if hits or misses:
                stats[f"{module.__name__}.{name}"] = [hits, misses]
print(json.dumps(stats))
"""

# No global side effects: importing fastsoftmax and calling it leaves Numba's
# thread count and threading-layer setting as they were.
NO_SIDE_EFFECTS = r"""
import json
import numba
before = [numba.get_num_threads(), numba.config.THREADING_LAYER,
          numba.config.NUMBA_NUM_THREADS]
import fastsoftmax as fs
after_import = [numba.get_num_threads(), numba.config.THREADING_LAYER,
                numba.config.NUMBA_NUM_THREADS]
import numpy as np
fs.softmax(np.zeros((3, 2)), n_threads=1)
fs.loss_and_grad(np.zeros((3, 2)), [0, 1, 0], np.zeros((2, 2)), n_threads=1)
after_calls = [numba.get_num_threads(), numba.config.THREADING_LAYER,
               numba.config.NUMBA_NUM_THREADS]
print(json.dumps([before, after_import, after_calls]))
"""


def run(code: str, cache_dir: Path, timeout: float = 240, root: Path = REPO) -> str:
    """Run ``code`` in a fresh process importing fastsoftmax from ``root``; its last line."""
    env = dict(os.environ)
    env["NUMBA_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("NUMBA_DISABLE_JIT", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=cache_dir)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    """One empty cache directory for this module: the side-effect test after
    the cache test finds it warm and does not compile again."""
    return tmp_path_factory.mktemp("numba-cache")


def kernel_sources_stamp() -> list[tuple[str, int, int]]:
    """A cache entry is stale once any kernel file changes (``_kernels._cache``);
    this stamps every kernel module by mtime and size."""
    files = sorted((REPO / "fastsoftmax" / "_kernels").glob("*.py"))
    return [(f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files]


@pytest.mark.slow
def test_second_process_loads_every_kernel_from_disk(cache_dir):
    # If a kernel source is edited between the two processes (a developer
    # saving a file during the run), the misses would be correct behaviour:
    # start again, once, in a fresh directory.
    for attempt in range(2):
        cache = cache_dir / f"attempt{attempt}"
        cache.mkdir()
        stamp = kernel_sources_stamp()
        first = json.loads(run(USE_KERNELS, cache))
        second = json.loads(run(USE_KERNELS, cache))
        if kernel_sources_stamp() == stamp:
            break
    # The first process compiled: kernels were used, none came from the empty cache.
    assert first, "no kernel dispatcher reported any compilation"
    # at least one fused loss/gradient kernel and one softmax kernel among them
    assert any(name.startswith("fastsoftmax._kernels._fused.") for name in first), first
    assert any(name.startswith("fastsoftmax._kernels._rowwise.") for name in first), first
    assert all(hits == 0 and misses > 0 for hits, misses in first.values()), first
    assert list(cache.rglob("*.nbi")), "nothing was written to NUMBA_CACHE_DIR"
    # The second loaded every kernel it called from disk and compiled none. A
    # chunk function that the first process compiled while compiling the
    # parallel kernel that calls it comes back inside that kernel's cached
    # code, not through its own dispatcher, so the second set may be smaller.
    assert set(second) <= set(first), set(second) - set(first)
    assert any(name.startswith("fastsoftmax._kernels._fused.") for name in second), second
    assert any(name.startswith("fastsoftmax._kernels._rowwise.") for name in second), second
    assert all(hits > 0 and misses == 0 for hits, misses in second.values()), second


@pytest.mark.slow
def test_import_and_calls_have_no_global_side_effects(cache_dir):
    # attempt0 is warm when the cache test ran first
    warm = cache_dir / "attempt0"
    warm.mkdir(exist_ok=True)
    before, after_import, after_calls = json.loads(run(NO_SIDE_EFFECTS, warm))
    assert after_import == before
    assert after_calls == before


# One small kernel (_vector._dot_scaled, which inlines _common._chunk), and
# whether this process compiled it or loaded it from the cache.
DOT_SCALED = r"""
import numpy as np
from fastsoftmax._kernels._vector import _dot_scaled
parts = np.zeros((2, 2))
_dot_scaled(np.ones(10), np.ones(10), 2.0, parts)
assert parts[:, 0].sum() == 20.0
stats = _dot_scaled.stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


def test_every_kernel_is_cached_under_the_digest_of_all_kernel_files():
    import importlib

    from numba.core.registry import CPUDispatcher

    from fastsoftmax._kernels import _cache

    modules = [importlib.import_module(f"fastsoftmax._kernels.{path.stem}")
               for path in sorted(_cache._DIR.glob("_*.py")) if path.stem != "__init__"]
    seen = 0
    for module in modules:
        for obj in vars(module).values():
            if isinstance(obj, CPUDispatcher) and obj._cache is not None \
                    and type(obj._cache).__name__ != "NullCache":
                locator = obj._cache._impl.locator
                assert isinstance(locator, _cache.KernelsLocator), (module.__name__, obj)
                assert locator.get_source_stamp().endswith(_cache.kernels_digest())
                seen += 1
    assert seen > 20, seen


@pytest.mark.slow
def test_an_edit_to_another_kernel_file_recompiles_a_kernel(tmp_path):
    # Numba alone keys a function's cache by its own file: an edit to a
    # helper it inlines from another file (_common.py here) went unseen.
    root = tmp_path / "src"
    shutil.copytree(REPO / "fastsoftmax", root / "fastsoftmax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    assert run(DOT_SCALED, cache, root=root) == "0 1"  # compiled
    assert run(DOT_SCALED, cache, root=root) == "1 0"  # loaded
    common = root / "fastsoftmax" / "_kernels" / "_common.py"
    common.write_text(common.read_text() + "\n# an edit\n")
    assert run(DOT_SCALED, cache, root=root) == "0 1"  # compiled again
    assert run(DOT_SCALED, cache, root=root) == "1 0"
