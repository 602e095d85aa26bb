"""Training on Dask: a real LocalCluster with two worker processes."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import fastsoftmax as fs
from fastsoftmax import SoftmaxRegression

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

ALPHA = 1e-3


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cluster start-up chatter is not ours
        # dashboard_address=None still takes port 8787 (distributed's default);
        # ":0" takes a free one, so clusters in other test workers never clash.
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=50)
        c = distributed.Client(cluster)
    yield c
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c.close()
        cluster.close()


def make_data(m=3000, n=20, k=4, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, m)
    X = rng.standard_normal((m, n))
    X[:, :k] += 2 * np.eye(k)[y]
    return X.astype(dtype), y


def as_dask(X, y, chunk=700):
    return (da.from_array(X, chunks=(chunk, X.shape[1])).persist(),
            da.from_array(y, chunks=chunk).persist())


def loss(model, X, y):
    return fs.loss_and_grad(X, y, model.coef_.T, model.intercept_, alpha=ALPHA)[0]


def test_bgd_invscaling_uses_power_t_as_in_memory(client):
    X, y = make_data(m=1200, n=5, k=3)
    dX, dy = as_dask(X, y, chunk=400)
    params = dict(solver="bgd", alpha=ALPHA, max_iter=6, tol=0.0, eta0=0.5,
                  learning_rate="invscaling", power_t=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        on_cluster = SoftmaxRegression(**params).fit(dX, dy)
        in_memory = SoftmaxRegression(**params).fit(X, y)
        other = SoftmaxRegression(**dict(params, power_t=0.1)).fit(dX, dy)
    np.testing.assert_allclose(on_cluster.coef_, in_memory.coef_, rtol=1e-9, atol=1e-12)
    assert not np.allclose(on_cluster.coef_, other.coef_)


@pytest.mark.parametrize("solver", ["lbfgs", "bgd"])
def test_full_batch_equals_in_memory(client, solver):
    X, y = make_data()
    dX, dy = as_dask(X, y)
    params = dict(solver=solver, alpha=ALPHA, tol=1e-8 if solver == "lbfgs" else 1e-6,
                  max_iter=500)
    on_cluster = SoftmaxRegression(**params).fit(dX, dy)
    in_memory = SoftmaxRegression(**params).fit(X, y)
    assert on_cluster.n_iter_ == in_memory.n_iter_
    assert abs(loss(on_cluster, X, y) - loss(in_memory, X, y)) <= 1e-6 * loss(in_memory, X, y)
    np.testing.assert_allclose(on_cluster.coef_, in_memory.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(on_cluster.predict(dX).compute(), in_memory.predict(X))
    np.testing.assert_allclose(on_cluster.predict_proba(dX).compute(),
                               in_memory.predict_proba(X), rtol=1e-6, atol=1e-9)


def test_loss_and_grad_on_dask_equals_in_memory(client):
    X, y = make_data(m=2000, k=5)
    dX, dy = as_dask(X, y, chunk=333)
    rng = np.random.default_rng(1)
    W, b = rng.standard_normal((20, 5)), rng.standard_normal(5)
    sw = rng.uniform(0.5, 2.0, len(y))
    got = fs.loss_and_grad(dX, dy, W, b, alpha=0.1, sample_weight=sw)
    want = fs.loss_and_grad(X, y, W, b, alpha=0.1, sample_weight=sw)
    assert got[0] == pytest.approx(want[0], rel=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-10, atol=1e-14)


def test_sgd_quality_matches_in_memory(client):
    # Twelve epochs of SGD with eta0 = 0.1 end within a few percent of the
    # optimum, where the loss moves by +-2% from one shuffle to the next:
    # compare the means over three seeds.
    X, y = make_data()
    dX, dy = as_dask(X, y, chunk=1000)
    fits = {"cluster": [], "memory": []}
    for seed in range(3):
        params = dict(solver="sgd", alpha=ALPHA, max_iter=12, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fits["cluster"].append(SoftmaxRegression(**params).fit(dX, dy))
            fits["memory"].append(SoftmaxRegression(**params).fit(X, y))
    score = {key: np.mean([m.score(X, y) for m in models]) for key, models in fits.items()}
    mean_loss = {key: np.mean([loss(m, X, y) for m in models]) for key, models in fits.items()}
    assert score["cluster"] >= score["memory"] - 0.01
    assert mean_loss["cluster"] <= 1.02 * mean_loss["memory"]


def test_data_persisted_on_cluster_is_never_gathered(client, monkeypatch):
    # X is generated on the workers and persisted there; the driver never holds it.
    n, k = 30, 3
    Xr = da.random.default_rng(0).standard_normal((40_000, n), chunks=(5_000, n))
    y = (Xr[:, 0] > 0.5).astype(np.int64) + (Xr[:, 1] > 0.5).astype(np.int64)
    Xr, y = client.persist([Xr, y])
    largest = []
    real_gather = client.gather

    def spy(futures, *args, **kwargs):
        out = real_gather(futures, *args, **kwargs)
        sizes = [a.nbytes for a in _arrays(out)]
        largest.append(max(sizes, default=0))
        return out

    monkeypatch.setattr(client, "gather", spy)
    model = SoftmaxRegression("lbfgs", alpha=ALPHA, max_iter=50).fit(Xr, y)
    assert largest, "the solver gathered nothing: it cannot have run on the cluster"
    # Only per-block (n, k) gradients and scalars travel; X is 40000 x 30 doubles.
    assert max(largest) <= (n + 1) * k * 8
    monkeypatch.undo()
    X_local, y_local = Xr.compute(), y.compute()
    in_memory = SoftmaxRegression("lbfgs", alpha=ALPHA, max_iter=50).fit(X_local, y_local)
    np.testing.assert_allclose(model.coef_, in_memory.coef_, rtol=1e-6, atol=1e-8)


def _arrays(obj):
    if isinstance(obj, np.ndarray):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _arrays(item)


def test_dask_dataframe_and_errors(client):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X, y = make_data(m=1200, n=3, k=3)
    df = dd.from_pandas(pd.DataFrame(X, columns=["a", "b", "c"]), npartitions=3)
    ys = dd.from_pandas(pd.Series(y), npartitions=3)
    model = SoftmaxRegression(alpha=ALPHA).fit(df, ys)
    assert list(model.feature_names_in_) == ["a", "b", "c"]
    assert model.n_features_in_ == 3
    in_memory = SoftmaxRegression(alpha=ALPHA).fit(X, y)
    np.testing.assert_allclose(model.coef_, in_memory.coef_, rtol=1e-5, atol=1e-7)

    Xbad = X.copy()
    Xbad[900, 2] = np.nan
    dX, dy = as_dask(Xbad, y, chunk=400)
    with pytest.raises(ValueError, match="row 900, column 2"):
        SoftmaxRegression().fit(dX, dy)
    with pytest.raises(ValueError, match="early_stopping is not supported"):
        SoftmaxRegression(early_stopping=True).fit(*as_dask(X, y))


@pytest.mark.parametrize("inline", [True, False], ids=["inside-tasks", "broadcast"])
def test_weights_sent_once_per_evaluation(client, monkeypatch, inline):
    """Small weights go inside the blocks' tasks (no broadcast); larger ones
    (here: a limit of 0 bytes) are broadcast once per evaluation."""
    from fastsoftmax import _dask

    if not inline:
        monkeypatch.setattr(_dask, "INLINE_BYTES", 0)
    X, y = make_data(m=2000, n=10, k=3)
    dX, dy = as_dask(X, y, chunk=400)  # 5 blocks
    assert dX.numblocks[0] == 5
    scatters, evaluations, block_tasks = [], [], []
    real_scatter, real_submit = client.scatter, client.submit
    real_call = _dask.DaskObjective.loss_grad

    def scatter_spy(data, *args, **kwargs):
        future = real_scatter(data, *args, **kwargs)
        scatters.append(future)
        return future

    def submit_spy(func, *args, **kwargs):
        if func is _dask._block_loss_grad:
            block_tasks.append(args[1])  # the weights the block task receives
        return real_submit(func, *args, **kwargs)

    def call_spy(self, W, b, alpha=0.0):
        evaluations.append(len(scatters))
        return real_call(self, W, b, alpha)

    monkeypatch.setattr(client, "scatter", scatter_spy)
    monkeypatch.setattr(client, "submit", submit_spy)
    monkeypatch.setattr(_dask.DaskObjective, "loss_grad", call_spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = SoftmaxRegression("bgd", alpha=ALPHA, max_iter=7, tol=0.0,
                                  learning_rate="constant", eta0=0.1).fit(dX, dy)
    monkeypatch.undo()
    assert model.n_iter_ == 7
    assert len(evaluations) >= model.n_iter_
    assert len(block_tasks) == 5 * len(evaluations)
    if inline:
        # No broadcast: every block task carries the weights themselves.
        assert scatters == []
        for weights in block_tasks:
            assert isinstance(weights, tuple) and weights[0].shape == (3, 10)
        return
    # One scatter per evaluation of the objective, not one per block and evaluation,
    assert len(scatters) == len(evaluations)
    # and every block task of an evaluation receives that evaluation's one broadcast.
    for i, weights in enumerate(scatters):
        assert all(w is weights for w in block_tasks[5 * i: 5 * i + 5])


def test_verbose_draws_the_progress_bar(client, capsys):
    X, y = make_data(m=1200, n=5, k=3)
    dX, dy = as_dask(X, y, chunk=400)
    model = SoftmaxRegression("lbfgs", alpha=ALPHA, verbose=1, max_iter=300).fit(dX, dy)
    out, err = capsys.readouterr()
    assert "lbfgs" in err and "loss=" in err and "/300" in err, err
    assert out == ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        SoftmaxRegression("bgd", alpha=ALPHA, verbose=2, max_iter=3, tol=0.0).fit(dX, dy)
        SoftmaxRegression("sgd", alpha=ALPHA, verbose=2, max_iter=2, tol=0.0,
                          random_state=0).fit(dX, dy)
    out, err = capsys.readouterr()
    assert "bgd iteration 3: loss" in out and "sgd iteration 2: loss" in out, out
    assert "3/3" in err and "2/2" in err and "epoch" in err, err
    SoftmaxRegression("lbfgs", alpha=ALPHA).fit(dX, dy)  # verbose=0: silent
    assert capsys.readouterr() == ("", "")
    assert model.n_iter_ > 0


def test_loss_and_grad_on_dask_dataframe(client):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X, y = make_data(m=900, n=4, k=3)
    df = dd.from_pandas(pd.DataFrame(X, columns=list("abcd")), npartitions=3)
    rng = np.random.default_rng(2)
    W, b = rng.standard_normal((4, 3)), rng.standard_normal(3)
    want = fs.loss_and_grad(X, y, W, b, alpha=0.01)
    for labels in (dd.from_pandas(pd.Series(y), npartitions=3), y):  # dask or numpy y
        got = fs.loss_and_grad(df, labels, W, b, alpha=0.01)
        assert got[0] == pytest.approx(want[0], rel=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(got[2], want[2], rtol=1e-10, atol=1e-14)


def test_fit_dask_X_with_numpy_y(client):
    X, y = make_data(m=1500, n=6, k=3)
    dX = da.from_array(X, chunks=(500, 6)).persist()
    on_cluster = SoftmaxRegression(alpha=ALPHA, tol=1e-8).fit(dX, y)
    in_memory = SoftmaxRegression(alpha=ALPHA, tol=1e-8).fit(X, y)
    np.testing.assert_allclose(on_cluster.coef_, in_memory.coef_, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="y has 1499 entries but X has 1500 rows"):
        SoftmaxRegression().fit(dX, y[:-1])


# ------------------------------------------------------ parity with memory
PARITY = {
    "alpha": dict(alpha=0.05),
    "no intercept": dict(fit_intercept=False),
    "sample_weight": dict(sample_weight=True),
    "class_weight dict": dict(class_weight={0: 2.0, 3: 0.5}),
    "balanced + sample_weight": dict(class_weight="balanced", sample_weight=True),
    "warm_start": dict(warm_start=True),
}


@pytest.mark.parametrize("solver", ["newton", "lbfgs", "bgd"])
@pytest.mark.parametrize("case", list(PARITY))
def test_every_model_shaping_parameter_gives_the_in_memory_model(client, solver, case):
    X, y = make_data(m=1800, n=8, k=4, seed=3)
    y[:200] = 0  # unequal class counts, so that "balanced" means something
    dX, dy = as_dask(X, y, chunk=500)  # 4 blocks, the last one short
    params = dict(PARITY[case])
    sw = None
    if params.pop("sample_weight", False):
        sw = np.random.default_rng(4).uniform(0.0, 3.0, len(y))
    params = dict(dict(solver=solver, alpha=ALPHA, max_iter=300,
                       tol=1e-7 if solver == "bgd" else 1e-9), **params)
    models = []
    for Xin, yin in ((dX, dy), (X, y)):
        model = SoftmaxRegression(**params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            if params.get("warm_start"):
                # The second fit starts from the first one's solution.
                model.set_params(max_iter=3).fit(Xin, yin, sample_weight=sw)
                model.set_params(max_iter=params["max_iter"])
            models.append(model.fit(Xin, yin, sample_weight=sw))
    on_cluster, in_memory = models
    assert on_cluster.n_iter_ == in_memory.n_iter_
    np.testing.assert_allclose(on_cluster.coef_, in_memory.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(on_cluster.intercept_, in_memory.intercept_, rtol=1e-6,
                               atol=1e-8)


BAD_LABELS = {
    "continuous": lambda y: y + 0.5,
    "NaN": lambda y: np.where(np.arange(len(y)) == 7, np.nan, y.astype(float)),
    "one class": lambda y: np.zeros_like(y),
}


@pytest.mark.parametrize("case", list(BAD_LABELS))
def test_bad_labels_get_the_in_memory_error(client, case):
    X, y = make_data(m=600, n=4, k=3)
    bad = BAD_LABELS[case](y)
    with pytest.raises(ValueError) as in_memory:
        SoftmaxRegression().fit(X, bad)
    dX, dy = as_dask(X, bad, chunk=200)
    with pytest.raises(ValueError) as on_cluster:
        SoftmaxRegression().fit(dX, dy)
    assert str(on_cluster.value) == str(in_memory.value)


def test_sgd_on_blocks_of_whole_batches_is_the_in_memory_sgd(client):
    """Without shuffling, and with blocks holding whole mini-batches, an epoch
    over the blocks in turn visits exactly the in-memory batches: weights and
    loss_curve_ (the mean epoch loss plus the penalty at the epoch's final
    weights) must agree to rounding."""
    X, y = make_data(m=3000, n=10, k=4)
    dX, dy = as_dask(X, y, chunk=1000)
    sw = np.random.default_rng(5).uniform(0.5, 2.0, len(y))
    params = dict(solver="sgd", alpha=0.01, batch_size=50, shuffle=False, max_iter=4,
                  tol=0.0, learning_rate="invscaling", eta0=0.05, n_iter_no_change=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        on_cluster = SoftmaxRegression(**params).fit(dX, dy, sample_weight=sw)
        in_memory = SoftmaxRegression(**params).fit(X, y, sample_weight=sw)
    assert len(on_cluster.loss_curve_) == len(in_memory.loss_curve_) == 4
    np.testing.assert_allclose(on_cluster.loss_curve_, in_memory.loss_curve_, rtol=1e-10)
    np.testing.assert_allclose(on_cluster.coef_, in_memory.coef_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("solver", ["newton", "lbfgs", "bgd"])
def test_sparse_blocks_train_the_in_memory_model(client, solver):
    """Row blocks that are scipy.sparse matrices: the full-batch solvers, and predict."""
    from fastsoftmax.datasets import make_text_like

    X, y = make_text_like(n_samples=1500, n_features=4000, n_classes=3, nnz_per_row=25,
                          random_state=1)
    dX = da.from_array(X, chunks=(500, X.shape[1]), asarray=False).persist()
    dy = da.from_array(y, chunks=500).persist()
    params = dict(solver=solver, alpha=ALPHA, tol=1e-8, max_iter=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        on_cluster = SoftmaxRegression(**params).fit(dX, dy)
        in_memory = SoftmaxRegression(**params).fit(X, y)
    assert on_cluster.n_iter_ == in_memory.n_iter_
    # bgd stops at max_iter here, short of the optimum, and 100 momentum
    # steps carry rounding-level differences of the summed gradients (Dask
    # adds the blocks in another order) into the weights: in memory alone,
    # 1 thread against 2 gave weights 7e-8 apart (4.8e-6 relative).
    tol = dict(rtol=1e-5, atol=5e-7) if solver == "bgd" else dict(rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(on_cluster.coef_, in_memory.coef_, **tol)
    np.testing.assert_array_equal(on_cluster.predict(dX).compute(), in_memory.predict(X))
    bad = X.copy()
    bad.data[bad.indptr[1234]] = np.nan
    with pytest.raises(ValueError, match="row 1234 has a NaN"):
        SoftmaxRegression(**params).fit(da.from_array(bad, chunks=(500, X.shape[1]),
                                                      asarray=False), dy)
