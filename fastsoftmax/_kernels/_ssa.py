"""Numba's SSA reconstruction, visiting only the blocks that name each variable.

Before typing, Numba rewrites a function's IR into SSA form
(``numba.core.ssa``): each variable assigned more than once (a loop
counter, an accumulator, a helper's local inlined twice) gets a fresh name
per assignment and, where paths join, a phi node. It does so one variable
at a time, and for each variable rebuilds every block of the function
twice, once to rename the assignments and once to repoint the uses: V
such variables over S statements cost 2 V S statement visits. The kernels'
chunk functions are large once their helpers are inlined (thousands of
statements, hundreds of such variables): the float32 rows kernel spent
about a sixth of its compile time there.

:func:`install` puts :func:`_run_ssa` in place of ``ssa._run_ssa`` for
this package's functions (the IR's first block is in this package's
source): the same algorithm, with Numba's own handlers, on the blocks that
define or use the variable only. Nothing else can change: a block that
does not name a variable is rebuilt unchanged by Numba's handlers (they
act on the statements that assign or use that variable), and renaming one
variable never adds or removes a mention of another, so which blocks name
which variable is found once, before the first. Every name, phi node and
statement comes out as Numba's own code makes it (``tests/test_ssa.py``
compares the two on the kernels' IR).

It relies on the internals of ``numba.core.ssa`` it calls (checked on
install); should a later Numba change them, nothing is installed and the
kernels compile as before, only more slowly. ``FASTSOFTMAX_NUMBA_AS_IS=ssa``
(or ``all``) leaves Numba as it is.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from numba.core import errors, ir, ssa
from numba.core.analysis import compute_cfg_from_blocks

from .._settings import left_to_numba

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + os.sep
# What _run_ssa calls in numba.core.ssa.
_NEEDED = ("_run_ssa", "_iterated_domfronts", "_find_defs_violators", "_CacheListVars",
           "_FreshVarHandler", "_FixSSAVars", "_compute_phi_locations", "_get_scope")
_numba_run_ssa = None


def _ours(blocks) -> bool:
    first = next(iter(blocks.values()))
    filename = getattr(first.loc, "filename", None) or ""
    return filename.startswith(_PACKAGE_DIR)


def _rewrite(block: ir.Block, states: dict, handler) -> None:
    """Pass each statement of ``block`` through ``handler``, as ``ssa._run_block_rewrite`` does."""
    states["block"] = block
    body = []
    for stmt in block.body:
        if isinstance(stmt, ir.Assign):
            new = handler.on_assign(states, stmt)
        else:
            new = handler.on_other(states, stmt)
        assert new is not None
        body.append(new)
    # The handlers look statements up in the block as it was: replaced only now.
    block.body = body


def _run_ssa(blocks):
    """``ssa._run_ssa`` with each variable's two rewrites confined to the blocks that name it."""
    if not blocks or not _ours(blocks):
        return _numba_run_ssa(blocks)
    cfg = compute_cfg_from_blocks(blocks)
    df_plus = ssa._iterated_domfronts(cfg)
    violators = ssa._find_defs_violators(blocks, cfg)
    if not violators:
        return blocks
    naming: dict[str, list[int]] = {name: [] for name in violators}
    for label, block in blocks.items():
        named = {var.name for stmt in block.body for var in stmt.list_vars()}
        for name in named.intersection(naming):
            naming[name].append(label)
    # New blocks, the statements shared until rewritten, as Numba's rewrite
    # makes them.
    new = {}
    for label, block in blocks.items():
        copy = ir.Block(scope=block.scope, loc=block.loc)
        copy.body = list(block.body)
        new[label] = copy
    scope = ssa._get_scope(new)
    cache_list_vars = ssa._CacheListVars()
    for name in violators:  # in Numba's order: the fresh names come out the same
        labels = naming[name]
        defmap: defaultdict = defaultdict(list)
        states = {"scope": scope, "varname": name, "defmap": defmap}
        handler = ssa._FreshVarHandler()
        for label in labels:
            states["label"] = label
            _rewrite(new[label], states, handler)
        phimap: defaultdict = defaultdict(list)
        states = {"scope": scope, "varname": name, "defmap": defmap, "phimap": phimap,
                  "cfg": cfg, "phi_locations": ssa._compute_phi_locations(df_plus, defmap)}
        handler = ssa._FixSSAVars(cache_list_vars)
        for label in labels:
            states["label"] = label
            _rewrite(new[label], states, handler)
        for label, philist in phimap.items():
            new[label].body = philist + new[label].body
    if compute_cfg_from_blocks(new) != cfg:
        raise errors.CompilerError("CFG mutated in SSA pass")
    return new


def _numba_as_expected() -> bool:
    return all(hasattr(ssa, name) for name in _NEEDED)


def install() -> bool:
    """Make Numba's SSA reconstruction visit only the blocks naming each variable (once).

    For this package's functions only. Returns whether it is installed:
    False where ``numba.core.ssa`` lacks what :func:`_run_ssa` calls, or
    where ``FASTSOFTMAX_NUMBA_AS_IS`` names ``ssa``. Raises ValueError,
    before anything changes, where that variable names anything unknown.
    """
    global _numba_run_ssa
    as_is = left_to_numba()
    if _numba_run_ssa is not None:
        return True
    if "ssa" in as_is or not _numba_as_expected():
        return False
    _numba_run_ssa = ssa._run_ssa
    ssa._run_ssa = _run_ssa
    return True


def installed() -> bool:
    """Return whether :func:`install` has put :func:`_run_ssa` in place."""
    return _numba_run_ssa is not None
