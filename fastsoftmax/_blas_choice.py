"""Which BLAS library the GEMM kernels call: the candidates in this process, and the choice.

The kernels multiply through :func:`fastsoftmax._kernels._blas._gemm_into`,
whose routine is read from a table at run time. By default it is the one
Numba's ``np.dot`` calls: SciPy's BLAS, reached through
``scipy.linalg.cython_blas`` (its own OpenBLAS build in SciPy's wheels).
A process usually holds a second BLAS, NumPy's, often a different OpenBLAS
version; where it is faster for a dtype's products, the kernels may call it
instead. :func:`candidates` lists the libraries whose Fortran ``?gemm`` can
be called safely: SciPy's (the default, :data:`DEFAULT`), and every other
loaded BLAS that exports the routines under a name that states their
integer width (``scipy_sgemm_64_`` or ``sgemm_64_``: 64-bit integers, as
in NumPy's wheels; ``scipy_sgemm_``: 32-bit). A library that exports only
``sgemm_`` is not a candidate: its integer width cannot be told from
outside, and a wrong guess is a crash rather than an error.

The calibration times the candidates on the GEMM kernels and remembers the
faster per dtype (``fastsoftmax._calibration.blas_library``, by a margin,
else the default); :func:`use_chosen` points the table at that choice.
``FASTSOFTMAX_BLAS`` overrides it: "scipy", or the file name of a
candidate library ("numpy" for NumPy's own, "mkl" for MKL's). Without it,
the "fixed" strategy override (``FASTSOFTMAX_STRATEGY=fixed``) keeps the
default.

MKL joins the candidates where the ``mkl`` wheel is installed in the
environment (``pip install fastsoftmax[mkl]``, Linux x86-64) and no MKL is
loaded already: :func:`load_mkl` loads its ``libmkl_rt`` when the kernels
first need a BLAS, with MKL's sequential threading layer (the kernels call
BLAS from their own threads, one call per thread; MKL's OpenMP layer would
bring a second OpenMP runtime beside Numba's for nothing), unless
``MKL_THREADING_LAYER`` is set. Why: its products of the GEMM kernels'
shapes ran faster than either OpenBLAS build here, by up to a third in
float64 at 784-3,000 features and 100 classes (BENCHMARKS.md,
"Thirty-first session"). ``FASTSOFTMAX_MKL=0`` keeps it unloaded. An MKL
already in the process (NumPy built on it, say) is a candidate as it is,
its settings untouched.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import _calibration
from ._settings import env_value

DEFAULT = "scipy"

# The Fortran names probed in each loaded BLAS library, "{}" the type letter,
# with whether the routine takes 64-bit integers.
_SYMBOLS = (("scipy_{}gemm_64_", True), ("{}gemm_64_", True), ("scipy_{}gemm_", False))


@dataclass(frozen=True)
class Routines:
    """One library's file, sgemm and dgemm (addresses; 0: Numba's own), integer width."""

    name: str
    path: str
    sgemm: int
    dgemm: int
    ilp64: bool

    def address(self, dtype) -> int:
        return self.sgemm if np.dtype(dtype) == np.float32 else self.dgemm


_lock = threading.Lock()
_found: dict[str, Routines] | None = None


# FASTSOFTMAX_MKL: "0" (or "no", "false", "off") keeps the mkl wheel unloaded.
MKL_SWITCH = "FASTSOFTMAX_MKL"
# MKL_THREADING_SEQUENTIAL of mkl_service.h, for MKL_Set_Threading_Layer.
_MKL_SEQUENTIAL = 1
_mkl_lib: ctypes.CDLL | None = None  # the libmkl_rt this module loaded
_mkl_tried = False
_mkl_sequential = False  # it set that MKL's sequential threading layer


def mkl_wheel() -> str | None:
    """Return the ``mkl`` wheel's ``libmkl_rt`` in this environment, or None.

    None as well where ``FASTSOFTMAX_MKL`` switches it off or the platform
    has no such file (the wheel puts it in the environment's ``lib``: Linux
    only here).
    """
    if os.environ.get(MKL_SWITCH, "").strip().lower() in ("0", "no", "false", "off"):
        return None
    if not sys.platform.startswith("linux"):
        return None
    found = sorted((Path(sys.prefix) / "lib").glob("libmkl_rt.so.*"))
    return str(found[0]) if found else None


def mkl_version() -> str:
    """Return the version of the ``mkl`` wheel that :func:`load_mkl` would load ("" for none).

    The calibration's wisdom is keyed by it: the choice of library was
    made among the candidates of its time.
    """
    if mkl_wheel() is None:
        return ""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mkl")
    except PackageNotFoundError:
        return "unknown"


def load_mkl(loaded_apis: list[str]) -> bool:
    """Load the ``mkl`` wheel's MKL for the kernels, once; return whether it loaded it now.

    ``loaded_apis``: threadpoolctl's ``internal_api`` of each BLAS loaded
    now; with "mkl" among them nothing is loaded (that MKL is a candidate
    as it is). Sets MKL's sequential threading layer unless
    ``MKL_THREADING_LAYER`` is set (module docstring). A file that fails
    to load is reported by a warning, and the kernels keep the other
    candidates.
    """
    global _mkl_lib, _mkl_tried, _mkl_sequential
    if _mkl_tried or "mkl" in loaded_apis:
        return False
    path = mkl_wheel()
    if path is None:
        return False
    _mkl_tried = True
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        if "MKL_THREADING_LAYER" not in os.environ:
            lib.MKL_Set_Threading_Layer(ctypes.c_int(_MKL_SEQUENTIAL))
            _mkl_sequential = True
    except (OSError, AttributeError) as exc:
        warnings.warn(f"fastsoftmax: MKL from {path} could not be loaded ({exc}); "
                      f"set {MKL_SWITCH}=0 not to try", RuntimeWarning, stacklevel=2)
        return False
    _mkl_lib = lib
    return True


def _name(path: str) -> str:
    """Return a candidate's name: "numpy" for NumPy's own BLAS, "mkl" for MKL's, else its file."""
    if _owned(path, np):
        return "numpy"
    base = os.path.basename(path)
    return "mkl" if base.startswith("libmkl_rt") else base


