"""fastsoftmax._kernels._atomic: atomics for the threads of one parallel region,
and the SGD epoch that hands its batches between threads with them."""

import numba
import numpy as np
import pytest
from _helpers import dataset
from numba import njit, prange

from fastsoftmax import reference
from fastsoftmax._kernels._atomic import (
    exchange,
    fetch_add,
    load_acquire,
    publish,
    try_take,
    wait_nonzero,
)


@njit(parallel=True)
def _contend(counts, flags, workers, n):
    for w in prange(workers):
        for _ in range(n):
            fetch_add(counts, 0, 1)
        # Exactly one worker gets 0 back from the exchange.
        if exchange(counts, 1, 1) == 0:
            fetch_add(counts, 2, 1)
        fetch_add(counts, 3, w)
        # Of many flags tried by every worker, each is taken exactly once.
        for f in range(n):
            if try_take(flags, f):
                fetch_add(counts, 4, 1)


@njit(parallel=True)
def _relay(flags, values, workers):
    """Worker w waits for w - 1's flag, reads its value and publishes its own."""
    for w in prange(workers):
        before = wait_nonzero(flags, w - 1) if w > 0 else 1
        values[w] = (values[w - 1] if w > 0 else 0) + before
        publish(flags, w, 1)


def test_fetch_add_exchange_and_try_take_are_atomic_under_contention():
    counts = np.zeros(5, dtype=np.int64)
    flags = np.zeros(20000, dtype=np.int64)
    _contend(counts, flags, 8, 20000)
    assert counts[0] == 8 * 20000
    assert counts[1] == 1 and counts[2] == 1
    assert counts[3] == sum(range(8))
    assert counts[4] == 20000 and (flags == 1).all()


def test_a_published_value_and_what_was_written_before_it_are_seen():
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        flags = np.zeros(2, dtype=np.int64)
        values = np.zeros(2, dtype=np.int64)
        _relay(flags, values, 2)
    finally:
        numba.set_num_threads(saved)
    assert list(flags) == [1, 1]
    assert list(values) == [1, 2]


def test_load_acquire_reads_the_element():
    @njit
    def read(a, i):
        return load_acquire(a, i)

    assert read(np.array([3, 5, 8], dtype=np.int64), 2) == 8


@pytest.mark.parametrize("bad", [np.zeros(3, dtype=np.int32), np.zeros((2, 2), dtype=np.int64)])
def test_atomics_take_only_one_dimensional_int64_arrays(bad):
    @njit
    def add(a):
        return fetch_add(a, 0, 1)

    with pytest.raises(TypeError, match="1-D int64 array"):
        add(bad)


