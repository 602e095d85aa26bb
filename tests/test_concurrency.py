"""Concurrency and reproducibility.

- One fitted model used from several Python threads at once predicts what
  it predicts sequentially; BLAS's thread count is the same afterwards.
- Two fits in two threads give the models of two sequential fits.
- ``n_threads`` set for one call never leaks into another thread's calls.
- Under Numba's non-thread-safe "workqueue" layer, concurrent calls are
  serialised instead of aborting the process.
- Same ``random_state`` => bit-identical weights; 1 and 2 threads agree to
  a stated tolerance.
- Numba's disk cache shared by processes started at once: no crash, and a
  later process loads every kernel from it.
- Dense labels, computed on Python threads with BLAS at one thread, equal
  the one-thread answer, name the first bad row, and leave no BLAS worker
  spinning to slow the next fit.
- The BLAS that the GEMM kernels call (SciPy's, loaded by a process's
  first GEMM fit) is held at one thread from that first call on, and left
  at its own setting afterwards.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pytest
import threadpoolctl
from sklearn.exceptions import ConvergenceWarning

import fastsoftmax as fs
from fastsoftmax import SoftmaxRegression, reference

REPO = pathlib.Path(fs.__file__).resolve().parent.parent


def data(m=2000, n=20, k=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n))
    y = rng.integers(0, k, m)
    X[np.arange(m), y % n] += 2.0
    return X, y


def blas_threads():
    return [d["num_threads"] for d in threadpoolctl.threadpool_info() if d["user_api"] == "blas"]


@pytest.mark.parametrize("k", [5, 40], ids=["rows", "gemm"])
def test_predict_from_many_threads_equals_sequential(k):
    X, y = data(k=k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = SoftmaxRegression(max_iter=20).fit(X, y)
    want = {m: getattr(model, m)(X) for m in ("predict", "predict_proba", "predict_log_proba")}
    blas_before = blas_threads()

    def job(i):
        method = ("predict", "predict_proba", "predict_log_proba")[i % 3]
        return [(method, getattr(model, method)(X)) for _ in range(20)]

    with ThreadPoolExecutor(4) as pool:
        results = [r for rs in pool.map(job, range(4)) for r in rs]
    assert len(results) == 80
    for method, got in results:
        np.testing.assert_array_equal(got, want[method], err_msg=method)
    # the one-thread BLAS limit used inside the kernels is released
    assert blas_threads() == blas_before


def test_two_fits_in_two_threads_equal_sequential_fits():
    X, y = data(m=1500)
    specs = [dict(solver="sgd", random_state=1, max_iter=15),
             dict(solver="lbfgs", max_iter=30, alpha=1e-3)]

    def fit(spec):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return SoftmaxRegression(**spec).fit(X, y)

    sequential = [fit(s) for s in specs]
    with ThreadPoolExecutor(2) as pool:
        parallel = list(pool.map(fit, specs))
    for a, b in zip(sequential, parallel, strict=True):
        np.testing.assert_array_equal(a.coef_, b.coef_)
        np.testing.assert_array_equal(a.intercept_, b.intercept_)
        assert a.loss_curve_ == b.loss_curve_


def test_n_threads_does_not_leak_between_threads():
    X, y = data(m=500)
    W = np.zeros((20, 5))
    barrier = threading.Barrier(2)

    def worker(n_threads):
        before = numba.get_num_threads()
        barrier.wait()
        seen = []
        for _ in range(30):
            fs.loss_and_grad(X, y, W, n_threads=n_threads)
            fs.softmax(X, n_threads=n_threads)
            seen.append(numba.get_num_threads())
        return before, seen, numba.get_num_threads()

    with ThreadPoolExecutor(2) as pool:
        one, default = pool.map(worker, [1, None])
    for before, seen, after in (one, default):
        assert after == before
        assert set(seen) == {before}
    assert numba.get_num_threads() == default[0]


def test_numba_thread_count_reads_and_sets_what_numba_does():
    """_launch's reads and sets of the count, through the threading layer's own
    functions once it is launched, agree with numba.get_num_threads and
    set_num_threads, per Python thread; a count out of range raises as
    Numba's own call does."""
    from fastsoftmax import _launch

    before = numba.get_num_threads()
    fs.softmax(np.zeros((4, 3)))  # the layer launched
    assert _launch.numba_thread_count() == before
    assert _launch._layer is not None
    try:
        _launch.set_numba_thread_count(1)
        assert numba.get_num_threads() == 1 == _launch.numba_thread_count()
        with ThreadPoolExecutor(1) as pool:  # another thread keeps its own count
            assert pool.submit(_launch.numba_thread_count).result() == before
        numba.set_num_threads(before)
        assert _launch.numba_thread_count() == before
        for bad in (0, _launch._thread_limit + 1):
            with pytest.raises(ValueError):
                _launch.set_numba_thread_count(bad)
        assert numba.get_num_threads() == before
    finally:
        numba.set_num_threads(before)


