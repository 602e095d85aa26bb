"""Environment settings: those read before Numba is imported, a cheap read, bad values."""

from __future__ import annotations

import os
import sys

# Adjustments this package makes to Numba's compiler for its own kernels,
# each leaving the compiled code as Numba would make it, only sooner
# (``_kernels._inline``, ``_ssa``, ``_copies``, ``_wrappers``, ``_locks``);
# the variable names those to leave as Numba has them.
NUMBA_AS_IS = "FASTSOFTMAX_NUMBA_AS_IS"
ADJUSTMENTS = ("inline", "ssa", "copies", "wrappers", "locks")


# os.environ's own dict of encoded names and values, where it keeps one (POSIX).
_ENVIRON = os.environ
_ENVIRON_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
if not isinstance(_ENVIRON_DATA, dict):
    _ENVIRON_DATA = None


def env_value(name: str) -> str:
    """Return ``os.environ.get(name, "")``.

    On POSIX a lookup in the mapping's own dict of encoded entries: one C
    call, where the mapping's ``get`` runs four Python frames (alone after
    an idle pause, 19 microseconds against 52; every kernel call reads the
    strategy and BLAS overrides; BENCHMARKS.md, "Forty-eighth session").
    """
    data = _ENVIRON_DATA
    if data is None or os.environ is not _ENVIRON:
        return os.environ.get(name, "")
    # Names and values encoded as os.environ encodes them.
    value = data.get(name.encode(_FS_ENCODING, "surrogateescape"))
    return "" if value is None else value.decode(_FS_ENCODING, "surrogateescape")


_FS_ENCODING = sys.getfilesystemencoding()


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
