"""The Hessian products' kernel compiled in a second process (fastsoftmax._side_compile).

The suite runs with ``FASTSOFTMAX_SIDE_COMPILE=0`` (conftest.py), so that
no test's compiling depends on the host's load; the tests here turn it on
where they need it.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _helpers import dataset, make_problem

from fastsoftmax import SoftmaxRegression, _dense, _launch, _side_compile
from fastsoftmax._objective import Objective
from fastsoftmax._settings import SettingError
from fastsoftmax._solvers.newton import newton

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("value, mode", [("", "auto"), ("auto", "auto"), (" 0 ", "0"),
                                         ("1", "1")])
def test_setting(value, mode, monkeypatch):
    monkeypatch.setenv(_side_compile.SETTING, value)
    assert _side_compile.setting() == mode


def test_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv(_side_compile.SETTING, "yes")
    with pytest.raises(SettingError, match="FASTSOFTMAX_SIDE_COMPILE='yes'"):
        _side_compile.start(lambda: pytest.fail("kernels() called"))


@pytest.mark.parametrize("cpus, load, spare", [(1, 0.0, False), (2, 0.2, True),
                                               (2, 1.49, True), (2, 1.5, False),
                                               (16, 14.0, True), (16, 15.6, False)])
def test_spare_core(cpus, load, spare, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert _side_compile.spare_core() is spare


@pytest.mark.parametrize("executable, frozen, runs", [
    ("/usr/bin/python3.11", False, True), ("/venv/bin/python", False, True),
    ("/usr/local/bin/python3", False, True), ("/opt/app/myapp", True, False),
    ("/venv/bin/python", True, False), ("/usr/sbin/uwsgi", False, False), ("", False, False)])
def test_python_interpreter(executable, frozen, runs, monkeypatch):
    """A second process only from a Python interpreter: never from a frozen
    application or a program embedding Python (it would start the program)."""
    monkeypatch.setattr(sys, "executable", executable)
    monkeypatch.setattr(sys, "frozen", frozen, raising=False)
    assert _side_compile.python_interpreter() is runs


def test_nothing_started_when_off_or_busy(monkeypatch):
    """Setting 0, or auto without a spare core: None, and the signatures are never asked for."""
    def kernels():
        raise AssertionError("kernels() called")

    monkeypatch.setenv(_side_compile.SETTING, "0")
    assert _side_compile.start(kernels) is None
    monkeypatch.setenv(_side_compile.SETTING, "auto")
    monkeypatch.setattr(_side_compile, "spare_core", lambda: False)
    assert _side_compile.start(kernels) is None


def test_nothing_started_for_a_kernel_compiled_here(rng, monkeypatch):
    X, y, W, b, _ = make_problem(rng, 300, 12, 3, np.float64)
    engine = Objective(dataset(X, y, 3), strategy="gemm", warm=True).engine
    engine.hessp(W.T, b, engine.no_proba, np.ones_like(W.T), np.zeros(3))
    monkeypatch.setenv(_side_compile.SETTING, "1")
    assert _side_compile.start(engine.hessp_kernels) is None


def test_stop_all_ends_a_process_still_running(monkeypatch):
    """At exit a second process still compiling is stopped (its cache entry unwritten)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    monkeypatch.setattr(_side_compile, "_started", [proc])
    _side_compile.stop_all()
    assert proc.poll() is not None and _side_compile._started == []


# (strategy, rows, features, classes, dtype, weights, soft): the launches a
# Hessian product can take (rows kernels, GEMM of short and long rows, one
# chunk on the calling thread, the split pass).
CASES = {
    "rows": ("rows", 3000, 40, 5, np.float32, False, False),
    "rows-64-soft": ("rows", 3000, 40, 5, np.float64, False, True),
    "gemm": ("gemm", 3000, 100, 3, np.float64, True, False),
    # (more than 64 features: the lanes kernel, not the transposed one, on any host)
    "gemm-lanes": ("gemm", 2000, 100, 40, np.float32, False, False),
    # (at most 32 features, below 32 classes: the product with transposed
    # blocks on hosts without AVX-512, as "one-chunk")
    "gemm-t": ("gemm", 3000, 20, 5, np.float32, False, False),
    "one-chunk": ("gemm", 200, 10, 3, np.float64, False, False),
    "one-chunk-rowwise": ("gemm", 200, 40, 3, np.float32, False, False),
    "one-chunk-rows": ("rows", 200, 10, 3, np.float32, True, False),
    "split": ("gemm", 203, 45, 40, np.float64, False, False),
}