def test_env_value_follows_os_environ(monkeypatch):
    """_settings.env_value is os.environ.get(name, ""), set, changed and unset
    at run time; with os.environ replaced, the replacement is read."""
    from fastsoftmax._settings import env_value

    name = "FASTSOFTMAX_TEST_ENV_VALUE"
    monkeypatch.delenv(name, raising=False)
    assert env_value(name) == ""
    monkeypatch.setenv(name, " gemm ")
    assert env_value(name) == " gemm "
    monkeypatch.setenv(name, "r\u00e9sum\u00e9")
    assert env_value(name) == "r\u00e9sum\u00e9"
    monkeypatch.delenv(name)
    assert env_value(name) == ""
    monkeypatch.setattr(os, "environ", {name: "rows"})
    assert env_value(name) == "rows"


WORKQUEUE = r"""
import warnings
from concurrent.futures import ThreadPoolExecutor
import numba, numpy as np
import fastsoftmax as fs
from fastsoftmax import SoftmaxRegression
rng = np.random.default_rng(0)
X = rng.standard_normal((2000, 10)); y = rng.integers(0, 4, 2000)
model = SoftmaxRegression(max_iter=30).fit(X, y)
assert numba.threading_layer() == "workqueue", numba.threading_layer()
want = model.predict_proba(X)
def job(i):
    for _ in range(10):
        assert np.array_equal(model.predict_proba(X), want)
        fs.loss_and_grad(X, y, np.zeros((10, 4)), n_threads=1 + i % 2)
    return True
with ThreadPoolExecutor(4) as pool:
    print(all(pool.map(job, range(4))))
"""


@pytest.mark.slow
def test_workqueue_layer_calls_are_serialised_not_aborted():
    env = {**os.environ, "NUMBA_THREADING_LAYER": "workqueue",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", WORKQUEUE], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"


# ---------------------------------------------------------- reproducibility
@pytest.mark.parametrize("solver", ["sgd", "bgd", "lbfgs"])
@pytest.mark.parametrize("early_stopping", [False, True])
def test_same_random_state_is_bit_identical(solver, early_stopping):
    X, y = data(m=1200)
    fits = []
    for _ in range(2):
        est = SoftmaxRegression(solver, random_state=7, max_iter=25,
                                early_stopping=early_stopping)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fits.append(est.fit(X, y))
    a, b = fits
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.intercept_, b.intercept_)
    assert a.loss_curve_ == b.loss_curve_ and a.n_iter_ == b.n_iter_
    assert a.validation_loss_curve_ == b.validation_loss_curve_


def test_one_and_two_threads_agree():
    """Stated tolerances: the softmax family is bit-identical (rows are
    independent); the fused loss and gradient differ only by the order of
    the per-chunk reduction, 1e-12 relative in float64 and 1e-5 in float32;
    predict is identical."""
    X, y = data(m=3000, k=7)
    rng = np.random.default_rng(1)
    W = rng.standard_normal((20, 7)) * 0.1
    for dt, rtol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        Xd, Wd = X.astype(dt), W.astype(dt)
        for f in (fs.softmax, fs.log_softmax, fs.logsumexp):
            np.testing.assert_array_equal(f(Xd, n_threads=1), f(Xd, n_threads=2))
        one = fs.loss_and_grad(Xd, y, Wd, np.zeros(7, dt), n_threads=1)
        two = fs.loss_and_grad(Xd, y, Wd, np.zeros(7, dt), n_threads=2)
        np.testing.assert_allclose(one[0], two[0], rtol=rtol)
        scale = np.abs(one[1]).max()
        np.testing.assert_allclose(one[1], two[1], rtol=rtol, atol=rtol * scale)
        np.testing.assert_allclose(one[2], two[2], rtol=rtol, atol=rtol * scale)
    model = SoftmaxRegression(max_iter=40).fit(X, y)
    p1 = model.set_params(n_threads=1).predict(X)
    p2 = model.set_params(n_threads=2).predict(X)
    np.testing.assert_array_equal(p1, p2)


