"""The parallel loops' libraries of the kernels (``_kernels._wrappers``).

Checked on a prange kernel of the package compiled afresh in this process:
its loop's two wrapper libraries are linked only, every other library is
finalized, and the kernel computes what the cached one does; a loop body
calling a chunk function is compiled without it, and so is its kernel,
whose cache entry carries the chunk's object, loaded only where the JIT
lacks it (in fresh processes too), and never where part of it, or
anything the kernel calls, would still be missing; a user's own prange
function is left to Numba; a wrapper library asked for its machine code
after all gets it. That the compiled kernels are the same, bit for bit,
cached and loaded again, is ``tests/test_numba_as_is.py``'s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
from _helpers import fresh_process_env
from numba import njit, prange
from numba.core import caching, codegen
from numba.parfors import parfor_lowering

from fastsoftmax._kernels import _checks, _wrappers

STRICT = {"parallel": True, "error_model": "numpy"}  # _checks' options, uncached


@pytest.fixture
def finalized(monkeypatch):
    """Record (library name, linked only?) of every library finalized from now on."""
    seen = []
    inner = codegen.CPUCodeLibrary.finalize

    def recording(self):
        inner(self)
        seen.append((self.name, getattr(self, "_fastsoftmax_linked_only", False), self))

    monkeypatch.setattr(codegen.CPUCodeLibrary, "finalize", recording)
    return seen


def test_installed_with_this_numba():
    # Should a new Numba lack what _wrappers relies on, this fails here
    # rather than the kernels compiling more slowly.
    assert _wrappers._numba_as_expected()
    assert _wrappers.installed()
    assert parfor_lowering._lower_parfor_parallel_std is _wrappers._lower_parfor
    assert codegen.CPUCodeLibrary.finalize is _wrappers._finalize


def test_a_package_kernel_links_its_loop_wrappers_only(finalized):
    A = np.arange(60.0).reshape(12, 5)
    A[7, 2] = np.nan
    bad, expected = np.empty(3, np.int64), np.empty(3, np.int64)
    _checks._first_nonfinite_row(A, expected)  # the cached kernel (compiled here on a new cache)
    finalized.clear()
    njit(**STRICT)(_checks._first_nonfinite_row.py_func)(A, bad)
    np.testing.assert_array_equal(bad, expected)
    assert bad.tolist() == [-1, 7, -1]
    linked = sorted(name.split(" object")[0] for name, only, _ in finalized if only)
    assert linked == ["<numba.np.ufunc.wrappers._GufuncWrapper", "parallelgufuncwrapper"]
    names = [name for name, _, _ in finalized]
    assert any(name.startswith("__numba_parfor_gufunc") for name in names)
    assert "_first_nonfinite_row" in names  # the kernel: finalized (and compiled) as before


@njit
def _row_total(c, A, out):
    """A chunk function of the kernels' kind: its own library, called from a loop."""
    s = 0.0
    for j in range(A.shape[1]):
        s += A[c, j]
    out[c] = s


def _totals(A, out):
    for c in prange(A.shape[0]):
        _row_total(c, A, out)


def _compile_totals(finalized):
    """Compile _totals as if written in a kernel module; return (kernel, body, chunk) libraries."""
    func = types.FunctionType(_totals.__code__, _totals.__globals__, "_totals")
    func.__module__ = "fastsoftmax._kernels._common"  # (its globals stay this module's)
    A = np.arange(20.0).reshape(4, 5)
    out = np.zeros(4)
    kernel = njit(parallel=True)(func)
    kernel(A, out)
    np.testing.assert_array_equal(out, A.sum(axis=1))
    body = next(lib for name, _, lib in finalized if name.startswith("__numba_parfor_gufunc"))
    chunk = next(lib for lib in body._linking_libraries if lib.name == "_row_total")
    return next(iter(kernel.overloads.values())).library, body, chunk


def _defined(module) -> dict[str, bool]:
    return {f.name: not f.is_declaration for f in module.functions}


def test_a_loop_body_and_its_kernel_are_compiled_without_the_chunk(finalized):
    kernel, body, chunk = _compile_totals(finalized)
    chunk_names = {name for name, defined in _defined(chunk._final_module).items()
                   if defined and "_row_total" in name}
    assert chunk_names
    own = _defined(body._final_module)
    called = chunk_names & set(own)
    assert called and not any(own[name] for name in called)  # the body calls it where it is
    for library in (body, kernel):  # and so does the kernel, which takes it on to cache
        linked = _defined(library._get_module_for_linking())
        assert called <= set(linked) and not any(linked[name] for name in called)
    assert body._fastsoftmax_calls == kernel._fastsoftmax_calls == [chunk]
    linked_only = sorted(name.split(" object")[0] for name, only, _ in finalized if only)
    assert linked_only == ["<numba.np.ufunc.wrappers._GufuncWrapper", "parallelgufuncwrapper"]


