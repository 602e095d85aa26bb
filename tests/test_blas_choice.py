"""The BLAS library the GEMM kernels call: candidates, every candidate's results, the choice."""

import numpy as np
import pytest
from numba import njit

import fastsoftmax as fs
from fastsoftmax import _blas_choice as bc
from fastsoftmax import _calibration as cal
from fastsoftmax import reference
from fastsoftmax._kernels._blas import _gemm_into, routine

NAMES = list(bc.candidates())


@pytest.fixture
def restore():
    """Leave the kernels calling the default, as every other test expects."""
    yield
    for dtype in (np.float32, np.float64):
        bc.use(dtype, bc.DEFAULT)


@njit(cache=False)
def _product(A, B, C, beta):
    _gemm_into(A, B, C, beta)


def test_the_default_comes_first_and_is_numbas_own():
    assert NAMES[0] == bc.DEFAULT
    default = bc.candidates()[bc.DEFAULT]
    assert default.sgemm == default.dgemm == 0
    for name in NAMES[1:]:
        r = bc.candidates()[name]
        assert r.sgemm and r.dgemm and r.sgemm != r.dgemm, name


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_candidate_multiplies_as_numpy(name, dtype, restore):
    """Both operand orders, a column range (strided "A" layout) and beta."""
    bc.use(dtype, name)
    assert bc.in_use(dtype) == name
    assert routine(dtype)[0] == bc.candidates()[name].address(dtype)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((37, 29)).astype(dtype)
    W = rng.standard_normal((29, 11)).astype(dtype)
    E = rng.standard_normal((37, 11)).astype(dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    Z = np.full((37, 11), np.nan, dtype)
    _product(X, W, Z, 0.0)  # beta 0: Z not read (NaN stays out)
    np.testing.assert_allclose(Z, X @ W, **tol)
    G = rng.standard_normal((29, 11)).astype(dtype)
    expected = X.T @ E + 0.5 * G
    _product(X.T, E, G, 0.5)
    np.testing.assert_allclose(G, expected, **tol)
    part = np.zeros((9, 11), dtype)
    _product(X[:, 5:14].T, E, part, 0.0)
    np.testing.assert_allclose(part, X[:, 5:14].T @ E, **tol)
    ZT = np.empty((11, 37), dtype)
    _product(np.ascontiguousarray(W.T), X.T, ZT, 0.0)
    np.testing.assert_allclose(ZT, (X @ W).T, **tol)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(700, 40, 60), (90, 400, 60)],
                         ids=["tall", "wide"])
def test_the_gemm_kernels_agree_with_the_reference_on_every_candidate(
        name, dtype, shape, monkeypatch, restore):
    """Loss and gradient, a Hessian product and the probabilities, each
    through the candidate named by FASTSOFTMAX_BLAS (which the engines and
    predictions apply)."""
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "gemm")
    monkeypatch.setenv("FASTSOFTMAX_BLAS", name)
    m, n, k = shape
    rng = np.random.default_rng(1)
    X = rng.standard_normal((m, n)).astype(dtype)
    y = rng.integers(0, k, m)
    W = (0.1 * rng.standard_normal((n, k))).astype(dtype)
    b = (0.1 * rng.standard_normal(k)).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    loss, gW, gb = fs.loss_and_grad(X, y, W, b, alpha=1e-3)
    assert bc.in_use(dtype) == name
    rloss, rgW, rgb = reference.loss_and_grad(X, y, W, b, alpha=1e-3)
    assert loss == pytest.approx(rloss, rel=tol)
    np.testing.assert_allclose(gW, rgW, rtol=tol, atol=tol)
    np.testing.assert_allclose(gb, rgb, rtol=tol, atol=tol)

    model = fs.SoftmaxRegression(solver="newton", alpha=1e-2)
    model.fit(X, y)
    bc.use(dtype, bc.DEFAULT)
    P = model.predict_proba(X)  # its own call applies the candidate again
    assert bc.in_use(dtype) == name
    Z = X.astype(np.float64) @ model.coef_.T.astype(np.float64) + model.intercept_
    np.testing.assert_allclose(P, reference.softmax(Z), rtol=tol, atol=tol)


def test_a_newton_fit_is_the_same_on_every_candidate_to_rounding(monkeypatch, restore):
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "gemm")
    rng = np.random.default_rng(2)
    X = rng.standard_normal((600, 30))
    y = rng.integers(0, 60, 600)
    coefs = []
    for name in NAMES:
        monkeypatch.setenv("FASTSOFTMAX_BLAS", name)
        coefs.append(fs.SoftmaxRegression(solver="newton", alpha=1e-2).fit(X, y).coef_)
    for coef in coefs[1:]:
        np.testing.assert_allclose(coef, coefs[0], rtol=1e-7, atol=1e-9)