def force_split(monkeypatch):
    """Have the GEMM strategy split its backward product by features (the "split" case)."""
    for name, value in (("_SPLIT_G_BYTES", 0), ("_SPLIT_MIN_FEATURES", 0),
                        ("_SPLIT_ROWS_PER_FEATURE", 1 << 30),
                        ("_TILES_ANY_SIZE", False)):
        monkeypatch.setattr(_dense, name, value)
    # (BLAS's split, not the tiles': _dense.tiles_split)
    monkeypatch.setattr(_dense, "tiles_split", lambda m, n, k, itemsize, chunks: False)
    _dense._layout.cache_clear()  # layouts kept under the constants before
    monkeypatch.setattr(_launch, "SERIAL_WORK", 0)
    monkeypatch.setattr(_launch, "SERIAL_WORK_WARM", 0)


@pytest.mark.filterwarnings("ignore:newton did not converge")
@pytest.mark.parametrize("case", list(CASES))
def test_predicted_signature_is_the_one_newton_compiles(case, rng, monkeypatch):
    """hessp_kernels() names the kernel and argument types of a Newton fit's
    products, P stored or recomputed, with and without intercept: the second
    process compiles exactly what the fit then loads."""
    strategy, m, n, k, dt, weights, soft = CASES[case]
    if case == "split":
        force_split(monkeypatch)
    X, y, W, b, sw = make_problem(rng, m, n, k, dt, weights=weights, soft=soft)
    for mode in ("cached", "recompute"):
        for intercept in (b, None):
            objective = Objective(dataset(X, y, k, sw), strategy=strategy, mode=mode,
                                  warm=True)
            assert objective.engine._split == (case == "split")
            assert objective.engine._serial == case.startswith("one-chunk")
            [(kernel, types)] = objective.engine.hessp_kernels()
            # (transposed blocks on hosts without AVX-512 only)
            transposed = (strategy == "gemm" and case != "split"
                          and _dense.transposed_products(n, k, np.dtype(dt).itemsize))
            assert ("_gemm_t" in kernel.__name__) == transposed
            # The second process finds the kernel by its module and name.
            py_func = kernel.py_func
            assert getattr(importlib.import_module(py_func.__module__),
                           py_func.__qualname__) is kernel
            newton(objective, np.zeros((k, n), dt),
                   None if intercept is None else np.zeros(k, dt), 0.1, max_iter=1, tol=0.0)
            assert types in kernel.overloads, (kernel, types, list(kernel.overloads))


@pytest.mark.filterwarnings("ignore:newton did not converge")
@pytest.mark.parametrize("scheme", ["scatter", "transpose", "panels"])
@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
def test_predicted_sparse_signature_is_the_one_newton_compiles(scheme, dt, rng, monkeypatch):
    """The same for CSR data: the row pass of each gradient scheme, weighted
    or not, with and without intercept."""
    import scipy.sparse as sp

    from fastsoftmax import _sparse

    monkeypatch.setattr(_sparse, "gradient_scheme", lambda csr, k, n_threads=None: scheme)
    k = 4
    X = _sparse.as_csr(sp.random(300, 50, density=0.1, format="csr", random_state=1,
                                 dtype=dt))
    y = rng.integers(0, k, 300)
    for sw in (None, rng.uniform(0.5, 2.0, 300).astype(dt)):
        for intercept in (np.zeros(k, dt), None):
            objective = Objective(dataset(X, y, k, sw), warm=True)
            [(kernel, types)] = objective.engine.hessp_kernels()
            py_func = kernel.py_func
            assert getattr(importlib.import_module(py_func.__module__),
                           py_func.__qualname__) is kernel
            newton(objective, np.zeros((k, 50), dt), intercept, 0.1, max_iter=1, tol=0.0)
            assert types in kernel.overloads, (kernel, types, list(kernel.overloads))


# A fresh process, on an empty cache: the second process compiles the
# Hessian products' kernel (the fit waits for it here, so that the test does
# not depend on which process gets there first); the fit then loads it.
SECOND_PROCESS = r"""
import json, sys
import numpy as np
from fastsoftmax import SoftmaxRegression, _side_compile
from fastsoftmax._data import training_data

X = np.random.default_rng(0).standard_normal((4000, 60))
y = np.arange(4000) % 3
data, _ = training_data(X, y, None, class_weight=None)
[(kernel, types)] = data.objective().engine.hessp_kernels()
proc = _side_compile.start(data.objective().engine.hessp_kernels)
assert proc is not None
assert proc.wait(timeout=600) == 0
assert _side_compile.in_cache(kernel, types) and types not in kernel.overloads
model = SoftmaxRegression(max_iter=3).fit(X, y)
stats = kernel.stats
print(json.dumps({"hits": stats.cache_hits.get(types, 0),
                  "misses": stats.cache_misses.get(types, 0),
                  "coef": model.coef_.tolist(), "intercept": model.intercept_.tolist()}))
"""


