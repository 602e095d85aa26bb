"""Numba's inliner with one scope per IR copy (``fastsoftmax._kernels._inline``).

The change must leave the compiled kernels as they were: the same IR, only
copied with less work. Checked here on the copies themselves (one shared
scope, the same statements) and that only this package's helpers get
them; that an inliner derives a helper of this package once for all its
call sites, the same IR each time, and anything else's every time; kernels
compiled with and without it give the same bits
(``tests/test_numba_as_is.py``).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from numba import njit
from numba.core import inline_closurecall
from numba.core.compiler import run_frontend

from fastsoftmax._kernels import _common, _inline


def test_installed_with_this_numba():
    # The Numba the package is tested with has the inliner _inline expects;
    # should a new one not, this fails here rather than the kernels
    # silently compiling more slowly.
    assert _inline._numba_copies_blocks_as_expected()
    assert _inline.installed()
    assert isinstance(inline_closurecall.copy, _inline._CopyModule)


def test_blocks_copied_in_one_call_share_one_copy_of_the_scope():
    # _exp_loop is one of the helpers the kernels inline: several blocks, one scope.
    func_ir = run_frontend(_common._exp_loop.py_func)
    blocks = func_ir.blocks
    assert len(blocks) > 2
    scope = next(iter(blocks.values())).scope
    assert all(b.scope is scope for b in blocks.values())
    shim = inline_closurecall.copy
    _inline._memos.append({})
    try:
        copies = {label: shim.deepcopy(b) for label, b in blocks.items()}
        again = {label: shim.deepcopy(b) for label, b in copies.items()}
    finally:
        _inline._memos.pop()
    for made in (copies, again):
        scopes = {id(b.scope) for b in made.values()}
        assert len(scopes) == 1  # one copy of the scope for all the blocks ...
    new_scope = next(iter(copies.values())).scope
    assert new_scope is not scope  # ... a copy, not the original
    # A copy of the copy has its own scope, not the first copy's memo entries.
    assert next(iter(again.values())).scope is not new_scope
    assert set(new_scope.localvars._con) == set(scope.localvars._con)
    for label, b in blocks.items():
        c = copies[label]
        assert c is not b and len(c.body) == len(b.body)
        assert [str(s) for s in c.body] == [str(s) for s in b.body]
        for stmt in c.body:  # every variable of the copy is in the copied scope
            assert all(var.scope is new_scope for var in stmt.list_vars())
    # Outside an inline_ir call of this package's helpers: Numba's own copies.
    plain = {label: shim.deepcopy(b) for label, b in blocks.items()}
    assert len({id(b.scope) for b in plain.values()}) == len(plain)


class _Caller:
    """Stands in for Numba's InlineWorker: records whether a memo was active."""

    def __init__(self):
        self.active = []

    def inline_ir(self, caller_ir, block, i, callee_ir, *args, **kwargs):
        self.active.append(len(_inline._memos))
        return "result"


class _FuncId:
    def __init__(self, modname):
        self.modname = modname


class _IR:
    def __init__(self, modname):
        self.func_id = _FuncId(modname)


@pytest.mark.parametrize("modname, shared", [
    ("fastsoftmax._kernels._fused", True),
    ("numba.np.arraymath", False),
    ("fastsoftmaxlike", False),
    ("user_module", False),
])
def test_only_this_packages_helpers_get_shared_scopes(modname, shared):
    caller = _Caller()
    wrapped = _inline._wrap(_Caller.inline_ir)
    before = len(_inline._memos)
    assert wrapped(caller, None, None, 0, _IR(modname), (), arg_typs=None) == "result"
    assert caller.active == [before + 1 if shared else before]
    assert len(_inline._memos) == before  # popped again


def test_memo_popped_when_inlining_raises():
    def failing(self, caller_ir, block, i, callee_ir, *args, **kwargs):
        raise RuntimeError("typing failed")

    before = len(_inline._memos)
    with pytest.raises(RuntimeError, match="typing failed"):
        _inline._wrap(failing)(None, None, None, 0, _IR("fastsoftmax._kernels._sgd"))
    assert len(_inline._memos) == before


def test_copy_module_forwards_everything_else():
    shim = _inline._CopyModule()
    assert shim.copy is copy.copy and shim.Error is copy.Error
    x = {"a": [1, 2]}
    y = shim.deepcopy(x)
    assert y == x and y["a"] is not x["a"]


def test_an_inliner_derives_a_helper_of_this_package_once(monkeypatch):
    runs = []
    numba_run = inline_closurecall.InlineWorker.run_untyped_passes.__wrapped__

    def counting(self, func, enable_ssa=False):
        runs.append(func.__name__)
        return numba_run(self, func, enable_ssa)

    monkeypatch.setattr(inline_closurecall.InlineWorker, "run_untyped_passes",
                        _inline._once_per_worker(counting))

    @njit(inline="always")
    def twice(x):
        return 2.0 * x

    def two_maxima(z):
        return _common._row_max(z)[0] + _common._row_max(z[1:])[0]

    z = np.array([1.0, 3.0, 2.0])
    assert njit(two_maxima)(z) == 6.0
    assert runs.count("_row_max") == 1  # one derivation for both call sites
    runs.clear()
    assert njit(lambda z: twice(z[0]) + twice(z[1]))(z) == 8.0
    assert runs.count("twice") == 2  # a helper from elsewhere: at each site, as Numba does
