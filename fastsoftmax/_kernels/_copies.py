"""Numba's copy propagation, comparing its rounds without deep copies.

Numba's parallel passes simplify a function's IR several times
(``ir_utils.simplify``, and each parallel loop's body), and each time
find which copies ``a = b`` hold where by a fixed-point iteration over
the blocks (``ir_utils.copy_propagate``). To tell whether a round changed
anything it keeps the previous round's result as ``copy.deepcopy`` of the
whole map: Python-level recursion into every (name, name) pair of every
block, each round. On the kernels' large inlined IR that was about a
sixth of the prediction kernel's compile under a profiler (BENCHMARKS.md,
"Thirty-eighth session").

The pairs are tuples of two strings, immutable, so a copy of each set is
the same snapshot as a deep copy. :func:`install` puts
:func:`copy_propagate` in place of Numba's for this package's functions
(the IR's first block is in this package's source): the same iteration,
the same result, with set copies. It relies on the Numba functions it
calls (checked on install); should a later Numba change them, nothing is
installed. ``FASTSOFTMAX_NUMBA_AS_IS=copies`` (or ``all``) leaves Numba
as it is.
"""

from __future__ import annotations

from numba.core import ir_utils
from numba.core.analysis import compute_cfg_from_blocks
from numba.parfors import parfor

from .._settings import left_to_numba
from ._ssa import _ours

_numba_copy_propagate = None


def copy_propagate(blocks, typemap):
    """``ir_utils.copy_propagate``, each round's snapshot a copy of each set, not a deep copy."""
    if not blocks or not _ours(blocks):
        return _numba_copy_propagate(blocks, typemap)
    cfg = compute_cfg_from_blocks(blocks)
    entry = cfg.entry_point()
    gen_copies, _, kill_copies, in_copies, out_copies = ir_utils.init_copy_propagate_data(
        blocks, entry, typemap)
    old_point = None
    new_point = {label: set(pairs) for label, pairs in out_copies.items()}
    while old_point != new_point:
        for label in blocks.keys():
            if label == entry:
                continue
            predecs = [i for i, _d in cfg.predecessors(label)]
            # in_b = intersect(predec(B))
            in_copies[label] = out_copies[predecs[0]].copy()
            for p in predecs:
                in_copies[label] &= out_copies[p]
            # out_b = gen_b | (in_b - kill_b)
            out_copies[label] = gen_copies[label] | (in_copies[label] - kill_copies[label])
        old_point = new_point
        new_point = {label: set(pairs) for label, pairs in out_copies.items()}
    return in_copies, out_copies


def _numba_as_expected() -> bool:
    return (callable(getattr(ir_utils, "copy_propagate", None))
            and callable(getattr(ir_utils, "init_copy_propagate_data", None))
            and getattr(parfor, "copy_propagate", None) is ir_utils.copy_propagate)


def install() -> bool:
    """Put :func:`copy_propagate` in place of Numba's for this package's functions (once).

    Returns whether it is installed: False where Numba's copy propagation
    is not where this module expects it, or where ``FASTSOFTMAX_NUMBA_AS_IS``
    names ``copies``. Raises ValueError, before anything changes, where
    that variable names anything unknown.
    """
    global _numba_copy_propagate
    as_is = left_to_numba()
    if _numba_copy_propagate is not None:
        return True
    if "copies" in as_is or not _numba_as_expected():
        return False
    _numba_copy_propagate = ir_utils.copy_propagate
    ir_utils.copy_propagate = copy_propagate
    parfor.copy_propagate = copy_propagate
    return True


def installed() -> bool:
    """Return whether :func:`install` has put :func:`copy_propagate` in place."""
    return _numba_copy_propagate is not None
