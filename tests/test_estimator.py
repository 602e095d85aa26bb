"""SoftmaxRegression (fastsoftmax._estimator): solvers against scikit-learn's
optimum, the estimator contract, partial_fit, reproducibility, stopping rules
and errors, and what predict allocates. Saving and loading are in
test_persistence.py, parameter checks in test_params.py, one solver's own
behaviour in test_solvers_<solver>.py."""

import tracemalloc
import warnings

import numpy as np
import pytest
from _helpers import parallel_launches, toy_data
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

from fastsoftmax import DivergenceWarning, SoftmaxRegression, loss_and_grad, reference

C = 1.0


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def sklearn_optimum(digits):
    """scikit-learn's LogisticRegression(C) optimum and its loss J (see README.md)."""
    X, y = digits
    alpha = 1.0 / (C * len(y))
    sk = LogisticRegression(C=C, tol=1e-10, max_iter=10_000).fit(X, y)
    loss = loss_and_grad(X, y, sk.coef_.T.copy(), sk.intercept_.copy(), alpha=alpha)[0]
    return sk, loss, alpha


def fitted_loss(est, X, y, alpha):
    return loss_and_grad(X, y, est.coef_.T, est.intercept_, alpha=alpha)[0]


# --------------------------------------------------------------- optimality
def test_lbfgs_matches_sklearn_optimum(digits, sklearn_optimum):
    X, y = digits
    sk, opt, alpha = sklearn_optimum
    est = SoftmaxRegression("lbfgs", alpha=alpha, tol=1e-10, max_iter=5000).fit(X, y)
    assert est.coef_.dtype == np.float64
    assert abs(fitted_loss(est, X, y, alpha) - opt) <= 1e-6 * opt
    np.testing.assert_array_equal(est.predict(X), sk.predict(X))
    np.testing.assert_allclose(est.predict_proba(X), sk.predict_proba(X), atol=1e-4)


@pytest.mark.parametrize(
    "params",
    [
        dict(solver="bgd", max_iter=3000, tol=1e-6),
        dict(solver="sgd", batch_size=64, tol=1e-5, n_iter_no_change=10, max_iter=1000),
        dict(solver="sgd", batch_size=1, eta0=0.003, tol=1e-5, n_iter_no_change=10,
             max_iter=1000),
    ],
    ids=["bgd", "sgd-64", "sgd-1"],
)
def test_first_order_solvers_reach_the_optimum(digits, sklearn_optimum, params):
    X, y = digits
    sk, opt, alpha = sklearn_optimum
    est = SoftmaxRegression(alpha=alpha, random_state=0, **params).fit(X, y)
    assert est.n_iter_ < params["max_iter"]  # stopped by its rule, in bounded epochs
    assert fitted_loss(est, X, y, alpha) <= 1.01 * opt
    assert est.score(X, y) >= sk.score(X, y) - 0.01


