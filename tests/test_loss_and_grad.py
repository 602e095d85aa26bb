"""fastsoftmax.loss_and_grad, the public fused loss and gradient
(fastsoftmax._functions): agreement with the NumPy reference, finite
differences, label forms, sample weights, threads, dtypes and input layouts.
Both kernel strategies forced, and both launch modes, are in test_dense.py.

Tolerances. The truth is ``reference.loss_and_grad`` evaluated in float64 on
the same numbers (cast from the test's dtype). float64 results must agree to
``rtol 1e-12`` on the loss and ``1e-11 * max|grad|`` on the gradients
(sums of m products, all of magnitude <= max|grad| * m); float32 results to
``rtol 2e-5`` on the loss (rows terms in float32, summed in float64) and
``2e-4 * max|grad|`` on the gradients (float32 accumulation over m rows).
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from _helpers import (
    FLOAT_DTYPES,
    LAYOUTS,
    PublicObjective,
    assert_close,
    dtype_id,
    make_layout,
    make_problem,
    truth,
)

import fastsoftmax as fs
from fastsoftmax import reference as ref
from fastsoftmax._calibration import FIXED_K, FIXED_N, FIXED_WORK, fixed_classes, fixed_rule

KS = [2, 3, 10, 33, 100]  # 33 and 100 run the "gemm" strategy
# ----------------------------------------------------------- vs the reference

@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("intercept", [True, False], ids=["b", "no-b"])
@pytest.mark.parametrize("variant", ["plain", "alpha", "weights", "soft", "all"])
def test_matches_reference(k, dt, intercept, variant, rng):
    soft = variant in ("soft", "all")
    weights = variant in ("weights", "all")
    alpha = 0.3 if variant in ("alpha", "all") else 0.0
    X, y, W, b, sw = make_problem(rng, 203, 7, k, dt, intercept=intercept,
                                  weights=weights, soft=soft)
    got = fs.loss_and_grad(X, y, W, b, alpha=alpha, sample_weight=sw)
    assert got[1].dtype == dt and got[1].shape == W.shape
    if intercept:
        assert got[2].dtype == dt and got[2].shape == (k,)
    assert_close(got, truth(X, y, W, b, alpha=alpha, sample_weight=sw), dt)
    # the reference in the test's own dtype agrees too
    assert_close(got, ref.loss_and_grad(X, y, W, b, alpha=alpha, sample_weight=sw), dt)


def test_strategies_are_what_the_k_list_claims():
    # The rule: "rows" iff m n k >= FIXED_WORK, k < fixed_classes (FIXED_K,
    # or on a host without AVX-512 FIXED_K_AVX2's bound for the dtype, on
    # rows of at most FIXED_NARROW_FEATURES FIXED_K_NARROW_AVX2's), n >=
    # FIXED_N and n >= 2.5 k, else "gemm". The module's reference
    # comparisons (n = 7, a few hundred rows) therefore run "gemm" for
    # every k; tests/test_dense.py runs the same comparisons with each
    # strategy forced, so both stay covered.
    bound = fixed_classes(8, 784)  # X float64
    assert sum(k < bound for k in KS) >= 2 and sum(k >= FIXED_K for k in KS) >= 1
    for n in (2, 7, FIXED_N - 1, FIXED_N, 49, 50, 77, 78, 784):
        X = np.zeros((3, n))
        for k in KS + [6, 7, 11, 12, 20, FIXED_K - 1, FIXED_K]:
            obj = PublicObjective(X, np.zeros(3, dtype=int), k)
            assert obj.strategy == "gemm" == fixed_rule(n, k, 3 * n * k, 8)
            for itemsize in (4, 8):
                want = ("rows" if k < fixed_classes(itemsize, n) and n >= max(FIXED_N, 2.5 * k)
                        else "gemm")
                assert fixed_rule(n, k, FIXED_WORK, itemsize) == want
                assert fixed_rule(n, k, FIXED_WORK - 1, itemsize) == "gemm"
    # a problem of FIXED_WORK multiply-adds or more: the rows kernels
    X = np.zeros((FIXED_WORK // (784 * 10) + 1, 784), np.float32)
    assert PublicObjective(X, np.zeros(len(X), dtype=int), 10).strategy == "rows"
    assert PublicObjective(X[:-1], np.zeros(len(X) - 1, dtype=int), 10).strategy == "gemm"


def test_known_value():
    # zero weights: every class has probability 1/k, loss log k, grad_b = 1/k - mean(Y)
    X = np.ones((4, 1))
    y = np.array([0, 0, 1, 2])
    loss, gW, gb = fs.loss_and_grad(X, y, np.zeros((1, 3)), np.zeros(3))
    assert loss == pytest.approx(np.log(3), rel=1e-15)
    np.testing.assert_allclose(gb, [1 / 3 - 1 / 2, 1 / 3 - 1 / 4, 1 / 3 - 1 / 4], rtol=1e-14)
    np.testing.assert_allclose(gW[0], gb, rtol=1e-14)


def test_single_class_has_zero_loss():
    loss, gW, gb = fs.loss_and_grad(np.ones((3, 2)), [0, 0, 0], np.ones((2, 1)), [0.5])
    assert loss == 0.0
    np.testing.assert_array_equal(gW, 0.0)
    np.testing.assert_array_equal(gb, 0.0)


def test_extreme_logits_stay_finite():
    """Loss through logsumexp, never log(p): a confidently wrong row gives a
    large finite loss, not inf."""
    X = np.array([[1.0], [1.0]])
    W = np.array([[800.0, -800.0]])
    loss, gW, gb = fs.loss_and_grad(X, [1, 0], W, np.zeros(2))
    assert loss == pytest.approx(800.0, rel=1e-12)  # (1600 + 0) / 2
    np.testing.assert_allclose(gb, [0.5, -0.5], rtol=1e-14)


# -------------------------------------------------------- finite differences

def _loss(X, y, W, b, **kw):
    return fs.loss_and_grad(X, y, W, b, **kw)[0]


@pytest.mark.parametrize("k", [3, 40])
@pytest.mark.parametrize("soft", [False, True], ids=["labels", "soft"])
def test_gradient_matches_central_differences_float64(k, soft, rng):
    X, y, W, b, sw = make_problem(rng, 37, 5, k, np.float64, weights=True, soft=soft)
    kw = dict(alpha=0.1, sample_weight=sw)
    _, gW, gb = fs.loss_and_grad(X, y, W, b, **kw)
    h = 1e-6
    entries = [(f, j) for f in range(5) for j in range(k)]
    for idx in rng.permutation(len(entries))[:15]:
        f, j = entries[idx]
        E = np.zeros_like(W)
        E[f, j] = h
        fd = (_loss(X, y, W + E, b, **kw) - _loss(X, y, W - E, b, **kw)) / (2 * h)
        assert fd == pytest.approx(gW[f, j], abs=1e-8), (f, j)
    for j in rng.permutation(k)[:8]:
        e = np.zeros_like(b)
        e[j] = h
        fd = (_loss(X, y, W, b + e, **kw) - _loss(X, y, W, b - e, **kw)) / (2 * h)
        assert fd == pytest.approx(gb[j], abs=1e-8), j
    # a random direction in (W, b) at once
    V, v = rng.standard_normal(W.shape), rng.standard_normal(k)
    fd = (_loss(X, y, W + h * V, b + h * v, **kw)
          - _loss(X, y, W - h * V, b - h * v, **kw)) / (2 * h)
    assert fd == pytest.approx(np.sum(gW * V) + gb @ v, rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("k", [3, 40])
def test_gradient_matches_central_differences_float32(k, rng):
    """float32 loss is accurate to ~1e-7 relative, so the step must be large
    and the check loose: a directional derivative to 2 %."""
    X, y, W, b, _ = make_problem(rng, 64, 6, k, np.float32)
    _, gW, gb = fs.loss_and_grad(X, y, W, b, alpha=0.05)
    h = np.float32(1e-2)
    for _ in range(3):
        V = rng.standard_normal(W.shape).astype(np.float32)
        v = rng.standard_normal(k).astype(np.float32)
        fd = (_loss(X, y, W + h * V, b + h * v, alpha=0.05)
              - _loss(X, y, W - h * V, b - h * v, alpha=0.05)) / (2 * h)
        assert fd == pytest.approx(float(np.sum(gW * V) + gb @ v), rel=2e-2, abs=1e-3)


# ---------------------------------------------------- label forms and weights

@pytest.mark.parametrize("k", [3, 40])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_labels_equal_their_one_hot_matrix(k, dt, rng):
    X, y, W, b, sw = make_problem(rng, 50, 4, k, dt, weights=True)
    a = fs.loss_and_grad(X, y, W, b, sample_weight=sw)
    o = fs.loss_and_grad(X, ref.one_hot(y, k, dt), W, b, sample_weight=sw)
    eps = float(np.finfo(dt).eps)
    assert a[0] == pytest.approx(o[0], rel=16 * eps)
    np.testing.assert_allclose(a[1], o[1], rtol=0, atol=64 * eps * np.abs(a[1]).max())
    np.testing.assert_allclose(a[2], o[2], rtol=0, atol=64 * eps * np.abs(a[2]).max())


@pytest.mark.parametrize("y_kind", ["int32", "uint8", "float-integral", "list", "bool"])
def test_label_dtypes(y_kind, rng):
    X, y, W, b, _ = make_problem(rng, 20, 3, 2, np.float64)
    conv = {"int32": lambda y: y.astype(np.int32), "uint8": lambda y: y.astype(np.uint8),
            "float-integral": lambda y: y.astype(float), "list": list,
            "bool": lambda y: y.astype(bool)}[y_kind]
    np.testing.assert_array_equal(fs.loss_and_grad(X, conv(y), W, b)[1],
                                  fs.loss_and_grad(X, y, W, b)[1])


@pytest.mark.parametrize("k", [3, 40])
def test_unit_weights_equal_no_weights(k, rng):
    X, y, W, b, _ = make_problem(rng, 41, 5, k, np.float64)
    a = fs.loss_and_grad(X, y, W, b, alpha=0.2)
    w = fs.loss_and_grad(X, y, W, b, alpha=0.2, sample_weight=np.ones(41))
    assert w[0] == pytest.approx(a[0], rel=1e-15)
    np.testing.assert_allclose(w[1], a[1], rtol=1e-14, atol=1e-17)
    np.testing.assert_allclose(w[2], a[2], rtol=1e-14, atol=1e-17)


@pytest.mark.parametrize("k", [3, 40])
@pytest.mark.parametrize("soft", [False, True], ids=["labels", "soft"])
def test_integer_weight_equals_repeated_row(k, soft, rng):
    X, y, W, b, _ = make_problem(rng, 30, 5, k, np.float64, soft=soft)
    reps = rng.integers(0, 4, size=30)
    reps[0] = 3
    got = fs.loss_and_grad(X, y, W, b, sample_weight=reps)
    rep = fs.loss_and_grad(np.repeat(X, reps, axis=0), np.repeat(y, reps, axis=0), W, b)
    assert got[0] == pytest.approx(rep[0], rel=1e-13)
    np.testing.assert_allclose(got[1], rep[1], rtol=0, atol=1e-14)
    np.testing.assert_allclose(got[2], rep[2], rtol=0, atol=1e-14)


def test_weights_scale_free(rng):
    """Multiplying every weight by a constant changes nothing (weighted mean)."""
    X, y, W, b, sw = make_problem(rng, 25, 3, 4, np.float64, weights=True)
    a = fs.loss_and_grad(X, y, W, b, sample_weight=sw)
    c = fs.loss_and_grad(X, y, W, b, sample_weight=8 * sw)
    assert c[0] == pytest.approx(a[0], rel=1e-14)
    np.testing.assert_allclose(c[1], a[1], rtol=1e-13, atol=1e-16)


def test_alpha_adds_the_l2_term_on_W_only(rng):
    X, y, W, b, _ = make_problem(rng, 25, 3, 4, np.float64)
    a = fs.loss_and_grad(X, y, W, b)
    p = fs.loss_and_grad(X, y, W, b, alpha=0.7)
    assert p[0] == pytest.approx(a[0] + 0.35 * np.sum(W**2), rel=1e-14)
    np.testing.assert_allclose(p[1], a[1] + 0.7 * W, rtol=1e-14, atol=1e-16)
    np.testing.assert_array_equal(p[2], a[2])



@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n, k", [(300, 256), (1200, 60)], ids=["gemm", "rows"])
def test_alpha_on_many_weights_matches_reference(n, k, dt, rng):
    # From _penalty._KERNEL_FROM weights the L2 term goes through one
    # compiled pass (_kernels._vector._add_scaled) instead of NumPy's.
    from fastsoftmax._penalty import _KERNEL_FROM

    assert n * k >= _KERNEL_FROM
    X, y, W, b, _ = make_problem(rng, 64, n, k, dt)
    got = fs.loss_and_grad(X, y, W, b, alpha=0.3)
    assert_close(got, truth(X, y, W, b, alpha=0.3), dt)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("strategy", ["rows", "gemm"])
def test_alpha_on_many_weights_in_solver_layout_takes_the_compiled_pass(strategy, dt, rng,
                                                                        monkeypatch):
    # The solvers' coef is (k, n) C-contiguous, the gradient the sum of the
    # chunks' (n, k) or (k, n') parts: the engine adds the L2 term in the
    # compiled pass that sums them (_kernels._fused._sum_chunks, reading the
    # kernels' own copy of the weights), not in a second pass.
    import fastsoftmax._dense as dense
    import fastsoftmax._kernels._vector as vector
    from fastsoftmax._penalty import _KERNEL_FROM

    calls = []
    kernel = dense._sum_chunks
    monkeypatch.setattr(dense, "_sum_chunks", lambda *a: calls.append(a[2]) or kernel(*a))
    monkeypatch.setattr(vector, "_add_scaled", None)  # not called
    n, k = 1400, 48
    assert n * k >= _KERNEL_FROM
    X, y, W, b, _ = make_problem(rng, 64, n, k, dt)
    obj = PublicObjective(X, y, k, strategy=strategy, n_threads=2)
    assert obj.strategy == strategy
    assert_close(obj(W, b, 0.3), truth(X, y, W, b, alpha=0.3), dt)
    assert calls == [dt(0.3)]


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("order", ["C", "F", "mixed"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("size", ["parallel", "one thread"])
def test_penalize_kernel_matches_numpy(dt, order, threads, size, rng):
    """_penalty.penalize through the compiled passes against NumPy, in any memory order.

    From ``_KERNEL_FROM`` weights the parallel pass, below it the loop on
    the calling thread (``_kernels._vector._add_scaled_one``).
    """
    from fastsoftmax._penalty import _KERNEL_FROM, l2_penalty, penalize

    shape = (300, _KERNEL_FROM // 300 + 7) if size == "parallel" else (10, 37)
    coef = rng.standard_normal(shape).astype(dt)
    grad = rng.standard_normal(shape).astype(dt)
    if order in ("F", "mixed"):
        grad = np.asfortranarray(grad)
    if order == "F":
        coef = np.asfortranarray(coef)
    want_grad = grad + dt(0.3) * coef
    want = 2.5 + l2_penalty(coef, 0.3)
    saved = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        coef_before = coef.copy()
        got = penalize(2.5, grad, coef, 0.3)
    finally:
        numba.set_num_threads(saved)
    np.testing.assert_array_equal(coef, coef_before)
    rtol = 1e-14 if dt == np.float64 else 1e-6
    assert got == pytest.approx(want, rel=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=rtol, atol=rtol)
    # Weights beyond float32's square root: the sum of squares is float64.
    big = np.full(shape, 1e20, dtype=dt)
    assert penalize(0.0, np.zeros(shape, dt), big, 1.0) == pytest.approx(0.5 * big.size * 1e40)
    # ... and an overflow is inf, not an error nor a warning, in either pass.
    if dt == np.float64:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert penalize(0.0, np.zeros(shape), np.full(shape, 1e200), 1.0) == np.inf
            assert l2_penalty(np.full((3, 4), 1e200), 1.0) == np.inf


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", ["strided", "1-D", "dtypes"])
def test_penalize_without_a_compiled_pass_matches_numpy(dt, case, rng):
    """Weights the compiled passes do not take (strided, 1-D, two dtypes) go through NumPy."""
    from fastsoftmax._penalty import l2_penalty, penalize

    coef = rng.standard_normal((12, 9)).astype(dt)
    grad = rng.standard_normal((12, 18)).astype(dt)[:, ::2]
    if case == "1-D":
        coef, grad = coef.ravel(), np.ascontiguousarray(grad).ravel()
    elif case == "dtypes":
        coef = coef.astype(np.float64 if dt == np.float32 else np.float32)
        grad = np.ascontiguousarray(grad)
    want_grad = grad + grad.dtype.type(0.3) * coef
    got = penalize(2.5, grad, coef, 0.3)
    assert got == pytest.approx(2.5 + l2_penalty(coef, 0.3), rel=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-6)


# ------------------------------------------------------------------- threads

@pytest.mark.parametrize("k", [3, 40])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_thread_counts_agree(k, dt, rng):
    X, y, W, b, sw = make_problem(rng, 1001, 6, k, dt, weights=True)
    one = fs.loss_and_grad(X, y, W, b, sample_weight=sw, n_threads=1)
    two = fs.loss_and_grad(X, y, W, b, sample_weight=sw, n_threads=2)
    # Only the order of the final partial sums differs.
    assert_close(two, one, dt)
    eps = float(np.finfo(dt).eps)
    assert two[0] == pytest.approx(one[0], rel=1e-12 if dt == np.float64 else 4 * eps)


@pytest.mark.parametrize("m", [1, 2, 3, 5, 6, 7, 9])
@pytest.mark.parametrize("k", [3, 40])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_few_rows(m, k, n_threads, rng):
    """m not a multiple of the 4-row block, and m below the thread count."""
    X, y, W, b, sw = make_problem(rng, m, 3, k, np.float64, weights=True)
    sw[0] += 0.5  # never all zero
    got = fs.loss_and_grad(X, y, W, b, sample_weight=sw, n_threads=n_threads)
    assert_close(got, truth(X, y, W, b, sample_weight=sw), np.float64)


def test_thread_count_restored(rng):
    X, y, W, b, _ = make_problem(rng, 10, 3, 3, np.float64)
    before = numba.get_num_threads()
    for nt in (1, 2, None):
        fs.loss_and_grad(X, y, W, b, n_threads=nt)
        assert numba.get_num_threads() == before


# ------------------------------------------------------------ dtypes, layouts

def test_float32_in_float32_out(rng):
    X, y, W, b, sw = make_problem(rng, 30, 4, 5, np.float32, weights=True)
    # W, b and weights given in float64 are cast to X's dtype
    loss, gW, gb = fs.loss_and_grad(X, y, W.astype(np.float64), b.astype(np.float64),
                                    sample_weight=sw.astype(np.float64), alpha=0.5)
    assert isinstance(loss, float)
    assert gW.dtype == np.float32 and gb.dtype == np.float32
    assert_close((loss, gW, gb), fs.loss_and_grad(X, y, W, b, sample_weight=sw, alpha=0.5),
                 np.float32)


@pytest.mark.parametrize("src", [np.int64, np.int8, np.bool_, np.float16])
def test_non_float_X_becomes_float64(src, rng):
    X = rng.integers(0, 2, size=(12, 3)).astype(src)
    y = rng.integers(0, 3, size=12)
    W = rng.standard_normal((3, 3)).astype(np.float32)
    loss, gW, gb = fs.loss_and_grad(X, y, W, np.zeros(3, dtype=np.float32))
    assert gW.dtype == np.float64 and gb.dtype == np.float64
    assert_close((loss, gW, gb), truth(X.astype(np.float64), y, W, np.zeros(3)), np.float64)


@pytest.mark.parametrize("k", [3, 40])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("soft", [False, True], ids=["labels", "soft"])
def test_layouts_and_caller_arrays_untouched(k, dt, n_threads, layout, soft, rng):
    """Every input in the given layout: same result as C-contiguous input, to
    the bit, and nothing the caller passed is modified."""
    X, y, W, b, sw = make_problem(rng, 23, 5, k, dt, weights=True, soft=soft)
    args = [make_layout(a, layout) for a in (X, y, W, b, sw)]
    copies = [a.copy() for a in args]
    got = fs.loss_and_grad(*args[:4], alpha=0.1, sample_weight=args[4], n_threads=n_threads)
    want = fs.loss_and_grad(X, y, W, b, alpha=0.1, sample_weight=sw, n_threads=n_threads)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    for a, c in zip(args, copies, strict=True):
        np.testing.assert_array_equal(a, c)
    # the gradients are fresh arrays, not views of an input
    for g in got[1:]:
        assert g.flags.c_contiguous and g.flags.writeable
        assert not any(np.shares_memory(g, a) for a in args)


def test_results_do_not_alias_between_calls(rng):
    X, y, W, b, _ = make_problem(rng, 10, 3, 3, np.float64)
    _, g1, b1 = fs.loss_and_grad(X, y, W, b)
    g1_copy = g1.copy()
    _, g2, b2 = fs.loss_and_grad(X, y, 2 * W, b)
    np.testing.assert_array_equal(g1, g1_copy)
    assert not np.shares_memory(g1, g2) and not np.shares_memory(b1, b2)
