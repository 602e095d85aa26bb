"""Dask: one full-batch iteration (loss and gradient over all blocks) on a
LocalCluster of 1 and 2 worker processes, against the in-memory objective on
the same data; dask-ml's LogisticRegression when it is installed.

Each worker has one thread and the kernels run with n_threads=1 there, so
"2 workers" uses the machine's two cores through Dask, and "in-memory, 2
threads" through Numba: the ratio between them is the price of Dask.
"""

import warnings

import numpy as np
import pytest

from fastsoftmax._dask import distribute

from ._common import local_cluster, objective, pedantic_or_call, shapes

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

SHAPES = shapes(small=[(20_000, 50, 10)], full=[(400_000, 100, 10)])


@pytest.fixture(scope="module", params=[1, 2], ids=lambda w: f"{w}worker")
def client(request):
    with local_cluster(request.param) as c:
        yield c


def _on_cluster(shape, blocks, binary=False):
    """Data generated on the workers (as a user's would be loaded there)."""
    m, n, k = shape
    rows = -(-m // blocks)
    Xd = da.random.default_rng(0).standard_normal((m, n), chunks=(rows, n))
    yd = da.random.default_rng(1).integers(0, 2 if binary else k, m, chunks=(rows,))
    return Xd.persist(), yd.persist()


def _problem(shape, seed=0):
    m, n, k = shape
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n))
    y = rng.integers(0, k, m)
    W = 0.01 * rng.standard_normal((n, k))
    return X, y, W, np.zeros(k)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "m{}-n{}-k{}".format(*s))
def test_dask_iteration(benchmark, client, shape):
    _, _, W, b = _problem((2, shape[1], shape[2]))
    n_workers = len(client.scheduler_info()["workers"])
    Xd, yd = _on_cluster(shape, max(2, 2 * n_workers))
    dask_obj = distribute(Xd, yd, None, np.arange(W.shape[1]), None).objective(n_threads=1)
    coef = np.ascontiguousarray(W.T)
    benchmark.group = "dask iteration m={} n={} k={}".format(*shape)
    benchmark.extra_info["workers"] = n_workers
    loss = pedantic_or_call(benchmark, lambda: dask_obj.loss_grad(coef, b, 1e-4))[0]
    assert np.isfinite(loss)


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "m{}-n{}-k{}".format(*s))
def test_in_memory_iteration(benchmark, shape, n_threads):
    X, y, W, b = _problem(shape)
    obj = objective(X, y, W.shape[1], n_threads=n_threads)
    benchmark.group = "dask iteration m={} n={} k={}".format(*shape)
    benchmark.extra_info["threads"] = n_threads
    loss = pedantic_or_call(benchmark, lambda: obj(W, b, 1e-4))[0]
    assert np.isfinite(loss)


@pytest.mark.parametrize("impl", ["fastsoftmax", "dask-ml"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "m{}-n{}".format(*s[:2]))
def test_binary_fit(benchmark, client, shape, impl):
    """Ten iterations of a binary fit: dask-ml's LogisticRegression handles
    two classes only, so the comparison is binary."""
    from fastsoftmax import SoftmaxRegression

    Xd, yd = _on_cluster(shape, 4, binary=True)
    if impl == "dask-ml":
        linear_model = pytest.importorskip("dask_ml.linear_model")
        model = linear_model.LogisticRegression(solver="lbfgs", max_iter=10)
    else:
        model = SoftmaxRegression("lbfgs", max_iter=10, n_threads=1)
    benchmark.group = "dask binary fit, 10 iterations, m={} n={}".format(*shape[:2])
    benchmark.extra_info["workers"] = len(client.scheduler_info()["workers"])

    def fit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning by design; dask-ml's own
            return model.fit(Xd, yd)

    pedantic_or_call(benchmark, fit)
