"""Both fused-kernel strategies ("rows", "gemm") and both launch modes
(serial below _launch.SERIAL_WORK, parallel above) against the float64 reference,
whatever strategy the shape rule would pick.

Tolerances are those of tests/test_loss_and_grad.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import (
    FLOAT_DTYPES,
    PublicObjective,
    assert_close,
    dtype_id,
    make_problem,
    truth,
)

import fastsoftmax as fs
from fastsoftmax import _dense


def _objective_for(X, y, sw, k, strategy, soft):
    labels = None if soft else np.asarray(y, dtype=np.int64)
    targets = np.asarray(y, dtype=X.dtype) if soft else None
    return PublicObjective(X, labels if targets is None else targets, k, sw, strategy=strategy,
                           n_threads=2)


@pytest.mark.parametrize("strategy", ["rows", "gemm"])
@pytest.mark.parametrize("mode", ["serial", "parallel"])
@pytest.mark.parametrize("k", [2, 3, 10, 33, 100])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("variant", ["plain", "no-b", "alpha", "weights", "soft", "all"])
def test_strategy_and_mode_match_reference(strategy, mode, k, dt, variant, rng, monkeypatch):
    monkeypatch.setattr(_dense, "SERIAL_WORK", 1 << 40 if mode == "serial" else 0)
    soft = variant in ("soft", "all")
    weights = variant in ("weights", "all")
    alpha = 0.3 if variant in ("alpha", "all") else 0.0
    # 203 rows: chunks of 101/102 rows leave 1-3 rows after the 4-row blocks
    X, y, W, b, sw = make_problem(rng, 203, 45, k, dt, intercept=variant != "no-b",
                                  weights=weights, soft=soft)
    got = _objective_for(X, y, sw, k, strategy, soft)(W, b, alpha)
    assert_close(got, truth(X, y, W, b, alpha=alpha, sample_weight=sw), dt)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(2000, 160, 10), (2000, 20, 10), (3000, 50, 60)])
def test_public_function_on_shapes_of_each_rule_branch(shape, dt, rng):
    m, n, k = shape
    X, y, W, b, _ = make_problem(rng, m, n, k, dt)
    W *= 0.2
    assert_close(fs.loss_and_grad(X, y, W, b), truth(X, y, W, b), dt)


@pytest.mark.parametrize("strategy", ["rows", "gemm"])
@pytest.mark.parametrize("mode", ["serial", "parallel"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_x_is_caught_by_the_kernel(strategy, mode, bad, monkeypatch):
    """loss_and_grad does not pre-scan X: every strategy must see a NaN/inf
    of X in the logits, even with all-zero weights (x * 0 is NaN)."""
    monkeypatch.setattr(_dense, "SERIAL_WORK", 1 << 40 if mode == "serial" else 0)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((50, 45))
    X[37, 11] = bad
    obj = _objective_for(X, rng.integers(0, 4, 50), None, 4, strategy, False)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match="not finite at row 37"):
        obj(np.zeros((45, 4)), np.zeros(4))


