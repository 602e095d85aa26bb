"""Fixtures of the benchmark suite (settings in _common.py)."""

import os

import numpy as np
import pytest

from ._common import FULL


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(0)


# make test runs these files in quick mode as smoke tests: kernels by the
# fixed strategy rule there (no calibration run, the same choice on every
# machine); ``make bench`` (FULL) measures what users get, calibration included.
if not FULL:
    os.environ.setdefault("FASTSOFTMAX_STRATEGY", "fixed")