def _split_epoch_against_numpy(split, threads, parts, dtype, m, n, k, bs, nesterov, seed):
    """Run one split epoch kernel at ``threads`` threads over ``parts`` parts; check it
    against the NumPy loop (momentum 0.9, intercept, L2 term)."""
    from fastsoftmax._kernels._sgd import _feature_split_epoch, _sgd_epoch, sgd_hyper

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n)).astype(dtype)
    y = rng.integers(0, k, m)
    W0 = (0.1 * rng.standard_normal((n, k))).astype(dtype)
    b0 = (0.1 * rng.standard_normal(k)).astype(dtype)
    order = rng.permutation(m)
    W_ref, b_ref = reference.sgd_epoch(X.astype(np.float64), y, W0.astype(np.float64),
                                       b0.astype(np.float64), order, batch_size=bs, eta=0.05,
                                       alpha=0.01, momentum=0.9, nesterov=nesterov,
                                       fit_intercept=True)
    data = dataset(X, y, k)
    Wt, b = np.ascontiguousarray(W0.T), b0.copy()
    hyper = sgd_hyper(alpha=0.01, momentum=0.9, eta0=0.05, power_t=0.5, t0=0,
                      steps_per_epoch=1, schedule=0, nesterov=nesterov, fit_intercept=True)
    loss = np.zeros(1)
    state = (Wt, b, np.zeros_like(Wt), np.zeros(k, dtype), np.empty((parts, k, n), dtype))
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        if split == "features":
            steps = _feature_split_epoch(X, *data.kernel_targets(), order, bs, 1.0, hyper,
                                         *state, np.empty(k, dtype), loss)
        else:
            steps = _sgd_epoch(X, *data.kernel_targets(), order, bs, 1.0, hyper, *state,
                               np.empty((parts, k), dtype), loss)
    finally:
        numba.set_num_threads(saved)
    assert steps == -(-m // bs)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(Wt.T, W_ref, **tol)
    np.testing.assert_allclose(b, b_ref, **tol)
    assert loss[0] > 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("parts", [2, 3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_feature_split_epoch_whatever_threads_take_the_parts(threads, parts, dtype):
    """More parts than threads, down to one thread running every part of
    every batch: the region's iterations that find their parts taken move
    on, and the epoch ends with the NumPy loop's weights (no thread waits
    for a part that nobody takes)."""
    _split_epoch_against_numpy("features", threads, parts, dtype, m=150, n=80, k=5, bs=16,
                               nesterov=False, seed=parts)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("chunks", [2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_split_epoch_whatever_threads_take_the_parts(threads, chunks, dtype):
    """The row-split epoch with one thread or with more parts than threads,
    a last batch of fewer rows than its parts need: the NumPy loop's
    weights."""
    from fastsoftmax._kernels._sgd import row_split_parts

    assert row_split_parts(64, 30, 6, chunks) == chunks
    _split_epoch_against_numpy("rows", threads, chunks, dtype, m=250, n=30, k=6, bs=64,
                               nesterov=True, seed=chunks)


@pytest.mark.parametrize("split", ["rows", "features"])
def test_an_epoch_split_across_threads_stops_at_the_batch_whose_logits_overflow(split):
    """Both one-region epochs stop at the batch with a non-finite row, every
    thread leaving the region, with the updates of the batches before it
    made (the serial epoch's weights) and the loss left unwritten."""
    from fastsoftmax._kernels._sgd import _feature_split_epoch, _sgd_epoch, sgd_hyper

    rng = np.random.default_rng(11)
    m, k = 320, 8
    # Batches of 64 rows split by rows into up to 4 parts.
    n, bs, splits = (512, 32, (1, 2)) if split == "features" else (40, 64, (1, 2, 4))
    X = rng.standard_normal((m, n)) / 8
    X[200, 3] = np.inf  # row 200, in batch 200 // bs (rows in order)
    y = rng.integers(0, k, m)
    order = np.arange(m)
    hyper = sgd_hyper(alpha=0.0, momentum=0.0, eta0=0.1, power_t=0.5, t0=0,
                      steps_per_epoch=1, schedule=0, nesterov=False, fit_intercept=True)
    data = dataset(X, y, k)
    W0 = 0.01 * rng.standard_normal((k, n))
    results = []
    for parts in splits:
        Wt, b, loss = W0.copy(), np.zeros(k), np.zeros(1)
        if split == "features":
            steps = _feature_split_epoch(X, *data.kernel_targets(), order, bs, 1.0, hyper, Wt,
                                         b, np.zeros_like(Wt), np.zeros(k),
                                         np.empty((parts, k, n)), np.empty(k), loss)
        else:
            steps = _sgd_epoch(X, *data.kernel_targets(), order, bs, 1.0, hyper, Wt, b,
                               np.zeros_like(Wt), np.zeros(k), np.empty((parts, k, n)),
                               np.empty((parts, k)), loss)
        results.append((steps, Wt, b, loss[0]))
    for steps, Wt, b, loss in results:
        assert steps == -(200 // bs + 1)
        assert loss == 0.0
        np.testing.assert_allclose(Wt, results[0][1], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(b, results[0][2], rtol=1e-12, atol=1e-14)
        assert not np.allclose(Wt, W0)