def _owned(path: str, module) -> bool:
    """Whether ``path`` ships with ``module``'s package (in it, or in its wheel's ``.libs``)."""
    root = os.path.realpath(os.path.dirname(module.__file__))
    real = os.path.realpath(path)
    return real.startswith(root + os.sep) or real.startswith(root + ".libs" + os.sep)


def _probe(path: str) -> tuple[int, int, bool] | None:
    try:
        lib = ctypes.CDLL(path)  # already loaded: the same handle
    except OSError:
        return None
    for pattern, ilp64 in _SYMBOLS:
        try:
            s = getattr(lib, pattern.format("s"))
            d = getattr(lib, pattern.format("d"))
        except AttributeError:
            continue
        return (int(ctypes.cast(s, ctypes.c_void_p).value or 0),
                int(ctypes.cast(d, ctypes.c_void_p).value or 0), ilp64)
    return None


def candidates() -> dict[str, Routines]:
    """Return the BLAS routines the kernels may call, by name; :data:`DEFAULT` first, then by name.

    Found once per process (loading SciPy's BLAS first,
    ``_threads.load_kernel_blas``): every BLAS loaded then that
    threadpoolctl sees (and so holds to one thread inside the kernels,
    ``_threads.single_threaded_blas``) and whose routines name their
    integer width, except SciPy's own (the default reaches it already).
    NumPy's is named "numpy", MKL's "mkl" (the ``mkl`` wheel's loaded here,
    :func:`load_mkl`), any other by its file name.
    """
    global _found
    if _found is not None:
        return _found
    with _lock:
        if _found is None:
            import scipy

            from ._threads import blas_libraries, load_kernel_blas

            load_kernel_blas()
            libraries = blas_libraries()
            # The default's path: the file of SciPy's own BLAS ("" where
            # threadpoolctl does not see it), which kernel_library names.
            own = next((path for path in libraries if _owned(path, scipy)), "")
            found = {DEFAULT: Routines(DEFAULT, own, 0, 0, False)}
            for path in libraries:
                routines = None if _owned(path, scipy) else _probe(path)
                if routines is None or 0 in routines[:2]:
                    continue
                name = _name(path)
                found.setdefault(name, Routines(name, path, *routines))
            # By name after the default: the libraries' load order varies.
            _found = {name: found[name] for name in [DEFAULT, *sorted(set(found) - {DEFAULT})]}
        return _found