@pytest.mark.parametrize("solver", ["newton", "lbfgs", "bgd", "sgd"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_toy_problem_every_solver(solver, dtype):
    X, y = toy_data()
    X = StandardScaler().fit_transform(X).astype(dtype)
    est = SoftmaxRegression(solver, random_state=0).fit(X, y)
    assert est.score(X, y) >= 0.97
    assert est.coef_.dtype == dtype and est.intercept_.dtype == dtype
    assert est.predict_proba(X).dtype == dtype
    assert np.isfinite(est.loss_curve_).all() and est.loss_curve_[-1] < est.loss_curve_[0]


def test_defaults_reach_a_good_model_without_tuning(digits, sklearn_optimum):
    X, y = digits
    sk, _, _ = sklearn_optimum
    for solver in ("lbfgs", "sgd", "bgd"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est = SoftmaxRegression(solver, random_state=0).fit(X, y)
        assert est.score(X, y) >= sk.score(X, y) - 0.01, solver


def test_float32_trains_in_float32(digits, sklearn_optimum):
    X, y = digits
    _, opt, alpha = sklearn_optimum
    X32 = X.astype(np.float32)
    est = SoftmaxRegression("lbfgs", alpha=alpha, tol=1e-5, max_iter=2000).fit(X32, y)
    assert est.coef_.dtype == np.float32
    assert fitted_loss(est, X, y, alpha) <= opt * (1 + 1e-3)


# ---------------------------------------------------------- sklearn contract
@pytest.mark.parametrize("solver", ["auto", "lbfgs", "sgd", "bgd"])  # auto is newton
def test_check_estimator_passes_in_full(solver):
    # sgd and bgd run out of max_iter on some of the checks' data; that
    # warning is beside what the checks test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        results = check_estimator(SoftmaxRegression(solver), on_fail=None, on_skip=None)
    failed = [(r["check_name"], str(r["exception"])[:200])
              for r in results if r["status"] == "failed"]
    assert failed == []
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    # Only the array-API check may skip (it needs SCIPY_ARRAY_API set).
    assert skipped <= {"check_array_api_input"}


def test_string_labels_and_attributes():
    X, y = toy_data()
    names = np.array(["red", "green", "blue"])[y]
    est = SoftmaxRegression().fit(X, names)
    assert list(est.classes_) == ["blue", "green", "red"]
    assert est.coef_.shape == (3, 2) and est.intercept_.shape == (3,)
    assert est.n_features_in_ == 2
    assert set(est.predict(X)) <= set(names)
    assert (est.predict(X) == names).mean() > 0.97
    P = est.predict_proba(X)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.exp(est.predict_log_proba(X)), P, rtol=1e-10, atol=1e-300)
    np.testing.assert_array_equal(est.classes_[est.decision_function(X).argmax(1)],
                                  est.predict(X))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [3, 40, 100])
def test_predictions_match_numpy_with_any_intercept_layout(dtype, k):
    """predict_proba, predict_log_proba and decision_function against NumPy,
    on both sides of LANES_FROM classes (the row passes of many classes run
    in explicit vectors), with the model's attributes set by hand: a strided
    intercept_ (a column of a matrix) is taken as well as a contiguous one."""
    from scipy.special import log_softmax as sp_log_softmax
    from scipy.special import softmax as sp_softmax

    rng = np.random.default_rng(k)
    X = rng.standard_normal((300, 20)).astype(dtype)
    y = np.arange(300) % k
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the weights are set below
        est = SoftmaxRegression(max_iter=2).fit(X, y)
    est.coef_ = rng.standard_normal((k, 20)).astype(dtype)
    est.intercept_ = rng.standard_normal((k, 2)).astype(dtype)[:, 1]
    Z = X.astype(np.float64) @ est.coef_.T.astype(np.float64) + est.intercept_
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(est.decision_function(X), Z, rtol=tol, atol=tol)
    np.testing.assert_allclose(est.predict_proba(X), sp_softmax(Z, axis=1), rtol=tol, atol=tol)
    np.testing.assert_allclose(est.predict_log_proba(X), sp_log_softmax(Z, axis=1),
                               rtol=tol, atol=tol)


def test_feature_names_from_dataframe():
    pd = pytest.importorskip("pandas")
    X, y = toy_data()
    df = pd.DataFrame(X, columns=["width", "height"])
    est = SoftmaxRegression().fit(df, y)
    assert list(est.feature_names_in_) == ["width", "height"]
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        plain = est.predict(X)
    np.testing.assert_array_equal(est.predict(df), plain)
    with pytest.raises(ValueError, match="feature names"):
        est.predict(df.rename(columns={"width": "w"}))


def test_class_weight_balanced_equals_explicit_weights():
    X, y = toy_data()
    X, y = X[:1100], y[:1100]  # classes of 500, 500, 100
    balanced = SoftmaxRegression(class_weight="balanced", tol=1e-10, max_iter=1000).fit(X, y)
    counts = np.bincount(y)
    sw = (len(y) / (3 * counts))[y]
    explicit = SoftmaxRegression(tol=1e-10, max_iter=1000).fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(balanced.coef_, explicit.coef_, rtol=1e-6, atol=1e-8)
    as_dict = SoftmaxRegression(class_weight=dict(enumerate(len(y) / (3 * counts))),
                                tol=1e-10, max_iter=1000).fit(X, y)
    np.testing.assert_allclose(as_dict.coef_, explicit.coef_, rtol=1e-6, atol=1e-8)


def test_integer_sample_weight_equals_repeating_rows():
    X, y = toy_data()
    rng = np.random.default_rng(1)
    w = rng.integers(0, 3, len(y))
    weighted = SoftmaxRegression(tol=1e-10, max_iter=1000).fit(X, y, sample_weight=w)
    repeated = SoftmaxRegression(tol=1e-10, max_iter=1000).fit(np.repeat(X, w, 0),
                                                               np.repeat(y, w))
    np.testing.assert_allclose(weighted.coef_, repeated.coef_, rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------- partial_fit
def test_partial_fit_matches_fit_quality(digits):
    X, y = digits
    epochs = 20
    params = dict(solver="sgd", batch_size=32, learning_rate="constant", eta0=0.01,
                  random_state=0)
    full = SoftmaxRegression(max_iter=epochs, n_iter_no_change=epochs + 1, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        full.fit(X, y)
    online = SoftmaxRegression(**params)
    chunks = np.array_split(np.arange(len(y)), 6)
    rng = np.random.default_rng(0)
    for _ in range(epochs):
        for idx in rng.permutation(len(chunks)):
            online.partial_fit(X[chunks[idx]], y[chunks[idx]], classes=np.arange(10))
    assert online.score(X, y) >= full.score(X, y) - 0.01
    alpha = full.alpha
    assert fitted_loss(online, X, y, alpha) <= 1.1 * fitted_loss(full, X, y, alpha)
    assert online.n_iter_ == epochs * len(chunks)


def test_partial_fit_classes_contract():
    X, y = toy_data()
    est = SoftmaxRegression()
    with pytest.raises(ValueError, match="classes must be given"):
        est.partial_fit(X, y)
    est.partial_fit(X[y < 2], y[y < 2], classes=[0, 1, 2])
    assert list(est.classes_) == [0, 1, 2]
    coef = est.coef_.copy()
    bad = y.copy()
    bad[7] = 5
    with pytest.raises(ValueError, match=r"y\[7\] = 5 is not one of the classes"):
        est.partial_fit(X, bad)
    with pytest.raises(ValueError, match="differs from the classes"):
        est.partial_fit(X, y, classes=[0, 1])
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[:, :1], y)
    np.testing.assert_array_equal(est.coef_, coef)  # rejected calls changed nothing


def test_partial_fit_keeps_float32():
    X, y = toy_data()
    est = SoftmaxRegression().partial_fit(X.astype(np.float32), y, classes=[0, 1, 2])
    est.partial_fit(X, y)  # float64 data is cast to the model's float32
    assert est.coef_.dtype == np.float32


# ----------------------------------------------------------- reproducibility
@pytest.mark.parametrize("solver", ["sgd", "bgd", "lbfgs", "newton"])
def test_same_random_state_gives_identical_weights(digits, solver):
    X, y = digits
    fits = [SoftmaxRegression(solver, random_state=3, max_iter=30, early_stopping=True)
            for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for est in fits:
            est.fit(X, y)
    np.testing.assert_array_equal(fits[0].coef_, fits[1].coef_)
    np.testing.assert_array_equal(fits[0].intercept_, fits[1].intercept_)


@pytest.mark.parametrize("solver", ["newton", "lbfgs", "bgd", "sgd"])
def test_threads_change_results_only_by_rounding(digits, solver):
    X, y = digits
    models = []
    for n_threads in (1, 2):
        est = SoftmaxRegression(solver, random_state=0, n_threads=n_threads, max_iter=20)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            models.append(est.fit(X, y))
    # lbfgs/bgd: only the reduction order differs; sgd with batch 64 splits each
    # batch over threads. Bounded drift after 20 iterations.
    np.testing.assert_allclose(models[0].coef_, models[1].coef_, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_a_small_prediction_runs_one_chunk_on_the_calling_thread(digits, sparse, monkeypatch):
    """Below _launch.SERIAL_WORK predict_proba, predict_log_proba and the
    decision function launch one chunk (at one thread: no worker to wake
    after an idle spell), with the numbers of a launch on every thread, to
    the last bit (a row goes through the same GEMM block either way)."""
    import scipy.sparse

    from fastsoftmax import _launch, _sparse
    from fastsoftmax._kernels import _predict

    X, y = digits
    est = SoftmaxRegression(n_threads=2).fit(X, y)
    chunks = []
    if sparse:
        X = scipy.sparse.csr_matrix(X)
        launch = _sparse._sparse_logits
        monkeypatch.setattr(_sparse, "_sparse_logits", lambda *a: (
            chunks.append(a[-1]) or launch(*a)))
    else:
        for name in ("_scores", "_scores_lanes"):
            kernel = getattr(_predict, name)
            monkeypatch.setattr(_predict, name, lambda *a, kernel=kernel: (
                chunks.append(a[-1].shape[0]) or kernel(*a)))
    # Calls back to back would count as a loop (_launch.calls_in_a_loop).
    monkeypatch.setattr(_launch, "LOOP_SPAN_S", float("inf"))
    rows = X[:200]
    small = [est.predict_proba(rows), est.predict_log_proba(rows), est.decision_function(rows)]
    with parallel_launches():
        every = [est.predict_proba(rows), est.predict_log_proba(rows),
                 est.decision_function(rows)]
    assert chunks == [1, 1, 1, 2, 2, 2]
    for a, b in zip(small, every, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_sparse_prediction_counts_its_stored_entries(monkeypatch):
    """A CSR batch's work is counted as its gradient's (_launch.sparse_launch_work):
    one whose stored entries would count as few dense features (below
    _launch.SERIAL_WORK) but whose one-thread time is that of a dense call
    above it launches on every thread."""
    import scipy.sparse

    from fastsoftmax import _launch, _sparse

    m, n, k = 2000, 1000, 10
    X = scipy.sparse.random(m, n, density=0.1, format="csr", random_state=1)
    assert (_launch.launch_work(m, X.nnz // m, k) < _launch.SERIAL_WORK
            <= _launch.sparse_launch_work(m, X.nnz, k))
    est = SoftmaxRegression(n_threads=2).fit(X[:200], np.arange(200) % k)
    chunks = []
    launch = _sparse._sparse_logits
    monkeypatch.setattr(_sparse, "_sparse_logits", lambda *a: (
        chunks.append(a[-1]) or launch(*a)))
    monkeypatch.setattr(_launch, "LOOP_SPAN_S", float("inf"))
    got = est.predict_proba(X)
    assert chunks == [2]
    np.testing.assert_allclose(got, est.predict_proba(X.toarray()), rtol=1e-12)


# -------------------------------------------------------- stopping and errors
def test_divergent_learning_rate_keeps_finite_weights():
    X, y = toy_data()
    X = X * 1e3
    for solver in ("sgd", "bgd"):
        # Overflow: the loss becomes inf; the last finite weights are kept.
        est = SoftmaxRegression(solver, learning_rate="constant", eta0=1e6, momentum=0.9,
                                alpha=10.0, max_iter=200, n_iter_no_change=1000)
        with pytest.warns(DivergenceWarning, match="non-finite.*eta=1e\\+06"):
            est.fit(X, y)
        assert np.isfinite(est.coef_).all() and np.isfinite(est.intercept_).all()
        # A stall above the starting loss is reported too, not called converged.
        est = SoftmaxRegression(solver, learning_rate="constant", eta0=1e6, momentum=0.9,
                                alpha=10.0, max_iter=200)
        with pytest.warns(DivergenceWarning, match="eta=1e\\+06"):
            est.fit(X, y)
        assert np.isfinite(est.coef_).all()


def _held_out_rows(est, y):
    """The rows fit held out for early stopping, recomputed the way fit draws
    them: the first draw of the random_state's generator seeds a stratified
    split of validation_fraction."""
    from sklearn.model_selection import StratifiedShuffleSplit

    seed = int(np.random.default_rng(est.random_state).integers(np.iinfo(np.int32).max))
    splitter = StratifiedShuffleSplit(test_size=est.validation_fraction, random_state=seed)
    return next(splitter.split(np.zeros(len(y)), y))


@pytest.mark.parametrize("solver", ["sgd", "bgd", "lbfgs", "newton"])
def test_early_stopping_keeps_best_validation_weights(digits, solver):
    X, y = digits
    params = dict(sgd=dict(learning_rate="constant", eta0=0.05),
                  bgd=dict(learning_rate="constant", eta0=2.0, tol=0.0, alpha=0.0),
                  lbfgs=dict(alpha=0.0), newton=dict(alpha=0.0, tol=1e-10))[solver]
    est = SoftmaxRegression(solver, early_stopping=True, random_state=0, max_iter=200,
                            validation_fraction=0.2, **params)
    est.fit(X, y)
    curve = np.asarray(est.validation_loss_curve_)
    assert len(curve) == est.n_iter_ and est.n_iter_ < 200  # stopped by the held-out loss
    best = int(np.argmin(curve))
    # the held-out loss got worse (or stalled) after its best: the final
    # iterate is not the best one, so keeping the best is a real choice
    assert curve[-1] > curve[best]
    train, val = _held_out_rows(est, y)
    # The kept weights have exactly the best held-out loss (not the last one).
    held_out = loss_and_grad(X[val], y[val], est.coef_.T, est.intercept_, alpha=est.alpha)[0]
    assert held_out == pytest.approx(curve[best], rel=1e-10)
    assert held_out < curve[-1]
    assert est.score(X[val], y[val]) > 0.9


@pytest.mark.parametrize("solver", ["sgd", "bgd"])
@pytest.mark.parametrize("power_t", [0.25, 1.0])
def test_invscaling_follows_eta0_over_1_plus_t_to_the_power_t(solver, power_t):
    """Three full-batch steps with eta_t = eta0 / (1 + t) ** power_t, t = 0, 1, 2,
    against the reference formulas (sgd: one batch of all rows per epoch)."""
    X, y = toy_data()
    X = StandardScaler().fit_transform(X)[::10]  # 150 rows
    y = y[::10]
    eta0, alpha, steps = 0.5, 0.01, 3
    est = SoftmaxRegression(solver, learning_rate="invscaling", eta0=eta0, power_t=power_t,
                            momentum=0.0, nesterov=False, alpha=alpha, max_iter=steps,
                            tol=0.0, n_iter_no_change=steps + 1, batch_size=len(y),
                            shuffle=False, random_state=0)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        est.fit(X, y)
    W, b = np.zeros((2, 3)), np.zeros(3)
    for t in range(steps):
        eta = eta0 / (1 + t) ** power_t
        if solver == "sgd":
            reference.sgd_epoch(X, y, W, b, np.arange(len(y)), batch_size=len(y), eta=eta,
                                alpha=alpha)
        else:
            _, gW, gb = reference.loss_and_grad(X, y, W, b, alpha=alpha)
            W, b = W - eta * gW, b - eta * gb
    np.testing.assert_allclose(est.coef_, W.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est.intercept_, b, rtol=1e-10, atol=1e-12)
    # and not the power_t = 0.5 schedule
    if power_t != 0.5:
        other = SoftmaxRegression(**{**est.get_params(), "power_t": 0.5})
        with pytest.warns(ConvergenceWarning):
            other.fit(X, y)
        assert np.abs(other.coef_ - est.coef_).max() > 1e-3


def _stopping_epoch(values, tol, patience):
    """The 1-based iteration at which the no-improvement rule fires."""
    best, count = np.inf, 0
    for i, v in enumerate(values):
        count = 0 if v < best - tol else count + 1
        best = min(best, v)
        if count >= patience:
            return i + 1
    return None


@pytest.mark.parametrize("solver", ["sgd", "bgd"])
def test_n_iter_no_change_controls_stopping(solver):
    X, y = toy_data()
    X = StandardScaler().fit_transform(X)
    tol = 1e-3
    runs = {}
    for patience in (2, 10):
        est = SoftmaxRegression(solver, learning_rate="constant", eta0=0.1, tol=tol,
                                n_iter_no_change=patience, max_iter=2000, random_state=0)
        est.fit(X, y)  # no ConvergenceWarning: stopped by the rule, not max_iter
        # bgd's loss_curve_ starts with the loss of the starting weights,
        # which the rule does not see; sgd's holds one mean loss per epoch.
        watched = est.loss_curve_[1:] if solver == "bgd" else est.loss_curve_
        assert len(watched) == est.n_iter_
        assert est.n_iter_ == _stopping_epoch(watched, tol, patience)
        runs[patience] = est.n_iter_
    assert runs[10] >= runs[2] + 8


def test_partial_fit_refuses_balanced_class_weight():
    X, y = toy_data()
    est = SoftmaxRegression("sgd", class_weight="balanced")
    with pytest.raises(ValueError, match=r"class_weight='balanced' is not supported by "
                                         r"partial_fit.*compute_class_weight"):
        est.partial_fit(X, y, classes=[0, 1, 2])
    assert not hasattr(est, "coef_") and not hasattr(est, "n_features_in_")
    # a fitted model is left exactly as it was
    est = SoftmaxRegression("sgd").partial_fit(X, y, classes=[0, 1, 2])
    before = (est.coef_.copy(), est.intercept_.copy(), est.n_iter_)
    est.set_params(class_weight="balanced")
    with pytest.raises(ValueError, match="balanced"):
        est.partial_fit(X, y)
    np.testing.assert_array_equal(est.coef_, before[0])
    np.testing.assert_array_equal(est.intercept_, before[1])
    assert est.n_iter_ == before[2]
    # the suggested replacement works
    from sklearn.utils.class_weight import compute_class_weight

    classes = np.arange(3)
    weights = compute_class_weight("balanced", classes=classes, y=y)
    est.set_params(class_weight=dict(zip(classes, weights, strict=True))).partial_fit(X, y)


def test_warm_start_continues():
    X, y = toy_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        cold = SoftmaxRegression("bgd", max_iter=3, learning_rate="constant").fit(X, y)
        warm = SoftmaxRegression("bgd", max_iter=3, learning_rate="constant",
                                 warm_start=True).fit(X, y)
        warm.fit(X, y)
    assert warm.loss_curve_[0] < cold.loss_curve_[0]


def test_rejected_fit_leaves_model_unchanged():
    X, y = toy_data()
    est = SoftmaxRegression().fit(X, y)
    before = (est.coef_.copy(), est.intercept_.copy(), est.classes_.copy())
    Xbad = X.copy()
    Xbad[10, 1] = np.nan
    with pytest.raises(ValueError, match="row 10, column 1"):
        est.fit(Xbad, y)
    with pytest.raises(ValueError, match="at least 2 classes"):
        est.fit(X, np.zeros(len(y)))
    for got, want in zip((est.coef_, est.intercept_, est.classes_), before, strict=True):
        np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------- allocation
def test_predict_allocates_only_its_answer():
    rng = np.random.default_rng(0)
    m, n, k = 20_000, 20, 50
    X = rng.standard_normal((m, n))
    y = rng.integers(0, k, m)
    est = SoftmaxRegression(max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    logits_bytes = m * k * 8

    def peak_of(method, X):
        getattr(est, method)(X)  # compile and warm up
        tracemalloc.start()
        out = getattr(est, method)(X)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return out, peak

    labels, peak = peak_of("predict", X)
    assert labels.shape == (m,)
    # The (m,) codes and labels plus one block of logits per thread (at
    # most _LABEL_Z_BYTES each); far below the logits.
    from fastsoftmax._prediction import _LABEL_Z_BYTES
    from fastsoftmax._threads import blas_workers

    assert peak < 2 * m * 8 + blas_workers(None) * _LABEL_Z_BYTES + 100_000
    assert peak < logits_bytes / 10 or blas_workers(None) > 8
    # The (m, k) answer itself and nothing else of its size: no (m, k)
    # boolean mask (m k bytes = 1 MB here), no second (m, k) array.
    for method in ("predict_proba", "predict_log_proba", "decision_function"):
        out, peak = peak_of(method, X)
        assert out.shape == (m, k) and out.nbytes == logits_bytes
        assert peak < logits_bytes + 100_000, method
    # Binary decision_function returns (m,): it never builds (m, 2) logits.
    binary = SoftmaxRegression(max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        binary.fit(X, y % 2)
    est = binary
    out, peak = peak_of("decision_function", X)
    assert out.shape == (m,)
    assert peak < m * 8 + 100_000
    Z = X @ binary.coef_.T + binary.intercept_
    np.testing.assert_allclose(out, Z[:, 1] - Z[:, 0], rtol=1e-10, atol=1e-12)


def test_a_prediction_after_an_idle_spell_follows_the_measured_wake_up(monkeypatch):
    """predict_proba above SERIAL_WORK after an idle spell (_launch.COLD_GAP_S)
    wakes the workers on the model's n_threads with a timed empty region and
    runs on them while fewer than WAKE_SAMPLES wake-ups are known; with a
    known wake-up longer than its work takes it runs one chunk, with the
    numbers of a launch on every thread. The clock is the test's."""
    import collections
    import math

    import scipy.sparse

    from fastsoftmax import _launch, _sparse
    from fastsoftmax._kernels import _checks

    m, n, k = 2000, 1000, 10
    X = scipy.sparse.random(m, n, density=0.1, format="csr", random_state=1)
    assert _launch.SERIAL_WORK <= _launch.sparse_launch_work(m, X.nnz, k) < 0.01 / _launch.UNIT_S
    est = SoftmaxRegression(n_threads=2).fit(X[:200], np.arange(200) % k)
    chunks, probes = [], []
    launch = _sparse._sparse_logits
    monkeypatch.setattr(_sparse, "_sparse_logits", lambda *a: (
        chunks.append(a[-1]) or launch(*a)))
    region = _checks._first_nonfinite_row
    monkeypatch.setattr(_checks, "_first_nonfinite_row", lambda rows, bad: (
        probes.append(rows.shape[0]) or region(rows, bad)))
    now = [1000.0]
    monkeypatch.setattr(_launch, "_clock", lambda: now[0])
    monkeypatch.setattr(_launch._calls, "last_end", -math.inf)
    monkeypatch.setattr(_launch._calls, "last_region_end", now[0])
    monkeypatch.setattr(_launch, "_probe_loaded", True)
    samples = collections.deque(maxlen=_launch.WAKE_WINDOW)
    monkeypatch.setattr(_launch, "_wake_samples", samples)
    monkeypatch.setattr(_launch, "COLD_SERIAL_MAX", 1 << 28)
    now[0] += 2 * _launch.COLD_GAP_S
    every = est.predict_proba(X)
    assert chunks == [2] and probes == [2] and len(samples) == 1
    samples.extend([0.01] * _launch.WAKE_SAMPLES)  # known: 10 ms
    now[0] += 2 * _launch.COLD_GAP_S
    one = est.predict_proba(X)
    assert chunks == [2, 1] and probes == [2]
    np.testing.assert_array_equal(one, every)