# ------------------------------------------------- shared on-disk cache
def _fit_in_worker(seed):
    """Run in a spawned process: import, fit, report (weights, cache stats)."""
    from numba.core.registry import CPUDispatcher

    import fastsoftmax
    from fastsoftmax import _kernels

    X, y = data(m=300, n=6, k=3)
    # lbfgs: its kernels compile in ~10 s cold; the SGD epoch kernel takes
    # ~90 s, too long for a test that must compile from an empty cache.
    model = fastsoftmax.SoftmaxRegression("lbfgs", random_state=seed, max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    model.predict_proba(X)
    model.predict(X)
    stats = {}
    for modname in ("_checks", "_fused", "_rowwise", "_sgd", "_predict"):
        module = sys.modules.get(f"{_kernels.__name__}.{modname}")
        for name, obj in vars(module or object).items():
            # The module's own kernels only: one imported from another
            # module may be a callee (_outer's block products), dispatched
            # where its caller compiles and never where the caller loads.
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == module.__name__:
                hits = sum(obj.stats.cache_hits.values())
                misses = sum(obj.stats.cache_misses.values())
                if hits or misses:
                    stats[f"{modname}.{name}"] = [hits, misses]
    return model.coef_.tolist(), stats


LATER = r"""
import json, sys
sys.path.insert(0, {tests!r})
import test_concurrency
print(json.dumps(test_concurrency._fit_in_worker(0)))
"""


@pytest.mark.slow
def test_cache_shared_by_processes_started_at_once(tmp_path, monkeypatch):
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(REPO), os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        results = pool.map(_fit_in_worker, [0, 0, 0], chunksize=1)
    # No crash; the three (same-seed) models are identical.
    assert results[0][0] == results[1][0] == results[2][0]
    # Each kernel signature was compiled by one of the three, under its
    # lock file, and loaded from the cache by the other two
    # (fastsoftmax._kernels._locks; not on Windows).
    from fastsoftmax._kernels import _locks

    assert results[0][1] and all(r[1].keys() == results[0][1].keys() for r in results)
    for name, (hits, misses) in results[0][1].items():
        if _locks.installed():
            assert sum(r[1][name][1] for r in results) == hits + misses, (name, results)
    assert list(cache.rglob("*.nbi")), "nothing was written to NUMBA_CACHE_DIR"
    # A process started afterwards loads every kernel it uses from the cache.
    proc = subprocess.run([sys.executable, "-c", LATER.format(tests=os.path.dirname(__file__))],
                          capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-2000:]
    coef, stats = json.loads(proc.stdout.strip().splitlines()[-1])
    assert coef == results[0][0]  # and the same model, bit for bit, in a new process
    assert stats, "no kernel was used"
    assert all(hits > 0 and misses == 0 for hits, misses in stats.values()), stats


def test_blas_limits_of_overlapping_blocks_never_leak():
    """BLAS's thread count is process-wide: predictions and fits (each holding
    BLAS at 1) entered and left out of order from several Python threads
    leave the user's setting as it was."""
    from fastsoftmax._threads import load_kernel_blas, single_threaded_blas

    load_kernel_blas()  # the kernels' libraries loaded before the setting is read
    before = blas_threads()
    with single_threaded_blas():
        assert set(blas_threads()) == {1}
    assert blas_threads() == before
    a, b = single_threaded_blas(), single_threaded_blas()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)  # left before the block entered after it
    assert set(blas_threads()) == {1}
    b.__exit__(None, None, None)
    assert blas_threads() == before

    X, y = data(m=3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = SoftmaxRegression(max_iter=20, n_threads=1).fit(X, y)
    want = model.predict(X)

    def job(i):
        if i % 2:
            return [np.array_equal(model.predict(X), want) for _ in range(10)]
        fs.loss_and_grad(X, y, np.zeros((20, 5)))
        return [True]

    with ThreadPoolExecutor(4) as pool:
        assert all(ok for oks in pool.map(job, range(8)) for ok in oks)
    assert blas_threads() == before


def blas_counts() -> dict[str, int]:
    return {d["filepath"]: d["num_threads"] for d in threadpoolctl.threadpool_info()
            if d["user_api"] == "blas"}


@pytest.mark.parametrize("kind", ["rows", "gemm", "sparse"])
def test_a_call_holds_blas_only_where_its_kernels_call_it(kind, monkeypatch):
    """loss_and_grad and hessp hold the BLAS library the GEMM kernels'
    products call at one thread for a GEMM-strategy pass, and no other, and
    leave BLAS alone for the rows kernels and sparse data, which call none;
    the user's setting is as it was afterwards, and the results the same."""
    import scipy.sparse

    from fastsoftmax import _blas_choice, _threads

    held = []
    enter = _threads._blas_enter

    def spy(library=None):
        paths = enter(library)
        held.append((library, blas_counts()))
        return paths

    monkeypatch.setattr(_threads, "_blas_enter", spy)
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "gemm" if kind == "gemm" else "rows")
    _threads.load_kernel_blas()  # the kernels' libraries loaded before the setting is read
    X, y = data(m=500)
    if kind == "sparse":
        X = scipy.sparse.csr_matrix(np.where(np.abs(X) > 1, X, 0))
    rng = np.random.default_rng(0)
    W, V = rng.normal(size=(2, X.shape[1], 5))
    before = blas_counts()
    got = [*fs.loss_and_grad(X, y, W, np.zeros(5), alpha=0.1),
           *fs.hessp(X, y, W, np.zeros(5), V, alpha=0.1)]
    assert blas_counts() == before
    if kind == "gemm":
        library = _blas_choice.kernel_library(np.float64)
        assert library is not None  # SciPy's OpenBLAS, which threadpoolctl sees
        assert [lib for lib, _ in held] == [library, library]
        for _, counts in held:
            assert counts == {**before, library: 1}  # that library alone
    else:
        assert held == []
    want = [*reference.loss_and_grad(X, y, W, np.zeros(5), alpha=0.1),
            *reference.hessp(X, y, W, np.zeros(5), V, alpha=0.1)]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_blocks_holding_one_library_and_all_overlap_without_leaks(monkeypatch):
    """A block holding one library and blocks holding every library, entered
    and left in any order, hold each library from the first block to enter
    it to the last to leave, then restore its count; a library loaded while
    a block holding every library is open joins that block."""
    from fastsoftmax import _threads

    _threads.load_kernel_blas()
    before = blas_counts()
    if not any(n > 1 for n in before.values()):
        pytest.skip("no BLAS library above one thread to hold")
    one = next(path for path, n in before.items() if n > 1)
    a, b = _threads.single_threaded_blas(library=one), _threads.single_threaded_blas()
    a.__enter__()
    assert blas_counts() == {**before, one: 1}
    b.__enter__()
    assert set(blas_counts().values()) == {1}
    a.__exit__(None, None, None)  # left first: b still holds that library too
    assert set(blas_counts().values()) == {1}
    b.__exit__(None, None, None)
    assert blas_counts() == before
    b.__enter__()
    a.__enter__()
    b.__exit__(None, None, None)
    assert blas_counts() == {**before, one: 1}
    a.__exit__(None, None, None)
    assert blas_counts() == before
    # A library that joins an open block holding every library (as
    # load_kernel_blas makes one join): held with the others, restored with them.
    held_all = _threads._blas_enter()
    joined = held_all.pop()
    _threads._blas_held[joined][0] -= 1  # as if loaded after the block was entered
    with _threads._controller_lock:
        _threads._join_all_blocks()
    assert joined in held_all and set(blas_counts().values()) == {1}
    _threads._blas_exit(held_all)
    assert blas_counts() == before and _threads._blas_held == {}


