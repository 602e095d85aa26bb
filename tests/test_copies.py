"""Numba's copy propagation without deep copies (``fastsoftmax._kernels._copies``).

The change must give what Numba's own ``copy_propagate`` gives: the same
copies in and out of every block. Checked on every call Numba makes while
compiling two parallel kernels afresh (their IR at each simplification,
and each parallel loop's body), both functions on the same IR.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import ir_utils
from numba.parfors import parfor

from fastsoftmax._kernels import _checks, _copies, _predict
from fastsoftmax._kernels._config import PJIT


def test_installed_with_this_numba():
    # The Numba the package is tested with has what _copies calls; should a
    # new one not, this fails here rather than the kernels compiling slower.
    assert _copies.installed()
    assert ir_utils.copy_propagate is _copies.copy_propagate
    assert parfor.copy_propagate is _copies.copy_propagate


def test_the_same_copies_as_numbas_on_every_call(monkeypatch):
    calls = []

    def both(blocks, typemap):
        ours = _copies.copy_propagate(blocks, typemap)
        numbas = _copies._numba_copy_propagate(blocks, typemap)
        assert ours == numbas
        calls.append(_copies._ours(blocks))
        return ours

    monkeypatch.setattr(ir_utils, "copy_propagate", both)
    monkeypatch.setattr(parfor, "copy_propagate", both)
    # Fresh dispatchers (no cache): the kernels compile here, every pass run.
    scan = njit(**dict(PJIT, cache=False))(_checks._first_nonfinite_row.py_func)
    A = np.zeros((300, 4))
    A[123, 2] = np.nan
    bad = np.empty(4, np.int64)
    scan(A, bad)
    assert bad.max() == 123
    scores = njit(**dict(PJIT, cache=False))(_predict._scores.py_func)
    X = np.random.default_rng(0).standard_normal((40, 5))
    W, b = np.ones((5, 3)), np.zeros(3)
    out = np.empty((40, 3))
    scores(X, W, b, _predict.PROBA, out, np.empty(2, np.int64))
    np.testing.assert_allclose(out.sum(axis=1), 1.0)
    assert sum(calls) >= 4, calls  # this package's IR went through both
