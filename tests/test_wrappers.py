"""The parallel loops' libraries of the kernels (``_kernels._wrappers``).

Checked on a prange kernel of the package compiled afresh in this process:
its loop's two wrapper libraries are linked only, every other library is
finalized, and the kernel computes what the cached one does; a loop body
calling a chunk function is compiled without it and hands it on for
linking; a user's own prange function is left to Numba; a wrapper library
asked for its machine code after all gets it. That the compiled kernels
are the same, bit for bit, cached and loaded again, is
``tests/test_numba_as_is.py``'s.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from numba import njit, prange
from numba.core import codegen
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


def test_a_loop_body_is_compiled_without_its_chunk_and_hands_it_on(finalized):
    # _totals as if written in a kernel module (its globals stay this module's).
    func = types.FunctionType(_totals.__code__, _totals.__globals__, "_totals")
    func.__module__ = "fastsoftmax._kernels._common"
    A = np.arange(20.0).reshape(4, 5)
    out = np.zeros(4)
    njit(parallel=True)(func)(A, out)
    np.testing.assert_array_equal(out, A.sum(axis=1))
    body = next(lib for name, _, lib in finalized if name.startswith("__numba_parfor_gufunc"))
    chunk = next(lib for lib in body._linking_libraries if lib.name == "_row_total")
    chunk_names = {f.name for f in chunk._final_module.functions if not f.is_declaration
                   and "_row_total" in f.name}
    assert chunk_names
    own = {f.name: bool(f.is_declaration) for f in body._final_module.functions}
    shared = {f.name: bool(f.is_declaration)
              for f in body._get_module_for_linking().functions}
    called = chunk_names & set(own)
    assert called and all(own[name] for name in called)  # the body calls the chunk where it is ...
    assert any(shared.get(name) is False for name in chunk_names)  # ... its kernel gets it
    linked = sorted(name.split(" object")[0] for name, only, _ in finalized if only)
    assert linked == ["<numba.np.ufunc.wrappers._GufuncWrapper", "parallelgufuncwrapper"]


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
