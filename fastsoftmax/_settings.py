"""Environment settings read before Numba is imported, and the error for a bad one."""

from __future__ import annotations

import os

# Adjustments this package makes to Numba's compiler for its own kernels,
# each leaving the compiled code as Numba would make it, only sooner
# (``_kernels._inline``, ``_ssa``, ``_copies``, ``_wrappers``, ``_locks``);
# the variable names those to leave as Numba has them.
NUMBA_AS_IS = "FASTSOFTMAX_NUMBA_AS_IS"
ADJUSTMENTS = ("inline", "ssa", "copies", "wrappers", "locks")


class SettingError(ValueError):
    """An environment variable of fastsoftmax holds a value it does not take."""


def left_to_numba() -> frozenset[str]:
    """Return the adjustments ``FASTSOFTMAX_NUMBA_AS_IS`` leaves as Numba has them.

    A comma-separated list of ``inline``, ``ssa``, ``copies``, ``wrappers``,
    ``locks``, or ``all``; unset or empty: none. Raises :class:`SettingError` (a ValueError) naming
    the variable and the entry for anything else.
    """
    value = os.environ.get(NUMBA_AS_IS, "")
    names = {part.strip().lower() for part in value.split(",")} - {""}
    if "all" in names:
        names = (names - {"all"}) | set(ADJUSTMENTS)
    unknown = sorted(names - set(ADJUSTMENTS))
    if unknown:
        raise SettingError(f"{NUMBA_AS_IS}={value!r}: {', '.join(map(repr, unknown))} is not "
                           f"one of {', '.join(ADJUSTMENTS)} or all (the adjustments to Numba's "
                           "compiler to leave as Numba has them)")
    return frozenset(names)
