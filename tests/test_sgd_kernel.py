"""The compiled SGD epoch against the plain NumPy loop in fastsoftmax.reference."""

import numpy as np
import pytest
from _helpers import sgd_epoch

from fastsoftmax import reference

TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch_size", [1, 7, 40, 64])
@pytest.mark.parametrize("momentum, nesterov", [(0.0, False), (0.9, False), (0.9, True)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_epoch_matches_numpy_loop(dtype, batch_size, momentum, nesterov, weighted, n_threads):
    rng = np.random.default_rng(batch_size)
    m, n, k = 203, 9, 4
    X = rng.standard_normal((m, n)).astype(dtype)
    y = rng.integers(0, k, m)
    sw = rng.uniform(0.1, 2.0, m).astype(dtype) if weighted else None
    W0 = (0.1 * rng.standard_normal((n, k))).astype(dtype)
    b0 = (0.1 * rng.standard_normal(k)).astype(dtype)
    order = rng.permutation(m)
    eta, alpha = 0.05, 0.01

    W_ref, b_ref = reference.sgd_epoch(X, y, W0.copy(), b0.copy(), order,
                                       batch_size=batch_size, eta=eta, alpha=alpha,
                                       momentum=momentum, nesterov=nesterov,
                                       sample_weight=sw)
    X_before = X.copy()
    W, b, steps, ok = sgd_epoch(X, y, k, W0, b0, order, sample_weight=sw, n_threads=n_threads,
                                alpha=alpha, eta0=eta, learning_rate="constant",
                                momentum=momentum, nesterov=nesterov, batch_size=batch_size)
    assert ok and W.dtype == dtype
    np.testing.assert_allclose(W, W_ref, **TOL[dtype])
    np.testing.assert_allclose(b, b_ref, **TOL[dtype])
    np.testing.assert_array_equal(X, X_before)
    assert steps == -(-m // batch_size)