@pytest.mark.slow
def test_second_process_compiles_what_the_fit_loads(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), FASTSOFTMAX_SIDE_COMPILE="1",
               PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get(
                   "PYTHONPATH")])]))
    out = subprocess.run([sys.executable, "-c", SECOND_PROCESS], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["hits"], got["misses"]) == (1, 0)
    # The same fit here, its kernels compiled (or loaded) by this process.
    X = np.random.default_rng(0).standard_normal((4000, 60))
    model = SoftmaxRegression(max_iter=3).fit(X, np.arange(4000) % 3)
    np.testing.assert_array_equal(got["coef"], model.coef_)
    np.testing.assert_array_equal(got["intercept"], model.intercept_)


def test_finish_waits_for_a_process_then_stops_it():
    """finish() lets a process end within its time, and stops one still running after it."""
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    _side_compile.finish(quick, 120.0)
    assert quick.returncode == 0
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    _side_compile.finish(slow, 0.2)
    assert slow.poll() is not None and slow.returncode != 0


def test_calibration_starts_its_second_process_first_and_settles_it_before_timing(
        monkeypatch):
    """A calibration of cells starts the second process before it compiles
    anything and calls the function that ends it before every timing: no
    second process ever runs beside the timed calls."""
    from fastsoftmax import _calibration

    events: list[str] = []

    def compile_aside(aside, todo):
        events.append("start")
        assert aside() == ["kernels"] and todo == {"float64": [(16, 2, False), (48, 3, False)]}
        return lambda: events.append("settle")

    real_objective = Objective

    def objective(*args, **kwargs):
        events.append("engine")
        return real_objective(*args, **kwargs)

    def time_pair(objs, coef, b, copy, rounds):
        events.append("time")
        return 1.0, 2.0

    monkeypatch.setattr("fastsoftmax._objective.Objective", objective)
    monkeypatch.setattr(_calibration, "_compile_aside", compile_aside)
    monkeypatch.setattr(_calibration, "cell_rows", lambda n, k, itemsize=0, ahead=False: 300)
    monkeypatch.setattr(_calibration, "cold_copies", lambda X: [X])
    monkeypatch.setattr(_calibration, "_time_pair", time_pair)
    result = _calibration.calibrate(("float64",), cells=[(16, 2), (48, 3)], blocks=False,
                                    write=False, aside=lambda: ["kernels"])
    assert set(result["float64"]["cells"]) == {"16,2", "48,3"}
    # Started before the cells' engines compile, settled after them, before each timing.
    assert events.index("start") < events.index("engine") < events.index("settle")
    assert [e for e in events if e != "engine"] == ["start", "settle", "time",
                                                   "settle", "time"]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver, aside", [("newton", True), ("auto", True),
                                           ("lbfgs", False), ("bgd", False)])
def test_only_a_newton_fit_compiles_hessian_products_during_calibration(solver, aside, rng,
                                                                      monkeypatch):
    from fastsoftmax import _calibration

    seen = []
    real = _calibration.strategy

    def strategy(n_features, n_classes, dtype, work=0, aside=None):
        seen.append(aside)
        return real(n_features, n_classes, dtype, work)

    monkeypatch.setattr(_calibration, "strategy", strategy)
    X, y, _, _, _ = make_problem(rng, 200, 6, 3, np.float64)
    SoftmaxRegression(solver=solver, max_iter=2, tol=0.0).fit(X, y)
    assert seen and all((a is not None) is aside for a in seen)


@pytest.mark.parametrize("n, k", [(50, 5), (20, 40)])
def test_second_process_of_a_calibration_compiles_what_comes_next(n, k, rng, monkeypatch):
    """The second process of a Newton fit's calibration gets both strategies'
    Hessian products for the fit's signatures (the fixed rule's strategy
    first), then the GEMM gradient of each cell timed, once each; the
    calibration's wait lasts as long again as it has run."""
    from fastsoftmax import _calibration
    from fastsoftmax._data import make_dataset
    from fastsoftmax._objective import both_hessp_kernels

    X, y, _, _, _ = make_problem(rng, 3000, n, k, np.float64)
    data = dataset(X, y, k)
    started, waited = [], []

    class Proc:
        def wait(self, timeout):
            waited.append(timeout)

    def start(kernels):
        started.append(kernels())
        return Proc()

    monkeypatch.setattr(_side_compile, "start", start)
    monkeypatch.setattr(_calibration, "cell_rows", lambda n, k, itemsize=0, ahead=False: 2500)
    aside = lambda: both_hessp_kernels(data, None, True, False)  # noqa: E731
    todo = {"float64": [(16, 2, False), (48, 3, False), (48, 3, True)],
            "float32": [(16, 40, False)]}
    settle = _calibration._compile_aside(aside, todo)
    settle()
    [found] = started
    first = _calibration.fixed_rule(n, k, 3000 * n * k, 8)
    hessp = [Objective(data, strategy=s, warm=True).engine.hessp_kernels()[0]
             for s in (first, "gemm" if first == "rows" else "rows")]
    gradients = []
    for dtype, cells in todo.items():
        for cn, ck, _ in cells:
            cell = make_dataset(np.zeros((2500, cn), dtype), np.zeros(2500, np.int64), None, None,
                                ck)
            gradients += Objective(cell, strategy="gemm", warm=True).engine.gradient_kernels()
    # (48, 3) twice, on the same rows: one kernel to compile.
    assert found == hessp + list(dict.fromkeys(gradients))
    assert len(found) < len(hessp) + len(gradients)
    assert hessp[0][0] is not hessp[1][0]
    assert len(waited) == 1 and 0 <= waited[0] < 60
    monkeypatch.setattr(_side_compile, "start", lambda kernels: None)
    assert _calibration._compile_aside(aside, todo) is _calibration._nothing