def test_library_counts_read_and_write_what_threadpoolctl_sees():
    """Each loaded BLAS library's (get, set) of its thread count (OpenBLAS's own
    functions where it runs its own pool, else threadpoolctl's) reads and
    writes the count threadpoolctl reports."""
    import scipy.linalg.cython_blas  # noqa: F401  (SciPy's OpenBLAS loaded)

    from fastsoftmax import _threads

    with _threads._controller_lock:
        libraries = list(_threads._blas_controller().lib_controllers)
        calls = dict(_threads._count_calls)
    assert libraries and set(calls) == {lib.filepath for lib in libraries}
    direct = 0
    for lib in libraries:
        get, put = calls[lib.filepath]
        direct += get != lib.get_num_threads
        original = blas_counts()[lib.filepath]
        assert get() == original
        try:
            put(1)
            assert blas_counts()[lib.filepath] == 1 and get() == 1
        finally:
            put(original)
        assert blas_counts()[lib.filepath] == original
    # SciPy's wheel ships an OpenBLAS with its own pool: its functions are called directly.
    assert direct >= 1 or not any(lib.internal_api == "openblas" for lib in libraries)


FIRST_GEMM = """
import json, os, time
import numpy as np, threadpoolctl
import fastsoftmax as fs

def threads():
    return {{os.path.basename(d["filepath"]): d["num_threads"]
            for d in threadpoolctl.threadpool_info() if d["user_api"] == "blas"}}

def idle_cpu(seconds=0.15):
    start = time.process_time()
    time.sleep(seconds)
    return time.process_time() - start

assert "scipy.linalg" not in __import__("sys").modules
before = threads()
rng = np.random.default_rng(0)
X = rng.standard_normal((3000, 300)); y = rng.integers(0, 60, 3000)
fs.loss_and_grad(X, y, np.zeros((300, 60)), n_threads={n_threads})  # the process's first GEMM
after_call = idle_cpu()
after = threads()
import scipy.linalg.blas
A = rng.standard_normal((600, 600))
scipy.linalg.blas.dgemm(1.0, A, A)  # SciPy's BLAS at its own setting: the positive control
control = idle_cpu()
print(json.dumps([before, after, after_call, control]))
"""