def test_an_unknown_override_is_refused_naming_the_candidates(monkeypatch):
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "gemm")
    monkeypatch.setenv("FASTSOFTMAX_BLAS", "no-such-blas")
    X = np.ones((50, 5))
    model = fs.SoftmaxRegression(solver="lbfgs", max_iter=2)
    with pytest.raises(ValueError, match="FASTSOFTMAX_BLAS='no-such-blas'.*candidates: scipy"):
        model.fit(X, np.arange(50) % 3)
    assert not hasattr(model, "coef_")


def test_asking_for_mkl_without_it_says_how_to_have_it(monkeypatch):
    monkeypatch.setenv("FASTSOFTMAX_BLAS", "mkl")
    monkeypatch.setattr(bc, "_found", {bc.DEFAULT: bc.candidates()[bc.DEFAULT]})
    with pytest.raises(ValueError, match=r"candidates: scipy \(MKL is one.*fastsoftmax\[mkl\]"):
        bc.chosen(np.float64)


def test_a_library_the_wisdom_names_but_this_process_lacks_gives_the_default(monkeypatch):
    monkeypatch.delenv("FASTSOFTMAX_BLAS", raising=False)
    monkeypatch.setattr(cal, "blas_library", lambda dtype, work=0: "libelsewhere.so")
    assert bc.chosen(np.float32) == bc.DEFAULT


def test_the_winner_needs_the_margin_to_replace_the_default():
    assert cal._blas_winner({"scipy": [1.0, 1.0], "numpy": [0.99, 0.98]}) == "scipy"
    assert cal._blas_winner({"scipy": [1.0, 1.0], "numpy": [0.9, 1.01]}) == "numpy"
    assert cal._blas_winner({"scipy": [1.0], "numpy": [1.2]}) == "scipy"
    assert cal._blas_winner({"scipy": [1.0]}) == "scipy"


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.delenv("FASTSOFTMAX_STRATEGY", raising=False)
    monkeypatch.delenv("FASTSOFTMAX_BLAS", raising=False)
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal, "ROUNDS", 1)
    monkeypatch.setattr(cal, "NARROW_SHAPES", ((20, 100),))
    monkeypatch.setattr(cal, "NARROW_WORK", 1 << 16)
    monkeypatch.setattr(cal, "BLAS_SHAPES", ((30, 60), (20, 100)))
    cal.forget()
    yield tmp_path
    cal.forget()


def test_the_calibration_times_every_candidate_and_the_engines_use_its_choice(
        fresh, monkeypatch, restore):
    from fastsoftmax._data import make_dataset
    from fastsoftmax._dense import DenseEngine

    assert cal.blas_library(np.float32) == bc.DEFAULT  # no wisdom yet
    table = cal.calibrate(("float32",), cells=[])["float32"]
    assert sorted(table["blas_s"]) == sorted(NAMES)
    assert all(len(t) == 2 and min(t) > 0 for t in table["blas_s"].values())
    assert table["blas"] == cal._blas_winner(table["blas_s"])
    cal.forget()  # read back from the file
    assert cal.blas_library(np.float32) == table["blas"]
    assert cal.blas_library(np.float64) == bc.DEFAULT

    other = NAMES[-1]
    wisdom = dict(cal._load())
    wisdom["float32"] = dict(wisdom["float32"], blas=other)
    monkeypatch.setattr(cal, "_wisdom", wisdom)
    bc.use(np.float32, bc.DEFAULT)
    data = make_dataset(np.ones((300, 8), np.float32), np.arange(300) % 60, None, None, 60)
    DenseEngine(data, "gemm")
    assert bc.in_use(np.float32) == other
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "fixed")
    assert cal.blas_library(np.float32) == bc.DEFAULT
    DenseEngine(data, "gemm")
    assert bc.in_use(np.float32) == bc.DEFAULT


def test_a_large_gemm_problem_without_the_choice_times_it_once(fresh, monkeypatch, restore):
    from fastsoftmax._data import make_dataset
    from fastsoftmax._dense import DenseEngine

    timed = []
    time_blas = cal._time_blas
    monkeypatch.setattr(cal, "_time_blas", lambda *a: timed.append(a[0]) or time_blas(*a))
    monkeypatch.setattr(cal, "AUTO_WORK", 10)
    data = make_dataset(np.ones((300, 8), np.float32), np.arange(300) % 60, None, None, 60)
    DenseEngine(data, "rows")
    few = make_dataset(np.ones((300, 8), np.float32), np.arange(300) % 10, None, None, 10)
    DenseEngine(few, "gemm")  # rows of few classes: the products weigh little
    assert timed == []
    DenseEngine(data, "gemm")
    DenseEngine(data, "gemm")
    assert timed == ["float32"]
    assert bc.in_use(np.float32) == cal.blas_library(np.float32)


