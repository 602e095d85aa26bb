"""``fastsoftmax.show_config``: what fastsoftmax runs on this machine, and why.

Every choice the kernels make per host (the dense strategy, the BLAS
library of the GEMM kernels, their block sizes, the thread count) is made
out of sight: from this host's calibration ("wisdom"), from a fixed rule
where there is none, or from an environment variable. This report gathers
them for one place to look: for a user who wants to know whether a
setting took effect (``FASTSOFTMAX_BLAS=mkl``, a thread variable), for a
bug report, and for an engineer asking why one shape runs slower than
another. It times nothing and calibrates nothing (a report about a large
shape says which cells a call of that size would time first); it does load
the BLAS libraries that the GEMM kernels call, as their first call would.
"""

from __future__ import annotations

import importlib.metadata
import json
import operator
import os
import platform
import sys
from typing import Any

import numpy as np

from . import __version__

# The environment variables that change what the kernels run (or how they
# are compiled), reported where set.
SETTINGS = ("FASTSOFTMAX_STRATEGY", "FASTSOFTMAX_BLAS", "FASTSOFTMAX_MKL",
            "FASTSOFTMAX_CACHE_DIR", "FASTSOFTMAX_NUMBA_AS_IS", "FASTSOFTMAX_SIDE_COMPILE",
            "NUMBA_NUM_THREADS",
            "NUMBA_THREADING_LAYER", "NUMBA_CACHE_DIR", "OMP_NUM_THREADS",
            "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "MKL_THREADING_LAYER",
            "OPENBLAS_THREAD_TIMEOUT")
DEPENDENCIES = ("numpy", "scipy", "numba", "llvmlite", "threadpoolctl", "scikit-learn")
DTYPES = ("float32", "float64")
MODES = ("stdout", "dicts")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _shape(shape: Any) -> tuple[int, int, int]:
    """Return ``shape`` as (m, n, k), checked: three whole numbers (not bools), k at least 2."""
    try:
        values = list(shape)
        if len(values) != 3 or any(isinstance(v, bool) for v in values):
            raise TypeError
        m, n, k = (operator.index(v) for v in values)  # 1.5 is refused, not truncated
    except TypeError:
        raise ValueError("shape must be (n_samples, n_features, n_classes), three whole "
                         f"numbers, got {shape!r}") from None
    if min(m, n) < 1 or k < 2:
        raise ValueError("shape must have n_samples and n_features of at least 1 and "
                         f"n_classes of at least 2, got {(m, n, k)}")
    return m, n, k


def _dtypes(dtype: Any) -> tuple[str, ...]:
    if dtype is None:
        return DTYPES
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = ""
    if name not in DTYPES:
        raise ValueError(f"dtype must be float32, float64 or None (both), got {dtype!r}")
    return (name,)


def _threads() -> dict:
    import numba

    from ._threads import thread_limit

    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel region has run in this process yet
        layer = None
    return {"numba_threads": numba.get_num_threads(), "numba_thread_limit": thread_limit(),
            "threading_layer": layer,
            "threading_layer_asked": numba.config.THREADING_LAYER}  # type: ignore[attr-defined]


def _blas() -> dict:
    from threadpoolctl import threadpool_info

    from ._blas_choice import candidates, mkl_version

    found = candidates()  # loads the kernels' BLAS (and the mkl wheel's MKL), as a kernel would
    loaded = [{key: info.get(key) for key in ("internal_api", "version", "num_threads",
                                              "filepath")}
              for info in threadpool_info() if info.get("user_api") == "blas"]
    return {"loaded": loaded, "mkl_wheel": mkl_version() or None,
            "gemm_candidates": list(found)}


def _calibration() -> dict:
    from . import _calibration as cal

    path = cal.wisdom_path()
    return {"wisdom": str(path), "exists": path.exists(),
            **{dtype: cal.calibrated(np.dtype(dtype)) for dtype in DTYPES}}


def _blas_source(dtype: str, k: int, work: int) -> str:
    """Say where the GEMM kernels' library for ``dtype`` comes from."""
    from . import _calibration as cal
    from ._kernels._common import LANES_FROM

    if os.environ.get("FASTSOFTMAX_BLAS", "").strip():
        return "FASTSOFTMAX_BLAS"
    if os.environ.get("FASTSOFTMAX_STRATEGY", "").strip().lower() == "fixed":
        return "the default (FASTSOFTMAX_STRATEGY=fixed)"
    if cal.calibrated(np.dtype(dtype))["blas"] is not None:
        return "this host's calibration"
    if work >= cal.AUTO_WORK and k >= LANES_FROM:
        return "the default until timed: a call of this size times the libraries first"
    return "the default: not timed on this host (fastsoftmax bench --calibrate)"


