"""Shared test configuration: hypothesis profiles and small fixtures.

Hypothesis profiles
-------------------
ci (default)
    ~60 examples per property, derandomized so that a CI failure reproduces
    on any machine; no deadline, because the first call of a kernel in a
    process may include Numba's JIT compile (or cache load).
dev
    Many more examples, random; select it with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# When a derandomized test fails, hypothesis imports its patch writer, which
# imports libcst if installed, which can emit a DeprecationWarning (from
# mypy_extensions) inside pytest's warnings-as-errors hook and turn the real
# failure report into an INTERNALERROR. Import it once here instead.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import hypothesis.extra._patching  # noqa: F401
    except ImportError:  # libcst not installed: nothing to pre-import
        pass



def _drop_stale_kernel_caches() -> None:
    """Drop Numba's cache files beside the kernels when any kernel source changed.

    Numba checks only the file of each cached function: a kernel that
    inlines a helper from another file (every kernel inlines from
    ``_common``, ``_micro`` or ``_fused``) keeps its old compiled code after
    that helper is edited, and the tests would run it. A fresh clone (CI)
    has no cache; a working checkout gets one. The digest of the kernels'
    sources is kept beside the cache; when it differs, every cached kernel
    goes. (A cache elsewhere, under ``NUMBA_CACHE_DIR``, is not touched:
    clear it by hand after editing a kernel.)
    """
    import hashlib
    from pathlib import Path

    kernels = Path(__file__).resolve().parent.parent / "fastsoftmax" / "_kernels"
    digest = hashlib.sha256()
    for path in sorted(kernels.glob("*.py")):
        digest.update(path.read_bytes())
    cache = kernels / "__pycache__"
    stamp = cache / "sources.sha256"
    try:
        if stamp.read_text() == digest.hexdigest():
            return
    except OSError:
        pass
    try:
        for path in cache.glob("*.nb[ic]"):
            path.unlink()
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest())
    except OSError:  # a read-only checkout: nothing was cached there either
        pass


_drop_stale_kernel_caches()

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The dense kernel strategy by the fixed rule, in this process and the
# subprocesses tests start: the same kernels run on every machine, and no
# test reads this host's calibration or pays for one (tests/test_calibration.py
# calibrates into a temporary folder).
os.environ["FASTSOFTMAX_STRATEGY"] = "fixed"
# No kernel compiled in a second process beside a Newton fit
# (fastsoftmax._side_compile): whether one starts depends on the host's load,
# and what each test process compiles itself should not. tests/test_side_compile.py
# turns it on where it tests it.
os.environ["FASTSOFTMAX_SIDE_COMPILE"] = "0"

from _helpers import FLOAT_DTYPES, dtype_id  # noqa: E402

from fastsoftmax import _launch  # noqa: E402

# No call taken off its threads by this host's measured wake-up
# (_launch.cold_serial_work): whether one is depends on the gaps between a
# test's calls and on the host's timings, and which launch a test's call
# makes should not. tests/test_dense.py tests the rule with a clock of its own.
_launch.COLD_SERIAL_MAX = 0


@pytest.fixture(autouse=True)
def _layouts_derived_anew():
    """The dense engines' kept layouts (_dense._layout), the kept BLAS choice
    (_blas_choice.use_chosen's) and the function API's kept objectives
    (_objective.call_objective's, this thread's) dropped before each test:
    tests patch the module constants and functions those follow."""
    from fastsoftmax import _blas_choice, _dense, _objective

    _dense._layout.cache_clear()
    _blas_choice._chosen_memo.clear()
    getattr(_objective._kept, "objectives", {}).clear()


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, fixed-seed generator for each test."""
    return np.random.default_rng(12345)


@pytest.fixture(params=FLOAT_DTYPES, ids=dtype_id)
def dtype(request):
    """The two working dtypes: float32 and float64."""
    return np.dtype(request.param)