@pytest.mark.parametrize("n_threads", [1, 2])
def test_first_gemm_fit_holds_the_kernels_blas_at_one_thread(n_threads):
    """Numba loads SciPy's BLAS inside the first kernel that multiplies,
    after the limit was set: it ran at its default thread count, and its
    pool kept spinning after the call (the process's first GEMM gradients
    took up to 3.5x as long). Loaded first, it joins the limit."""
    # BLAS at its own default: Dask's local clusters leave *_NUM_THREADS=1
    # in the environment of the process that started them (earlier tests).
    env = {key: value for key, value in os.environ.items()
           if key not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env["FASTSOFTMAX_STRATEGY"] = "gemm"
    proc = subprocess.run([sys.executable, "-c", FIRST_GEMM.format(n_threads=n_threads)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before, after, after_call, control = json.loads(proc.stdout.strip().splitlines()[-1])
    new = set(after) - set(before)
    assert new, f"the kernels' BLAS was loaded before the call: {before}"
    # Every library is back at its own setting, the new one included.
    assert {lib: after[lib] for lib in before} == before
    if max(after.values()) < 2 or control < 0.03:
        pytest.skip(f"SciPy's BLAS does not spin after a call here ({control:.3f} s)")
    # Left at its default, the kernels' BLAS spins as long as the control's
    # does (about control); held, the process is near idle. Half the control
    # leaves room for what else wakes in a loaded host's process (a quarter
    # was exceeded under a busy test run).
    assert after_call < control / 2, (after_call, control)


# ------------------------------------------------------------ dense labels
def _cpu_seconds_while_idle(seconds=0.15):
    """CPU time this process spends while its calling thread sleeps: busy-waiting workers."""
    start = time.process_time()
    time.sleep(seconds)
    return time.process_time() - start


def test_dense_labels_leave_no_blas_worker_spinning():
    """An OpenBLAS pool keeps its workers spinning for ~0.1 s after a
    multithreaded call, and lowering its thread count does not stop them;
    labels computed that way took a core from the next fit. They run on
    Python threads with BLAS at one thread instead: nothing spins after."""
    if max(blas_threads(), default=1) < 2:
        pytest.skip("BLAS runs one thread here: no pool to leave spinning")
    rng = np.random.default_rng(0)
    A = rng.standard_normal((600, 600))
    time.sleep(0.3)  # earlier tests' workers settle
    A @ A  # noqa: B018 -- a multithreaded product, the positive control
    spun = _cpu_seconds_while_idle()
    if spun < 0.03:
        pytest.skip(f"this BLAS does not spin after a call ({spun:.3f} s): nothing to show")
    X, y = data(m=40_000, n=200, k=10)  # 64 MB: 16 blocks of rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = SoftmaxRegression(max_iter=3).fit(X[:2000], y[:2000])
    time.sleep(0.3)
    model.predict(X)
    after = _cpu_seconds_while_idle()
    # Left spinning, the pool burns about as much as the control; half of
    # it leaves room for what else wakes in a loaded host's process.
    assert after < spun / 2, (after, spun)


@pytest.mark.parametrize("n_threads", [1, 2, None])
def test_dense_labels_on_threads_match_one_thread_and_name_the_first_bad_row(n_threads):
    from fastsoftmax._prediction import _LABEL_X_BYTES

    X, y = data(m=30_000, n=100, k=7)  # 24 MB: 6 blocks of rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = SoftmaxRegression(max_iter=5).fit(X[:3000], y[:3000])
    assert X.nbytes > 4 * _LABEL_X_BYTES
    want = np.argmax(X @ model.coef_.T + model.intercept_, axis=1)
    got = model.set_params(n_threads=n_threads).predict(X)
    np.testing.assert_array_equal(got, model.classes_[want])
    bad = X.copy()
    bad[25_000, 3] = np.nan  # in a late block
    bad[9_000, 50] = np.inf  # in an earlier one: this is the row named
    with pytest.raises(ValueError, match="9000"):
        model.predict(bad)
