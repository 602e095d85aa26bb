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

FLOAT_DTYPES = (np.float32, np.float64)


def dtype_id(dt) -> str:
    return np.dtype(dt).name


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, fixed-seed generator for each test."""
    return np.random.default_rng(12345)


@pytest.fixture(params=FLOAT_DTYPES, ids=dtype_id)
def dtype(request):
    """The two working dtypes: float32 and float64."""
    return np.dtype(request.param)


def make_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """Return ``a``'s values in a given memory layout, as a test input.

    "c": a C-contiguous copy; "readonly": a read-only C-contiguous copy;
    "strided": a non-contiguous view (every other column of a wider array,
    or every other element of a longer 1-D array); "fortran": a Fortran
    ordered copy. The returned array always compares equal to ``a``.
    """
    if layout == "c":
        return np.array(a, order="C")
    if layout == "readonly":
        r = np.array(a, order="C")
        r.flags.writeable = False
        return r
    if layout == "strided":
        if a.ndim == 1:
            wide = np.zeros(2 * a.shape[0], dtype=a.dtype)
            wide[::2] = a
            v = wide[::2]
        else:
            wide = np.zeros((a.shape[0], 2 * a.shape[1]), dtype=a.dtype)
            wide[:, ::2] = a
            v = wide[:, ::2]
        assert not v.flags.c_contiguous or v.size <= 1
        return v
    if layout == "fortran":
        return np.asfortranarray(a)
    raise ValueError(layout)


LAYOUTS = ("c", "readonly", "strided", "fortran")