def use(dtype, name: str) -> None:
    """Point the kernels' ``dtype`` products at the routines of candidate ``name``."""
    from ._kernels._blas import set_routine

    routines = candidates().get(name)
    if routines is None:
        raise ValueError(f"no BLAS library {name!r} to call in this process; "
                         f"candidates: {', '.join(candidates())}")
    set_routine(dtype, routines.address(dtype), routines.ilp64)
    _in_force[np.dtype(dtype)] = name


# The candidate each dtype's products were last pointed at by :func:`use`
# (the only writer of the routine table), so that :func:`use_chosen` can
# leave an unchanged choice alone.
_in_force: dict[np.dtype, str] = {}


def in_use(dtype) -> str:
    """Return the name of the candidate that ``dtype``'s products call now."""
    from ._kernels._blas import routine

    address, _ = routine(dtype)
    for name, routines in candidates().items():
        if routines.address(dtype) == address:
            return name
    return DEFAULT


def chosen(dtype, work: int = 0) -> str:
    """Return the candidate for ``dtype``: ``FASTSOFTMAX_BLAS``, else the calibration's.

    ``work``: the problem's multiply-adds per gradient; from
    ``_calibration.AUTO_WORK`` a host without the choice times it now.
    """
    override = env_value("FASTSOFTMAX_BLAS").strip()
    if override:
        if override not in candidates():
            hint = ""
            if override == "mkl":
                hint = (" (MKL is one where the mkl wheel is installed: pip install "
                        f"fastsoftmax[mkl], and {MKL_SWITCH} is not 0)")
            raise ValueError(f"FASTSOFTMAX_BLAS={override!r} names no BLAS library of this "
                             f"process; candidates: {', '.join(candidates())}{hint}")
        return override
    name = _calibration.blas_library(np.dtype(dtype), work)
    # A library the wisdom named but this process lacks: the default.
    return name if name in candidates() else DEFAULT


def kernel_library(dtype) -> str | None:
    """Return the file path of the BLAS library the kernels' ``dtype`` products call now.

    The one library a kernel call needs held at one thread
    (``_threads.single_threaded_blas``). None where none needs holding: the
    ``mkl`` wheel's MKL that :func:`load_mkl` loaded in its sequential
    layer (one thread whatever its count), or a library threadpoolctl does
    not see (it holds none that it cannot see either).
    """
    name = _in_force.get(np.dtype(dtype), DEFAULT)
    if name == "mkl" and _mkl_sequential:
        return None
    return candidates()[name].path or None


def use_chosen(dtype, work: int = 0) -> None:
    """Point the kernels' ``dtype`` products at :func:`chosen`'s (not inside a calibration).

    Called by every GEMM engine and prediction: a few microseconds, and
    nothing written where the choice stands already.
    """
    if _calibration._busy():
        return
    # chosen()'s answer depends on the overrides, the wisdom (a new object
    # when a calibration writes it) and whether the call is large enough to
    # time the choice: kept per dtype on those, as its several layers of
    # Python took about 30 microseconds of a small call after an idle pause
    # (BENCHMARKS.md, "Forty-ninth session").
    key = (dtype, work >= _calibration.AUTO_WORK)
    wisdom = _calibration.wisdom_object()
    blas, strategy = env_value("FASTSOFTMAX_BLAS"), env_value("FASTSOFTMAX_STRATEGY")
    memo = _chosen_memo.get(key)
    if memo is not None and memo[0] is wisdom and memo[1] == blas and memo[2] == strategy:
        name = memo[3]
    else:
        name = chosen(dtype, work)
        _chosen_memo[key] = (wisdom, blas, strategy, name)
    if _in_force.get(dtype) != name:
        use(dtype, name)


# use_chosen's last answer per (dtype, large): (wisdom, FASTSOFTMAX_BLAS,
# FASTSOFTMAX_STRATEGY, name).
_chosen_memo: dict[tuple[np.dtype, bool], tuple[Any, str, str, str]] = {}
