"""Numba's on-disk cache of the kernels, made stale by a change to any kernel file.

Numba keys a cached function by its own source file only (a hash of that
file since Numba 0.68, its time stamp before). The kernels inline helpers
and read constants from the other files of this package: a change to one
of those alone (a block size in ``_common.py``, a tile in ``_micro.py``)
left the callers' cached machine code as it was, and every later process
ran the old kernel without a sign of it -- in development, and for a user
whose new version of the package lands over an old one's cache.

:class:`KernelsLocator` stands in front of Numba's own locators for the
functions of this package: the cache stays where Numba would keep it
(beside the source, ``$NUMBA_CACHE_DIR`` or the user-wide directory), but
its freshness stamp is a digest of every kernel file
(:func:`kernels_digest`), so an edit to any of them recompiles all the
kernels on their next use. Installed by the package's ``__init__`` before
any kernel is defined (Numba picks a function's locator when it is
decorated). Should a later Numba rename the internals it relies on, the
kernels cache as Numba alone would.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from numba.core import caching

_DIR = Path(__file__).resolve().parent
_digest: str | None = None


def kernels_digest() -> str:
    """Return a digest (hex) of the names and contents of every kernel file.

    Computed once per process: the files do not change under a running one.
    """
    global _digest
    if _digest is None:
        digest = hashlib.sha256()
        for path in sorted(_DIR.glob("*.py")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
        _digest = digest.hexdigest()
    return _digest


class KernelsLocator(caching._CacheLocator):
    """Numba's locator for a kernel, with :func:`kernels_digest` as its freshness stamp."""

    def __init__(self, inner: caching._CacheLocator):
        self._inner = inner

    def __getattr__(self, name: str):
        # What Numba reads from its own locators beyond the interface
        # (_py_file, for a warning that names the source file).
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def ensure_cache_path(self) -> None:
        self._inner.ensure_cache_path()

    def get_cache_path(self) -> str:
        return self._inner.get_cache_path()

    def get_source_stamp(self) -> str:
        return "fastsoftmax kernels " + kernels_digest()

    def get_disambiguator(self) -> str:
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        """Return the locator for a function of a kernel file; None for any other function."""
        if Path(py_file).resolve().parent != _DIR:
            return None
        for other in _cache_impl()._locator_classes:
            if other is not cls:
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
        return None


def _cache_impl():
    # CacheImpl since Numba 0.60, _CacheImpl before.
    return getattr(caching, "CacheImpl", None) or caching._CacheImpl


def install_locator() -> bool:
    """Put :class:`KernelsLocator` first among Numba's locators (once); return whether it is."""
    try:
        classes = _cache_impl()._locator_classes
    except AttributeError:  # pragma: no cover - a Numba without these internals
        return False
    if KernelsLocator not in classes:
        classes.insert(0, KernelsLocator)
    return True
