"""Fixtures of the benchmark suite (settings in _common.py)."""

import numpy as np
import pytest


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(0)
