"""solver="sgd" (fastsoftmax._solvers.sgd, the epoch kernel of
fastsoftmax._kernels._sgd): the compiled SGD epoch against the plain NumPy
loop in fastsoftmax.reference, batches split across threads, the invscaling
schedule within an epoch and across partial_fit, and shuffle=False."""

import numpy as np
import pytest
from _helpers import FLOAT_DTYPES, dataset, dtype_id, sgd_epoch, toy_data
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from fastsoftmax import SoftmaxRegression, reference

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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", range(1, 8))
@pytest.mark.parametrize("momentum, nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_per_sample_sweeps_of_every_class_count_match_numpy_loop(dtype, k, momentum, nesterov):
    # Per-sample steps sweep the classes two at a time, the last of an odd
    # k alone (_kernels._sgd): k = 1 to 7 runs every case, with and
    # without momentum, the L2 term included.
    rng = np.random.default_rng(k)
    m, n = 61, 37
    X = rng.standard_normal((m, n)).astype(dtype)
    y = rng.integers(0, k, m)
    W0 = (0.1 * rng.standard_normal((n, k))).astype(dtype)
    b0 = (0.1 * rng.standard_normal(k)).astype(dtype)
    order = rng.permutation(m)
    W_ref, b_ref = reference.sgd_epoch(X, y, W0.copy(), b0.copy(), order, batch_size=1,
                                       eta=0.05, alpha=0.01, momentum=momentum,
                                       nesterov=nesterov)
    W, b, steps, ok = sgd_epoch(X, y, k, W0, b0, order, alpha=0.01, eta0=0.05,
                                learning_rate="constant", momentum=momentum,
                                nesterov=nesterov, batch_size=1)
    assert ok and steps == m
    np.testing.assert_allclose(W, W_ref, **TOL[dtype])
    np.testing.assert_allclose(b, b_ref, **TOL[dtype])


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n_threads", [1, 2])
def test_sgd_batches_split_across_threads_match_numpy_loop(dt, n_threads):
    """Batches split by rows go through the prange path (with two threads)."""
    from fastsoftmax import reference
    from fastsoftmax._kernels._sgd import feature_split_parts, row_split_parts

    rng = np.random.default_rng(3)
    m, n, k, bs = 1100, 1024, 4, 512
    assert row_split_parts(bs, n, k, 2) == 2 and feature_split_parts(bs, n, k, 2) == 1
    X = (rng.standard_normal((m, n)) / 16).astype(dt)
    y = rng.integers(0, k, m)
    W0 = (0.01 * rng.standard_normal((n, k))).astype(dt)
    b0 = np.zeros(k, dt)
    order = rng.permutation(m)
    W_ref, b_ref = reference.sgd_epoch(X, y, W0.copy(), b0.copy(), order, batch_size=bs,
                                       eta=0.1, alpha=0.01, momentum=0.9, nesterov=True)

    W, b, _, ok = sgd_epoch(X, y, k, W0, b0, order, n_threads=n_threads, alpha=0.01,
                            eta0=0.1, learning_rate="constant", momentum=0.9, nesterov=True,
                            batch_size=bs)
    assert ok
    tol = dict(rtol=2e-4, atol=2e-5) if dt == np.float32 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(W, W_ref, **tol)
    np.testing.assert_allclose(b, b_ref, **tol)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("momentum, nesterov", [(0.0, False), (0.9, False), (0.9, True)])
@pytest.mark.parametrize("weighted", [False, True])
def test_sgd_batches_split_by_features_match_numpy_loop(dt, momentum, nesterov, weighted):
    """Batches with n >= FEATURE_SPLIT_RATIO * B are split by features over
    the threads (_feature_split_epoch): each thread's gradient and update of
    its columns, the partial logits summed between batches. Seven classes
    take every register block (3 + 3 + 1), and the last batch of 13 rows a
    partial block of four."""
    from fastsoftmax._kernels._sgd import feature_split_parts

    rng = np.random.default_rng(5)
    m, n, k, bs = 3 * 64 + 13, 600, 7, 64
    assert feature_split_parts(bs, n, k, 2) == 2
    X = (rng.standard_normal((m, n)) / 8).astype(dt)
    y = rng.integers(0, k, m)
    sw = rng.uniform(0.1, 2.0, m).astype(dt) if weighted else None
    W0 = (0.01 * rng.standard_normal((n, k))).astype(dt)
    b0 = (0.1 * rng.standard_normal(k)).astype(dt)
    order = rng.permutation(m)
    W_ref, b_ref = reference.sgd_epoch(X, y, W0.copy(), b0.copy(), order, batch_size=bs,
                                       eta=0.1, alpha=0.01, momentum=momentum,
                                       nesterov=nesterov, sample_weight=sw)
    X_before = X.copy()
    W, b, steps, ok = sgd_epoch(X, y, k, W0, b0, order, sample_weight=sw, n_threads=2,
                                alpha=0.01, eta0=0.1, learning_rate="constant",
                                momentum=momentum, nesterov=nesterov, batch_size=bs)
    assert ok and steps == 4
    np.testing.assert_allclose(W, W_ref, **TOL[dt])
    np.testing.assert_allclose(b, b_ref, **TOL[dt])
    np.testing.assert_array_equal(X, X_before)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_feature_split_epoch_on_soft_targets_matches_the_row_split(dt):
    """Target matrices (rows of class probabilities) through both epoch
    kernels: split by features on two threads, by rows on one."""
    from fastsoftmax._kernels._sgd import feature_split_parts

    rng = np.random.default_rng(7)
    m, n, k, bs = 150, 640, 11, 40
    assert feature_split_parts(bs, n, k, 2) == 2
    X = (rng.standard_normal((m, n)) / 8).astype(dt)
    Y = rng.dirichlet(np.full(k, 0.5), size=m)
    W0 = (0.01 * rng.standard_normal((n, k))).astype(dt)
    b0 = np.zeros(k, dt)
    order = rng.permutation(m)
    (W_f, b_f, _, ok_f), (W_r, b_r, _, ok_r) = [
        sgd_epoch(X, Y, k, W0, b0, order, n_threads=threads, alpha=0.01, eta0=0.1,
                  learning_rate="invscaling", momentum=0.5, nesterov=False, batch_size=bs)
        for threads in (2, 1)]
    assert ok_f and ok_r
    np.testing.assert_allclose(W_f, W_r, **TOL[dt])
    np.testing.assert_allclose(b_f, b_r, **TOL[dt])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 90), k=st.integers(1, 9), m=st.integers(1, 60),
       batch_size=st.integers(1, 25), parts=st.integers(1, 4),
       momentum=st.sampled_from([0.0, 0.9]), nesterov=st.booleans(),
       fit_intercept=st.booleans(), seed=st.integers(0, 2**16))