def test_a_kernels_cache_entry_carries_its_chunk_and_loads_it_only_where_missing(finalized):
    kernel, _, chunk = _compile_totals(finalized)
    name, kind, (own, carried) = kernel.serialize_using_object_code()
    assert kind == _wrappers._KIND and own[1] == "object"
    assert [state[0] for state, _ in carried] == ["_row_total"]
    names = carried[0][1]
    assert names and all("_row_total" in symbol for symbol in names)
    generator = kernel.codegen
    # The chunk is in the JIT already: only the kernel's own object is loaded.
    loaded = generator.unserialize_library((name, kind, (own, carried)))
    assert loaded._fastsoftmax_loaded == []
    # Part of what it calls in the JIT, part not: nothing of it loaded beside it.
    partial = [(carried[0][0], [*names, "fastsoftmax_not_a_symbol"])]
    with pytest.raises(_wrappers.Unlinkable, match="part of what it calls in _row_total"):
        generator.unserialize_library((name, kind, (own, partial)))
    # Loaded, and still missing something: the entry is not used.
    absent = [(carried[0][0], ["fastsoftmax_not_a_symbol"])]
    kept = len(_wrappers._carried)
    with pytest.raises(_wrappers.Unlinkable, match="fastsoftmax_not_a_symbol is not defined"):
        generator.unserialize_library((name, kind, (own, absent)))
    # (what it loaded stays loaded: Numba's record of the JIT's symbols keeps its names)
    assert [lib.name for lib in _wrappers._carried[kept:]] == ["_row_total"]


def test_an_unlinkable_cache_entry_is_a_cache_miss(monkeypatch):
    def unlinkable(self, sig, target_context):
        raise _wrappers.Unlinkable("a kernel calling what the JIT lacks")

    assert caching.Cache.load_overload is _wrappers._load_overload
    monkeypatch.setitem(_wrappers._reader, "load", unlinkable)
    assert caching.Cache.load_overload(object(), (), None) is None


# A chunk and a prange kernel calling it, both cached, in a module named as
# one of the package's (so that its loop's libraries are this module's kind).
PROBE = """
import numpy as np
from numba import njit, prange

@njit(cache=True)
def row_total(c, A, out):
    s = 0.0
    for j in range(A.shape[1]):
        s += A[c, j] * (j + 1)
    out[c] = s

@njit(parallel=True, cache=True)
def totals(A, out):
    for c in prange(A.shape[0]):
        row_total(np.int64(c), A, out)
"""

RUN_PROBE = """
import importlib.util, json, sys
import numpy as np
import fastsoftmax._kernels  # (which installs the adjustments)
spec = importlib.util.spec_from_file_location("fastsoftmax._probe", sys.argv[1])
probe = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = probe
spec.loader.exec_module(probe)
A = np.arange(35.0).reshape(7, 5)
out = np.zeros(7)
if sys.argv[2] == "chunk first":
    probe.row_total(np.int64(0), A, out)
probe.totals(A, out)
library = next(iter(probe.totals.overloads.values())).library
print(json.dumps({"out": out.tolist(), "hits": sum(probe.totals.stats.cache_hits.values()),
                  "carried": [lib.name for lib in getattr(library, "_fastsoftmax_loaded", [])],
                  "calls": [lib.name for lib in getattr(library, "_fastsoftmax_calls", [])]}))
"""


@pytest.mark.slow
def test_a_kernel_loaded_in_fresh_processes_calls_its_chunk(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(textwrap.dedent(PROBE))
    env = fresh_process_env(NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    runs = {}
    for how in ("compiled", "loaded", "chunk first"):
        proc = subprocess.run([sys.executable, "-c", RUN_PROBE, str(source), how], env=env,
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[how] = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = (np.arange(35.0).reshape(7, 5) @ np.arange(1.0, 6.0)).tolist()
    assert all(run["out"] == expected for run in runs.values())
    assert runs["compiled"]["hits"] == 0 and runs["compiled"]["calls"] == ["row_total"]
    # A fresh process loads the chunk's object from the kernel's entry ...
    assert runs["loaded"]["hits"] == 1 and runs["loaded"]["carried"] == ["row_total"]
    # ... unless the JIT has it already (loaded from the chunk's own entry).
    assert runs["chunk first"]["hits"] == 1 and runs["chunk first"]["carried"] == []


def test_a_users_prange_function_is_left_to_numba(finalized):
    @njit(parallel=True)
    def column_sums(A, out):
        for j in prange(A.shape[1]):
            s = 0.0
            for i in range(A.shape[0]):
                s += A[i, j]
            out[j] = s

    A = np.arange(12.0).reshape(3, 4)
    out = np.empty(4)
    column_sums(A, out)
    np.testing.assert_allclose(out, A.sum(axis=0))
    assert any(name == "parallelgufuncwrapper" for name, _, _ in finalized)
    assert not any(only for _, only, _ in finalized)


def test_a_linked_only_library_asked_for_its_code_gets_it(finalized):
    fresh = njit(**STRICT)(_checks._first_nonfinite_row.py_func)
    fresh(np.zeros((4, 3), np.float32), np.empty(2, np.int64))
    library = next(lib for name, only, lib in finalized if only and name == "parallelgufuncwrapper")
    defined = [fn.name for fn in library._final_module.functions if not fn.is_declaration]
    kernel = next(name for name in defined if name.startswith(".kernel."))
    assert library.get_pointer_to_function(kernel) != 0
    assert library._fastsoftmax_linked_only is False
