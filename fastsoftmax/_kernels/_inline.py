"""Numba's inliner: this package's helpers derived once per function, copied with one scope.

The kernels inline their helpers (``inline="always"``), and much of a
kernel's compile time went to Numba copying the helpers' IR. Numba inlines
a function by deep-copying its IR (``InlineWorker.inline_ir``, twice per
call site), one block at a time, each block with a ``copy.deepcopy`` of its
own. Every block refers to the function's one scope, which holds every
variable of the function; so each block's copy took a copy of the whole
scope with it: B blocks and V variables cost B x V variable copies per IR
copy instead of V. The inliner then asserts that the copy has one scope,
by comparing the B copies of it (equal, not identical) entry by entry.
``_fused._block_error`` has 113 blocks and 1,243 variables once its own
helpers are inlined into it.

:func:`install` makes the block copies of one IR share one memo, so the
scope is copied once and every block's copy refers to that one copy, as
the original blocks refer to one scope. The copy is otherwise the same:
what the inliner does with it next (rename the variables in that scope,
point the blocks at the caller's scope) sees the same names and the same
statements. Only for helpers defined in this package (the module of the
function being inlined): other code's compiles are Numba's own.

Numba also ran a helper's whole untyped pipeline (its bytecode to IR, and
its own helpers inlined into it) once per call site: a kernel calling one
helper from four places derived its IR four times. :func:`install` has
each inliner (one per function compiled) derive a helper of this package
once and hand the same IR to every call site; ``inline_ir`` copies the IR
it is given before changing anything, and the run depends only on the
helper and the inliner's own settings, so each site inlines what it did.

It relies on two internals of ``numba.core.inline_closurecall``: that it
copies blocks through its module attribute ``copy``, and the line of
``inline_ir`` that does so (checked in its source). Should a later Numba
change either, nothing is installed and the kernels compile as before,
only more slowly. ``FASTSOFTMAX_NUMBA_AS_IS=inline`` (or ``all``) leaves
Numba as it is (to compare, or should this ever be in doubt).
"""

from __future__ import annotations

import copy
import inspect

from numba.core import inline_closurecall, ir

from .._settings import left_to_numba

# The statement of inline_ir's copy_ir this module replaces the effect of.
_NUMBA_LINE = "copy.deepcopy(the_ir.blocks[block_label])"
_PACKAGE = __name__.split(".")[0] + "."

# One dict per inline_ir call of a helper of this package, mapping the id
# of a scope to the memo its blocks' copies share. Numba compiles under one
# lock, and inline_ir does not nest, but a list keeps any nesting correct.
_memos: list[dict[int, dict]] = []
_installed = False


class _CopyModule:
    """Stands in for the ``copy`` module inside ``numba.core.inline_closurecall``."""

    def __getattr__(self, name: str):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(x, memo=None):
        if memo is None and _memos and isinstance(x, ir.Block):
            # One memo per original scope: a second IR copied in the same
            # call (inline_ir copies its own copy) gets a memo of its own.
            memo = _memos[-1].setdefault(id(x.scope), {})
        return copy.deepcopy(x, memo)


def _wrap(inline_ir):
    def shared_scope_inline_ir(self, caller_ir, block, i, callee_ir, *args, **kwargs):
        ours = callee_ir.func_id.modname.startswith(_PACKAGE)
        if ours:
            _memos.append({})
        try:
            return inline_ir(self, caller_ir, block, i, callee_ir, *args, **kwargs)
        finally:
            if ours:
                _memos.pop()

    shared_scope_inline_ir.__wrapped__ = inline_ir
    return shared_scope_inline_ir


def _once_per_worker(run_untyped_passes):
    def run_untyped_passes_once(self, func, enable_ssa=False):
        if enable_ssa or not getattr(func, "__module__", "").startswith(_PACKAGE):
            return run_untyped_passes(self, func, enable_ssa)
        done = self.__dict__.setdefault("_fastsoftmax_untyped", {})
        if func not in done:
            done[func] = run_untyped_passes(self, func, enable_ssa)
        else:
            self.flags.enable_ssa = enable_ssa  # as the run itself leaves it
        return done[func]

    run_untyped_passes_once.__wrapped__ = run_untyped_passes
    return run_untyped_passes_once


def _numba_copies_blocks_as_expected() -> bool:
    worker = getattr(inline_closurecall, "InlineWorker", None)
    module = getattr(inline_closurecall, "copy", None)
    if worker is None or not (module is copy or isinstance(module, _CopyModule)):
        return False
    method = getattr(worker.inline_ir, "__wrapped__", worker.inline_ir)
    try:
        source = inspect.getsource(method)
    except (OSError, TypeError):  # no source shipped: nothing to check against
        return False
    return _NUMBA_LINE in source


def install() -> bool:
    """Make Numba's inliner copy this package's helpers with one scope per copy (once).

    Returns whether it is installed: False where Numba's inliner is not the
    code described in the module docstring, or where
    ``FASTSOFTMAX_NUMBA_AS_IS`` names ``inline``. Raises ValueError, before
    anything changes, where that variable names anything unknown.
    """
    global _installed
    as_is = left_to_numba()
    if _installed:
        return True
    if "inline" in as_is:
        return False
    if not _numba_copies_blocks_as_expected():
        return False
    worker = inline_closurecall.InlineWorker
    worker.inline_ir = _wrap(worker.inline_ir)  # type: ignore[method-assign]
    worker.run_untyped_passes = _once_per_worker(  # type: ignore[method-assign]
        worker.run_untyped_passes)
    inline_closurecall.copy = _CopyModule()  # type: ignore[assignment]
    _installed = True
    return True


def installed() -> bool:
    """Return whether :func:`install` has put the shared-scope copies in place."""
    return _installed