@pytest.fixture
def no_mkl_yet(monkeypatch):
    """A process in which load_mkl has not tried yet."""
    monkeypatch.setattr(bc, "_mkl_tried", False)
    monkeypatch.setattr(bc, "_mkl_lib", None)
    monkeypatch.delenv(bc.MKL_SWITCH, raising=False)


def _fake_wheel(tmp_path, monkeypatch):
    """An environment whose lib holds a file named as the mkl wheel's library, not one."""
    (tmp_path / "lib").mkdir()
    lib = tmp_path / "lib" / "libmkl_rt.so.3"
    lib.write_bytes(b"not a shared library")
    monkeypatch.setattr(bc.sys, "prefix", str(tmp_path))
    return str(lib)


def test_the_mkl_wheel_is_found_in_the_environment_unless_switched_off(
        tmp_path, monkeypatch, no_mkl_yet):
    monkeypatch.setattr(bc.sys, "prefix", str(tmp_path))
    assert bc.mkl_wheel() is None and bc.mkl_version() == ""
    lib = _fake_wheel(tmp_path, monkeypatch)
    assert bc.mkl_wheel() == lib
    for off in ("0", "off", "False"):
        monkeypatch.setenv(bc.MKL_SWITCH, off)
        assert bc.mkl_wheel() is None
        assert bc.mkl_version() == ""


def test_a_library_that_fails_to_load_is_reported_once_and_left_out(
        tmp_path, monkeypatch, no_mkl_yet):
    lib = _fake_wheel(tmp_path, monkeypatch)
    assert not bc.load_mkl(["mkl"])  # an MKL is loaded already: nothing tried
    assert not bc._mkl_tried
    reported = f"MKL from {lib} could not be loaded.*FASTSOFTMAX_MKL=0"
    with pytest.warns(RuntimeWarning, match=reported):
        assert not bc.load_mkl(["openblas"])
    assert bc._mkl_lib is None
    assert not bc.load_mkl(["openblas"])  # tried once: no second warning


def test_the_wisdom_is_keyed_by_the_mkl_wheel_only_where_there_is_one(monkeypatch):
    monkeypatch.setattr(bc, "mkl_version", lambda: "")
    without = cal._host_key()
    monkeypatch.setattr(bc, "mkl_version", lambda: "2026.2.0")
    with_mkl = cal._host_key()
    monkeypatch.setattr(bc, "mkl_version", lambda: "2026.3.0")
    assert len({without, with_mkl, cal._host_key()}) == 3


@pytest.mark.skipif("mkl" not in NAMES, reason="the mkl wheel is not installed "
                    "(pip install fastsoftmax[mkl]); its results are tested above where it is")
def test_the_mkl_wheel_runs_single_threaded_beside_the_kernels():
    from threadpoolctl import threadpool_info

    mkl = [lib for lib in threadpool_info() if lib["internal_api"] == "mkl"]
    assert [lib["threading_layer"] for lib in mkl] == ["sequential"]
    assert bc.candidates()["mkl"].ilp64


def test_use_chosen_follows_the_override_and_a_new_wisdom(monkeypatch):
    """use_chosen keeps its answer per dtype only while the overrides and the
    wisdom object stand: a new FASTSOFTMAX_BLAS, or a new wisdom, repoints
    the kernels' products."""
    names = list(bc.candidates())
    if len(names) < 2:
        pytest.skip("one BLAS library in this process")
    f32 = np.dtype(np.float32)
    before = bc.in_use(f32)
    try:
        for name in (names[1], names[0], names[1]):
            monkeypatch.setenv("FASTSOFTMAX_BLAS", name)
            bc.use_chosen(f32)
            assert bc.in_use(f32) == name
        monkeypatch.delenv("FASTSOFTMAX_BLAS")
        monkeypatch.delenv("FASTSOFTMAX_STRATEGY", raising=False)  # "fixed" reads no wisdom
        for name in (names[0], names[1]):
            monkeypatch.setattr(cal, "_wisdom", {"float32": {"cells": {}, "blas": name}})
            bc.use_chosen(f32)
            assert bc.in_use(f32) == name
    finally:
        bc.use(f32, before)
