"""loss_and_grad: fastsoftmax against its peers (benchmarks/_contenders.py:
the NumPy reference, scikit-learn's LinearModelLoss, oneDAL, PyTorch eager
and JAX, each skipped when not installed), one table per shape and dtype.
GFLOP/s in extra_info counts 4*m*n*k flops per gradient. All contenders run
in this one process here; the interleaved, one-process-per-contender tables
of BENCHMARKS.md come from benchmarks/peers.py."""

import os

import numpy as np
import pytest

import fastsoftmax as fs

from ._common import pedantic_or_call, shapes
from ._contenders import make

SHAPES = shapes(
    small=[(2000, 784, 10), (3000, 20, 100), (500, 50, 1000)],
    full=[(60000, 784, 10), (60000, 784, 2), (60000, 784, 100), (200000, 20, 10),
          (200000, 20, 100), (20000, 3000, 10), (20000, 784, 1000)],
)
IMPLS = ["fastsoftmax", "numpy", "sklearn", "onedal", "torch", "jax"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "m{}-n{}-k{}".format(*s))
@pytest.mark.parametrize("impl", IMPLS)
def test_loss_and_grad(benchmark, rng, impl, shape, dtype):
    m, n, k = shape
    X = rng.standard_normal((m, n)).astype(dtype)
    y = rng.integers(0, k, m)
    W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
    b = np.zeros(k, dtype)
    benchmark.group = f"loss_and_grad {dtype} m={m} n={n} k={k}"
    benchmark.extra_info["flops"] = 4 * m * n * k
    benchmark.extra_info["bytes_X"] = X.nbytes
    fn = make(impl, X, y, W, b, 0.0, os.cpu_count() or 1)
    if fn is None:
        pytest.skip(f"{impl} is not installed")
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