def _plan(m: int, n: int, k: int, dtype: str) -> dict:
    """Return what a fit's gradient runs on dense data of shape (m, n) with k classes."""
    from . import _calibration as cal
    from ._data import Dataset
    from ._dense import DenseEngine

    work = m * n * k
    decision = cal.explain(n, k, np.dtype(dtype), work)
    out: dict[str, Any] = {"strategy": decision["strategy"], "why": decision["source"]}
    if decision["strategy"] is None:
        return out
    # A stand-in of the shape: the engine reads X's shape and dtype only
    # (broadcast zeros: no memory).
    X = np.broadcast_to(np.zeros((), dtype), (m, n))
    empty = np.empty(0, dtype)
    data = Dataset(X, np.empty(0, np.int64), np.empty((0, k), dtype), empty, k, float(m), 1.0)
    with cal.looking_only():
        engine = DenseEngine(data, decision["strategy"], warm=True)
        out.update(engine.describe())
    if out["strategy"] == "gemm":
        out["blas_why"] = _blas_source(dtype, k, work)
    return out


def config(shape: Any = None, dtype: Any = None) -> dict:
    """Return :func:`show_config`'s report as a dict (see there)."""
    dtypes = _dtypes(dtype)
    checked = None if shape is None else _shape(shape)
    report: dict[str, Any] = {
        "fastsoftmax": {"version": __version__, "python": sys.version.split()[0],
                        "platform": platform.platform()},
        "dependencies": {name: _version(name) for name in DEPENDENCIES},
        "machine": {"cpu": _cpu(), "cpus": _cpus()},
        "settings": {name: os.environ[name] for name in SETTINGS if name in os.environ},
        "threads": _threads(),
        "blas": _blas(),
        "calibration": _calibration(),
    }
    if checked is not None:
        m, n, k = checked
        report["shape"] = {"n_samples": m, "n_features": n, "n_classes": k,
                           **{dt: _plan(m, n, k, dt) for dt in dtypes}}
    return report


def _cpu() -> str:
    from ._calibration import cpu_model

    return cpu_model()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def show_config(shape: Any = None, dtype: Any = None, mode: str = "stdout") -> dict | None:
    """Print what fastsoftmax runs on this machine and why, or return it as a dict.

    The versions of fastsoftmax and its dependencies, the CPU, the
    environment variables that change the kernels' choices, Numba's thread
    count and threading layer, the BLAS libraries loaded (with their
    thread counts) and those the GEMM kernels may call, and this host's
    calibration (the wisdom file, how many grid cells are timed, the BLAS
    library chosen per dtype). With ``shape``, also what a fit's gradient
    on dense data of that shape runs, per dtype: the kernel strategy and
    why (an override, this host's calibration, or the fixed rule), the
    kernel variant (and the Hessian products'), how many row ranges run
    in parallel, whether the rows kernels read ahead, the GEMM blocks' rows
    and BLAS library.

    Nothing is timed or calibrated: for a shape whose cells this host has
    not timed, the report says that a call of that size would time them
    first. The GEMM kernels' BLAS libraries are loaded, as their first
    call would load them.

    Parameters
    ----------
    shape : (n_samples, n_features, n_classes) or None
    dtype : "float32", "float64" or None (both)
        The dtypes the shape's plan is given for.
    mode : {"stdout", "dicts"}
        Print the report (and return None), or return it as a dict.

    Returns
    -------
    dict or None
    """
    if mode not in MODES:
        raise ValueError(f"mode must be 'stdout' or 'dicts', got {mode!r}")
    report = config(shape, dtype)
    if mode == "dicts":
        return report
    print(format_report(report))
    return None


def format_report(report: dict) -> str:
    """Return :func:`config`'s report as indented text, one setting a line."""
    lines: list[str] = []

    def emit(value: Any, indent: int) -> None:
        pad = "  " * indent
        for key, item in value.items():
            if isinstance(item, dict):
                lines.append(f"{pad}{key}:")
                emit(item, indent + 1)
            elif isinstance(item, list) and item and isinstance(item[0], dict):
                lines.append(f"{pad}{key}:")
                for entry in item:
                    lines.append(f"{pad}  - " + ", ".join(f"{k}={v}" for k, v in entry.items()))
            else:
                shown = ", ".join(map(str, item)) if isinstance(item, list) else item
                lines.append(f"{pad}{key}: {'-' if shown is None else shown}")

    emit(report, 0)
    return "\n".join(lines)


def to_json(report: dict) -> str:
    """Return the report as JSON text."""
    return json.dumps(report, indent=2)
