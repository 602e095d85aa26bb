"""_kernels._config.itemsize: an array's itemsize as a constant of the compiled code.

Kernels branch on the dtype through it (float32 blocks, float64 tiles, the
exp's constants); what it is for is that the branch not taken is absent
from the compiled code, not merely skipped at run time. Compiled here
without the disk cache (Numba cannot show the IR of a function loaded
from it).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from numba import njit

from fastsoftmax._kernels._config import itemsize


@njit(cache=False)
def _size(X):
    return itemsize(X)


@njit(cache=False)
def _which(X):
    if itemsize(X) == 4:
        return np.sin(X[0])
    return np.cos(X[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64, np.complex128])
def test_itemsize_is_the_dtypes(dtype):
    x = np.zeros((3, 2), dtype=dtype)
    assert _size(x) == x.itemsize
    assert _size(x[:, 1]) == x.itemsize  # a strided view: the dtype's, not the stride


@pytest.mark.parametrize("dtype, kept, dropped", [(np.float32, "sin", "cos"),
                                                  (np.float64, "cos", "sin")])
def test_the_branch_not_taken_is_not_compiled(dtype, kept, dropped):
    x = np.full(2, 0.5, dtype=dtype)
    expected = np.sin(x[0]) if dtype == np.float32 else np.cos(x[0])
    assert _which(x) == pytest.approx(expected, rel=1e-6)
    ir = _which.inspect_llvm(_which.signatures[-1])
    assert re.search(rf"\b{kept}", ir)
    assert not re.search(rf"\b{dropped}", ir)


def test_a_non_array_is_refused():
    from numba.core.errors import TypingError

    @njit(cache=False)
    def bad(v):
        return itemsize(v)

    with pytest.raises(TypingError):
        bad(1.0)
