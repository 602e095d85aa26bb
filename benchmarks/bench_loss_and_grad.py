"""loss_and_grad: fastsoftmax against the NumPy reference, scikit-learn's
private multinomial loss (when it can be imported) and PyTorch's CPU autograd
(when torch is installed), one table per shape and dtype. GFLOP/s in
extra_info counts 4*m*n*k flops per gradient."""

import numpy as np
import pytest

import fastsoftmax as fs
from fastsoftmax import reference

from ._common import pedantic_or_call, shapes
from ._contenders import torch_loss_and_grad

SHAPES = shapes(
    small=[(2000, 784, 10), (3000, 20, 100), (500, 50, 1000)],
    full=[(60000, 784, 10), (60000, 784, 2), (60000, 784, 100), (200000, 20, 10),
          (200000, 20, 100), (20000, 3000, 10), (20000, 784, 1000)],
)


def _sklearn(X, y, W, b):
    try:
        from sklearn._loss.loss import HalfMultinomialLoss
        from sklearn.linear_model._linear_loss import LinearModelLoss
    except ImportError:  # private API: absent or moved
        pytest.skip("scikit-learn's LinearModelLoss is not importable")
    k = W.shape[1]
    lml = LinearModelLoss(base_loss=HalfMultinomialLoss(n_classes=k), fit_intercept=True)
    coef = np.ascontiguousarray(np.hstack([W.T, b[:, None]]))
    yf = y.astype(X.dtype)
    return lambda: lml.loss_gradient(coef, X, yf, l2_reg_strength=0.0, n_threads=2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "m{}-n{}-k{}".format(*s))
@pytest.mark.parametrize("impl", ["fastsoftmax", "reference", "sklearn", "torch"])
def test_loss_and_grad(benchmark, rng, impl, shape, dtype):
    m, n, k = shape
    X = rng.standard_normal((m, n)).astype(dtype)
    y = rng.integers(0, k, m)
    W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
    b = np.zeros(k, dtype)
    benchmark.group = f"loss_and_grad {dtype} m={m} n={n} k={k}"
    benchmark.extra_info["flops"] = 4 * m * n * k
    benchmark.extra_info["bytes_X"] = X.nbytes
    if impl == "fastsoftmax":
        fn = lambda: fs.loss_and_grad(X, y, W, b)  # noqa: E731
    elif impl == "reference":
        fn = lambda: reference.loss_and_grad(X, y, W, b)  # noqa: E731
    elif impl == "sklearn":
        fn = _sklearn(X, y, W, b)
    else:
        fn = torch_loss_and_grad(X, y, W, b)
        if fn is None:
            pytest.skip("torch is not installed")
    pedantic_or_call(benchmark, fn)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("shape", shapes([(2000, 784, 10)], [(60000, 784, 10)]),
                         ids=lambda s: "m{}-n{}-k{}".format(*s))
def test_thread_scaling(benchmark, rng, shape, n_threads, dtype):
    """Target 4: the same call on 1 and 2 Numba threads."""
    m, n, k = shape
    X = rng.standard_normal((m, n)).astype(dtype)
    y = rng.integers(0, k, m)
    W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
    benchmark.group = f"threads {dtype} m={m} n={n} k={k}"
    pedantic_or_call(benchmark, lambda: fs.loss_and_grad(X, y, W, n_threads=n_threads))