# The gradient's cases: also the GEMM products by the tiles of
# _kernels._outer (TILES forces them, or BLAS's, whatever the host);
# "gemm-t" forced to the transposed logits (hosts with AVX-512 never take
# them, _dense.transposed_logits).
GRADIENT_CASES = {
    **CASES,
    "gemm-tiles": ("gemm", 3000, 100, 3, np.float64, True, False),
    "gemm-tiles-lanes": ("gemm", 2000, 100, 40, np.float32, False, False),
    # A rest of classes past whole vectors on both hosts' vectors
    # (_outer.rest_classes): 2 of 18 float64 classes on 400 features, 1 of
    # 33 float32 classes on 100.
    "gemm-tiles-rest": ("gemm", 1000, 400, 18, np.float64, True, False),
    "gemm-tiles-lanes-rest": ("gemm", 2000, 100, 33, np.float32, False, False),
    "tiles-split": ("gemm", 203, 45, 40, np.float64, False, False),
}
TILES = {"gemm": False, "gemm-lanes": False, "gemm-tiles": True, "gemm-tiles-lanes": True,
         "gemm-tiles-rest": True, "gemm-tiles-lanes-rest": True}


def case_engine(case, rng, monkeypatch):
    """(engine, W (n, k), b) of GRADIENT_CASES[case]."""
    strategy, m, n, k, dt, weights, soft = GRADIENT_CASES[case]
    if case == "split":
        force_split(monkeypatch)
    if case == "tiles-split":  # (_dense.tiles_split at 40 classes, on any host)
        monkeypatch.setattr(_dense, "_TILES_SPLIT_MIN_CLASSES", 40)
        monkeypatch.setattr(_dense, "_SPLIT_MIN_FEATURES", 0)
        monkeypatch.setattr(_dense, "outer_tiles", lambda n, k, itemsize: True)
        _dense._layout.cache_clear()
        monkeypatch.setattr(_launch, "SERIAL_WORK_WARM", 0)
    if case in TILES:
        monkeypatch.setattr(_dense, "outer_tiles", lambda n, k, itemsize: TILES[case])
    if case == "gemm-t":
        monkeypatch.setattr(_dense, "transposed_logits", lambda n, k, itemsize: True)
    X, y, W, b, sw = make_problem(rng, m, n, k, dt, weights=weights, soft=soft)
    return Objective(dataset(X, y, k, sw), strategy=strategy, warm=True).engine, W, b


@pytest.mark.parametrize("case", list(GRADIENT_CASES))
def test_predicted_gradient_signature_is_the_one_a_call_compiles(case, rng, monkeypatch):
    """gradient_kernels() names the kernel and argument types of the
    engine's gradient pass, P stored or not: what a calibration's second
    process compiles for the GEMM strategy is what its timed calls load."""
    engine, W, b = case_engine(case, rng, monkeypatch)
    [(kernel, types)] = engine.gradient_kernels()
    py_func = kernel.py_func
    assert getattr(importlib.import_module(py_func.__module__), py_func.__qualname__) is kernel
    for P in (None, engine.proba_buffer()):
        engine.gradient(np.ascontiguousarray(W.T), b, P)
        assert types in kernel.overloads, (kernel, types, list(kernel.overloads))


def test_gradient_cases_reach_every_gradient_kernel(rng):
    variants = set()
    for case in GRADIENT_CASES:
        with pytest.MonkeyPatch.context() as mp:
            variants.add(case_engine(case, rng, mp)[0]._gradient_variant())
    assert variants == {*_dense._GRADIENT_KERNELS, "gemm_split", "gemm_tiles_split"}