def test_feature_split_kernel_on_any_shape_matches_numpy_loop(n, k, m, batch_size, parts,
                                                              momentum, nesterov,
                                                              fit_intercept, seed):
    """The feature-split epoch kernel called directly, whatever the rule would
    choose: ranges of one 16-feature unit, empty ranges (parts > units),
    batches of fewer than four rows and a batch larger than m (float64)."""
    from fastsoftmax._kernels._sgd import _feature_split_epoch, sgd_hyper

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n))
    y = rng.integers(0, k, m)
    W0 = 0.1 * rng.standard_normal((n, k))
    b0 = 0.1 * rng.standard_normal(k) if fit_intercept else np.zeros(k)
    order = rng.permutation(m)
    W_ref, b_ref = reference.sgd_epoch(X, y, W0.copy(), b0.copy(), order,
                                       batch_size=batch_size, eta=0.05, alpha=0.01,
                                       momentum=momentum, nesterov=nesterov,
                                       fit_intercept=fit_intercept)
    data = dataset(X, y, k)
    Wt, b = np.ascontiguousarray(W0.T), b0.copy()
    hyper = sgd_hyper(alpha=0.01, momentum=momentum, eta0=0.05, power_t=0.5, t0=0,
                      steps_per_epoch=1, schedule=0, nesterov=nesterov,
                      fit_intercept=fit_intercept)
    steps = _feature_split_epoch(X, *data.kernel_targets(), order, batch_size, 1.0, hyper,
                                 Wt, b, np.zeros_like(Wt), np.zeros(k),
                                 np.empty((parts, k, n)), np.empty(k), np.zeros(1))
    assert steps == -(-m // batch_size)
    np.testing.assert_allclose(Wt.T, W_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b, b_ref, rtol=1e-10, atol=1e-12)


def test_feature_split_epoch_stops_at_the_same_batch_as_the_row_split():
    """A batch whose logits overflow ends both epoch kernels at the same
    update count, with the same weights from the batches before it."""
    from fastsoftmax._kernels._sgd import feature_split_parts

    rng = np.random.default_rng(6)
    m, n, k, bs = 5 * 32, 512, 16, 32
    assert feature_split_parts(bs, n, k, 2) == 2
    X = (rng.standard_normal((m, n)) / 8).astype(np.float64)
    X[100, 7] = np.inf  # row 100 lies in the fourth batch (shuffle=False order)
    y = rng.integers(0, k, m)
    W0 = 0.01 * rng.standard_normal((n, k))
    b0 = np.zeros(k)
    order = np.arange(m)
    results = [sgd_epoch(X, y, k, W0, b0, order, n_threads=threads, alpha=0.0, eta0=0.1,
                         learning_rate="constant", momentum=0.0, nesterov=False,
                         batch_size=bs)
               for threads in (2, 1)]  # by features, by rows
    (W_f, b_f, steps_f, ok_f), (W_r, b_r, steps_r, ok_r) = results
    assert not ok_f and not ok_r
    assert steps_f == steps_r == 3
    np.testing.assert_allclose(W_f, W_r, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b_f, b_r, rtol=1e-10, atol=1e-12)
    assert np.isfinite(W_f).all() and not np.allclose(W_f, W0)


def test_batches_are_split_by_features_only_where_rows_are_short_against_features():
    from fastsoftmax._kernels._sgd import FEATURE_SPLIT_RATIO, feature_split_parts

    assert feature_split_parts(64, 784, 10, 2) == 2        # MNIST, B = 64
    assert feature_split_parts(64, 784, 10, 16) == 6       # ranges of >= 128 features
    assert feature_split_parts(128, 784, 10, 2) == 1       # n < 8 B: by rows
    assert feature_split_parts(64, 300, 100, 2) == 1
    assert feature_split_parts(1, 784, 10, 2) == 1         # per-sample SGD
    assert feature_split_parts(16, 784, 10, 2) == 1        # below PARALLEL_WORK
    assert feature_split_parts(16, 3000, 10, 2) == 2       # wide rows: from 8 a batch
    assert feature_split_parts(4, 3000, 100, 2) == 1       # below FEATURE_SPLIT_MIN_ROWS
    assert feature_split_parts(32, 300, 2, 2) == 1         # below PARALLEL_WORK
    assert feature_split_parts(64, FEATURE_SPLIT_RATIO * 64, 10, 1) == 1  # one thread


def test_batches_are_split_by_rows_from_little_work():
    from fastsoftmax._kernels._sgd import MIN_CHUNK_ROWS, ROW_SPLIT_WORK, row_split_parts

    assert row_split_parts(64, 100, 10, 2) == 2            # 64,000 multiply-adds a batch
    assert row_split_parts(64, 20, 4, 2) == 2              # 5,120
    assert row_split_parts(64, 20, 2, 2) == 1              # 2,560: below ROW_SPLIT_WORK
    assert 64 * 20 * 2 < ROW_SPLIT_WORK <= 64 * 20 * 4
    assert row_split_parts(16, 784, 10, 2) == 1            # below PARALLEL_MIN_ROWS
    assert row_split_parts(64, 784, 10, 1) == 1            # one thread
    assert row_split_parts(256, 784, 10, 16) == 256 // MIN_CHUNK_ROWS
    assert row_split_parts(64, 784, 10, 16) == 4           # parts of >= MIN_CHUNK_ROWS rows


def test_sgd_invscaling_decays_within_an_epoch_and_across_partial_fit():
    """With two batches per epoch, update t uses eta0 / (1 + t / 2) ** power_t
    (epochs seen, fractionally); partial_fit carries t from call to call."""
    X, y = toy_data()
    X = StandardScaler().fit_transform(X)[::10]
    y = y[::10]
    eta0, power_t, half = 0.5, 0.7, 75
    est = SoftmaxRegression("sgd", learning_rate="invscaling", eta0=eta0, power_t=power_t,
                            momentum=0.0, nesterov=False, alpha=0.0, batch_size=half,
                            shuffle=False)
    W, b = np.zeros((2, 3)), np.zeros(3)
    t = 0
    for _ in range(2):
        est.partial_fit(X, y, classes=[0, 1, 2])
        for start in (0, half):
            rows = np.arange(start, start + half)
            reference.sgd_epoch(X[rows], y[rows], W, b, np.arange(half), batch_size=half,
                                eta=eta0 / (1 + t / 2) ** power_t)
            t += 1
    np.testing.assert_allclose(est.coef_, W.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est.intercept_, b, rtol=1e-10, atol=1e-12)


def test_shuffle_false_makes_sgd_independent_of_random_state():
    X, y = toy_data()
    X = StandardScaler().fit_transform(X)

    def coef(shuffle, seed):
        est = SoftmaxRegression("sgd", shuffle=shuffle, random_state=seed, max_iter=3,
                                batch_size=16)
        with pytest.warns(ConvergenceWarning):
            est.fit(X, y)
        return est.coef_

    np.testing.assert_array_equal(coef(False, 0), coef(False, 1))
    assert not np.array_equal(coef(True, 0), coef(True, 1))
    # shuffle=False visits the rows in order: the reference epoch agrees
    est = SoftmaxRegression("sgd", shuffle=False, momentum=0.0, nesterov=False, alpha=0.0,
                            learning_rate="constant", eta0=0.1, batch_size=16)
    est.partial_fit(X, y, classes=[0, 1, 2])
    W, b = np.zeros((2, 3)), np.zeros(3)
    reference.sgd_epoch(X, y, W, b, np.arange(len(y)), batch_size=16, eta=0.1)
    np.testing.assert_allclose(est.coef_, W.T, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_per_sample_epoch_without_momentum_leaves_the_velocity_of_its_last_step(dtype):
    """Per-sample steps without momentum skip the velocity (it takes no part in
    them); the epoch's last step still leaves it as the momentum update does,
    -eta times the last gradient, so a later momentum > 0 starts from it."""
    from _helpers import dataset, sgd_params

    from fastsoftmax._solvers.sgd import SGDState, run_epoch
    from fastsoftmax._threads import thread_policy

    rng = np.random.default_rng(3)
    m, n, k = 57, 6, 3
    X = rng.standard_normal((m, n)).astype(dtype)
    y = rng.integers(0, k, m)
    W0 = (0.1 * rng.standard_normal((n, k))).astype(dtype)
    b0 = np.zeros(k, dtype)
    order = rng.permutation(m)
    VW, Vb = np.zeros_like(W0), np.zeros_like(b0)
    W_ref, _ = reference.sgd_epoch(X, y, W0.copy(), b0.copy(), order, batch_size=1, eta=0.05,
                                   alpha=0.01, VW=VW, Vb=Vb)
    state = SGDState.start(W0.T, b0)
    with thread_policy(1):
        run_epoch(dataset(X, y, k), state, order,
                  sgd_params(alpha=0.01, eta0=0.05, learning_rate="constant", batch_size=1,
                             momentum=0.0),
                  steps_per_epoch=m)
    np.testing.assert_allclose(state.coef.T, W_ref, **TOL[dtype])
    np.testing.assert_allclose(state.velocity_coef.T, VW, **TOL[dtype])
    np.testing.assert_allclose(state.velocity_intercept, Vb, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_fresh_state_copies_the_weights_onto_cache_lines(dtype):
    """SGDState.start: weights and velocity are new C-ordered arrays on
    64-byte boundaries (the feature-split epoch's threads own whole lines
    of them), holding the caller's weights and zeros; the caller's arrays
    are not shared or changed."""
    from fastsoftmax._launch import ALIGN
    from fastsoftmax._solvers.sgd import SGDState

    rng = np.random.default_rng(4)
    for n, k in [(784, 10), (7, 3), (1, 1)]:
        W0 = rng.standard_normal((n, k)).astype(dtype)
        before = W0.copy()
        state = SGDState.start(W0.T, None)
        for a in (state.coef, state.velocity_coef):
            assert a.flags.c_contiguous and a.dtype == dtype and a.shape == (k, n)
            assert a.ctypes.data % ALIGN == 0
            assert not np.shares_memory(a, W0)
        np.testing.assert_array_equal(state.coef, W0.T)
        assert not state.velocity_coef.any() and not state.intercept.any()
        state.coef[...] += 1
        np.testing.assert_array_equal(W0, before)
