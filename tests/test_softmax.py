"""softmax, log_softmax and logsumexp: mathematical properties (hypothesis),
agreement with the NumPy reference, and the calling conventions (out=,
dtypes, layouts, threads, rejected calls).

Tolerances are stated in units of the dtype's machine epsilon ``eps``: a row
of k probabilities is a sum of k rounded terms, so it sums to 1 within
``4 (k + 2) eps``; a value computed from logits of magnitude M carries an
absolute error of a few ``eps * M``.
"""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import FLOAT_DTYPES, LAYOUTS, dtype_id, make_layout, parallel_launches
from hypothesis import assume, given, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fastsoftmax as fs
from fastsoftmax import reference as ref

FUNCS = {"softmax": fs.softmax, "log_softmax": fs.log_softmax}


def eps(dt) -> float:
    return float(np.finfo(dt).eps)


def row_sum_tol(dt, k: int) -> float:
    return 4 * (k + 2) * eps(dt)


# ------------------------------------------------------------- strategies

def _half_max(dt) -> float:
    return float(np.finfo(dt).max) / 2


@st.composite
def logits(draw, *, max_m=40, max_k=50, magnitudes=("1", "30", "1e4", "half-max"),
           neg_inf=False, ndim=None):
    """A float32 or float64 array of logits, 1-D (k,) or 2-D (m, k).

    Entries are finite and bounded by a magnitude drawn from ``magnitudes``
    ("half-max" is half the dtype's largest value, so that z - max z stays
    finite). With ``neg_inf`` some entries are replaced by -inf, never a
    whole row: one drawn column is kept finite in every row.
    """
    dt = np.dtype(draw(st.sampled_from(FLOAT_DTYPES)))
    mag = draw(st.sampled_from(magnitudes))
    bound = _half_max(dt) if mag == "half-max" else float(mag)
    k = draw(st.integers(1, max_k))
    nd = draw(st.sampled_from((1, 2))) if ndim is None else ndim
    shape = (k,) if nd == 1 else (draw(st.integers(1, max_m)), k)
    elements = st.floats(-bound, bound, allow_nan=False, allow_infinity=False,
                         width=8 * dt.itemsize)
    Z = draw(hnp.arrays(dt, shape, elements=elements))
    if neg_inf:
        mask = draw(hnp.arrays(np.bool_, shape))
        keep = draw(st.integers(0, k - 1))
        mask[..., keep] = False
        Z[mask] = -np.inf
    return Z


def rows(Z: np.ndarray) -> np.ndarray:
    return Z.reshape(1, -1) if Z.ndim == 1 else Z


# ------------------------------------------------------ properties (hypothesis)

@given(logits(neg_inf=True))
def test_softmax_rows_are_probability_vectors(Z):
    P = fs.softmax(Z)
    assert P.shape == Z.shape and P.dtype == Z.dtype
    assert not np.isnan(P).any()
    assert np.all((P >= 0) & (P <= 1))
    sums = rows(P).sum(axis=1, dtype=np.float64)
    np.testing.assert_allclose(sums, 1.0, rtol=0, atol=row_sum_tol(Z.dtype, Z.shape[-1]))


@given(logits(magnitudes=("1", "30", "1e4"), neg_inf=True), st.data())
def test_softmax_invariant_to_row_constant(Z, data):
    """Adding c_i to row i changes nothing beyond the rounding of z + c."""
    dt = Z.dtype
    Z2 = rows(Z)
    m, k = Z2.shape
    c = data.draw(hnp.arrays(dt, (m, 1), elements=st.floats(
        -1e4, 1e4, allow_nan=False, width=8 * dt.itemsize)), label="c")
    Zc = (Z2 + c).reshape(Z.shape)
    assert np.all(np.isfinite(Zc) | np.isneginf(Z))
    P, Pc = fs.softmax(Z), fs.softmax(Zc)
    # z + c is rounded by up to eps |z + c|; z - max z then moves by up to
    # twice that, each exp by the factor exp(d) and the row sum too.
    M = np.max(np.abs(np.where(np.isfinite(Z2), Z2, 0)), initial=0) + np.max(np.abs(c))
    d = 4 * eps(dt) * (M + 1)
    tol = np.expm1(2 * d) * np.maximum(P, Pc) + row_sum_tol(dt, k)
    note(f"max |P - Pc| = {np.max(np.abs(P - Pc))}, d = {d}")
    assert np.all(np.abs(P.astype(np.float64) - Pc) <= tol)


@given(st.sampled_from(FLOAT_DTYPES), st.integers(1, 40), st.integers(1, 50), st.data())
def test_softmax_exactly_invariant_when_shift_is_exact(dt, m, k, data):
    """Integer-valued logits shifted by an integer stay exact, so the
    probabilities must be bit-identical."""
    Z = data.draw(hnp.arrays(dt, (m, k), elements=st.integers(-1000, 1000).map(float)))
    c = data.draw(hnp.arrays(dt, (m, 1), elements=st.integers(-10_000, 10_000).map(float)))
    Zc = Z + c
    np.testing.assert_array_equal(Zc - c, Z)  # the shift really is exact
    np.testing.assert_array_equal(fs.softmax(Zc), fs.softmax(Z))
    lse, lse_c = fs.logsumexp(Z), fs.logsumexp(Zc)
    # lse_c - c is rounded at the larger of the magnitudes involved
    big = max(np.abs(lse_c).max(), np.abs(lse).max(), np.abs(c).max())
    np.testing.assert_allclose(lse_c - c[:, 0], lse, rtol=0, atol=4 * eps(dt) * (big + 1))


@pytest.mark.parametrize("name", list(FUNCS))
@given(Z=logits(neg_inf=True))
def test_order_preserved(name, Z):
    """z_i > z_j => f_i >= f_j, and z_i == z_j => f_i == f_j exactly."""
    Z2 = rows(Z)
    F = rows(FUNCS[name](Z))
    gt = Z2[:, :, None] > Z2[:, None, :]
    eq = Z2[:, :, None] == Z2[:, None, :]
    assert not np.any(gt & (F[:, :, None] < F[:, None, :]))
    Fi, Fj = np.broadcast_arrays(F[:, :, None], F[:, None, :])
    assert np.array_equal(Fi[eq], Fj[eq])


@given(logits(neg_inf=True))
def test_log_softmax_is_log_of_softmax(Z):
    dt = Z.dtype
    P = fs.softmax(Z)
    L = fs.log_softmax(Z)
    assert L.shape == Z.shape and L.dtype == dt
    assert not np.isnan(L).any()
    assert np.all(L <= eps(dt) * 8)  # a log-probability is <= 0 up to rounding
    where = P > np.finfo(dt).tiny
    # log(p) inherits p's relative error (~k eps); z - lse is off by the
    # rounding of two numbers of magnitude up to max|z|.
    M = np.max(np.abs(np.where(np.isfinite(Z), Z, 0)), initial=0)
    tol = 8 * eps(dt) * (M + 1) + row_sum_tol(dt, Z.shape[-1])
    with np.errstate(divide="ignore"):
        logP = np.log(P.astype(np.float64))
    assert np.all(np.abs(L[where] - logP[where]) <= tol)


@given(logits(neg_inf=True))
def test_logsumexp_finite_and_matches_reference(Z):
    dt = Z.dtype
    lse = fs.logsumexp(Z)
    if Z.ndim == 1:
        assert np.ndim(lse) == 0
    else:
        assert lse.shape == (Z.shape[0],)
    assert np.asarray(lse).dtype == dt
    assert np.all(np.isfinite(lse))
    # The reference in float64 is exact enough to judge float32; for float64
    # input near half the dtype's maximum it still does not overflow.
    expect = ref.logsumexp(Z.astype(np.float64))
    assert np.all(np.isfinite(expect))
    mx = np.max(rows(Z), axis=1)
    tol = 4 * eps(dt) * np.abs(expect) + row_sum_tol(dt, Z.shape[-1])
    assert np.all(np.abs(lse - expect) <= tol)
    # max z <= logsumexp(z) <= max z + log k, up to rounding
    assert np.all(rows(np.atleast_1d(lse))[0] >= mx - tol)
    assert np.all(rows(np.atleast_1d(lse))[0] <= mx + np.log(Z.shape[-1]) + tol)


def _any_finite_logits(dt):
    return hnp.arrays(dt, hnp.array_shapes(min_dims=1, max_dims=2, max_side=40),
                      elements=st.floats(allow_nan=False, allow_infinity=False,
                                         width=8 * np.dtype(dt).itemsize))


@given(st.sampled_from(FLOAT_DTYPES).flatmap(_any_finite_logits))
def test_no_nan_from_finite_input_at_any_magnitude(Z):
    """Even at the dtype's extremes, where z - max z can overflow to -inf,
    finite input never gives NaN (it may give 0 and -inf)."""
    assume(Z.size > 0)
    for f in (fs.softmax, fs.log_softmax, fs.logsumexp):
        out = f(Z)
        assert not np.isnan(out).any(), f.__name__
    assert np.all(np.isfinite(fs.softmax(Z)))


@given(logits(neg_inf=True))
def test_neg_inf_entries_get_exact_zero(Z):
    assume(np.isneginf(Z).any())
    P = fs.softmax(Z)
    L = fs.log_softmax(Z)
    neg = np.isneginf(Z)
    assert np.all(P[neg] == 0)
    assert np.all(np.isneginf(L[neg]))
    assert np.all(np.isfinite(L[~neg]))


@given(logits(max_m=40, neg_inf=True, ndim=2))
def test_thread_count_changes_at_most_the_last_bits(Z):
    """Rows are independent, so chunking changes at most a row's last bits.

    Not always none: a row's vector loop can take another path where the
    buffers' addresses differ (one row of 300 in log_softmax, in some
    processes and not others: test_a_small_call_runs_one_chunk_...).
    """
    eps = np.finfo(Z.dtype).eps
    # The last bits of log-space results are those of the logits' magnitude.
    scale = max(1.0, float(np.max(np.abs(Z[np.isfinite(Z)]), initial=0.0)))
    for f, atol in ((fs.softmax, 4 * eps), (fs.log_softmax, 4 * eps * scale),
                    (fs.logsumexp, 4 * eps * scale)):
        one = f(Z, n_threads=1)
        with parallel_launches():
            two = f(Z, n_threads=2)
        np.testing.assert_allclose(one, two, rtol=4 * eps, atol=atol)


# ------------------------------------------------------- against the reference

@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (64, 10), (33, 100), (10,)])
def test_matches_reference(dt, shape, rng):
    """Same dtype as the reference; tolerances: softmax 16 eps relative plus
    the row-sum rounding; log_softmax and logsumexp the rounding of numbers of
    the logits' magnitude (the reference computes z - (max + log s), which
    cancels)."""
    Z = (rng.standard_normal(shape) * 10).astype(dt)
    if Z.shape[-1] > 1:
        Z[..., 1] = -np.inf
    e, k = eps(dt), Z.shape[-1]
    M = np.max(np.abs(Z[np.isfinite(Z)]))
    P = fs.softmax(Z)
    np.testing.assert_allclose(P, ref.softmax(Z), rtol=16 * e, atol=row_sum_tol(dt, k))
    log_tol = 8 * e * (M + 1) + row_sum_tol(dt, k)
    np.testing.assert_allclose(fs.log_softmax(Z), ref.log_softmax(Z), rtol=0, atol=log_tol)
    np.testing.assert_allclose(fs.logsumexp(Z), ref.logsumexp(Z), rtol=0, atol=log_tol)
    assert P.dtype == fs.log_softmax(Z).dtype == np.asarray(fs.logsumexp(Z)).dtype == dt


@given(logits(neg_inf=True, magnitudes=("1", "30", "1e4")))
def test_log_softmax_accurate_relative_to_its_value(Z):
    """log p_j is accurate to a few eps (1 + |log p_j|), however large the
    logits: it must not be computed by cancelling two numbers of the logits'
    magnitude. The truth is the float64 reference of the same numbers."""
    dt = Z.dtype
    L = fs.log_softmax(Z).astype(np.float64)
    Z64 = rows(Z.astype(np.float64))
    mx = Z64.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        truth = ((Z64 - mx) - np.log(np.exp(Z64 - mx).sum(axis=1, keepdims=True))).reshape(Z.shape)
    fin = np.isfinite(truth)
    assert np.array_equal(fin, np.isfinite(L))
    err = np.abs(L[fin] - truth[fin])
    tol = 8 * eps(dt) * (1 + np.abs(truth[fin])) + row_sum_tol(dt, Z.shape[-1])
    note(f"worst error / tol: {np.max(err / tol, initial=0)}")
    assert np.all(err <= tol)


def test_known_values():
    Z = np.array([[0.0, 0.0], [0.0, np.log(3.0)], [1000.0, -1000.0]])
    np.testing.assert_allclose(fs.softmax(Z), [[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]],
                               rtol=1e-15, atol=0)
    np.testing.assert_allclose(fs.logsumexp(Z), [np.log(2), np.log(4), 1000.0], rtol=1e-15)
    np.testing.assert_allclose(fs.log_softmax(Z)[2], [0.0, -2000.0], rtol=1e-15)


def test_single_class_rows():
    Z = np.array([[3.0], [-7.0]])
    np.testing.assert_array_equal(fs.softmax(Z), [[1.0], [1.0]])
    np.testing.assert_array_equal(fs.log_softmax(Z), [[0.0], [0.0]])
    np.testing.assert_array_equal(fs.logsumexp(Z), [3.0, -7.0])


# --------------------------------------------------------------------- out=

@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_out_given(name, dt, rng):
    f = FUNCS[name]
    Z = rng.standard_normal((9, 4)).astype(dt)
    out = np.full_like(Z, 7)
    r = f(Z, out=out)
    assert r is out
    np.testing.assert_array_equal(out, f(Z))


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("shape", [(9, 4), (5,)])
def test_out_in_place(name, shape, rng):
    f = FUNCS[name]
    Z = rng.standard_normal(shape)
    expect = f(Z.copy())
    r = f(Z, out=Z)
    assert r is Z
    # Not bit-identical: with out aliasing Z the compiler vectorises the row
    # sum differently, so the results may differ in the last bit.
    np.testing.assert_allclose(Z, expect, rtol=4 * eps(Z.dtype) * shape[-1], atol=0)


@pytest.mark.parametrize("name", list(FUNCS))
def test_out_rejected(name, rng):
    f = FUNCS[name]
    Z = rng.standard_normal((6, 4))
    with pytest.raises(ValueError, match=r"out must have shape \(6, 4\)"):
        f(Z, out=np.empty((6, 5)))
    with pytest.raises(ValueError, match="out must have shape .* dtype float64"):
        f(Z, out=np.empty((6, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="dtype float32"):
        f(Z.astype(np.float32), out=np.empty((6, 4)))
    with pytest.raises(ValueError, match="C-contiguous"):
        f(Z, out=np.empty((6, 8))[:, ::2])
    with pytest.raises(ValueError, match="C-contiguous"):
        f(Z, out=np.empty((6, 4), order="F"))
    ro = np.empty((6, 4))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        f(Z, out=ro)
    with pytest.raises(TypeError, match="out must be a numpy array"):
        f(Z, out=[[0.0] * 4] * 6)
    # a buffer that overlaps Z without being Z
    buf = np.zeros(7 * 4)
    buf[:24] = Z.ravel()
    with pytest.raises(ValueError, match="overlaps"):
        f(buf[:24].reshape(6, 4), out=buf[4:].reshape(6, 4))


BAD_ROWS = {
    "nan": (np.nan, "contains NaN"),
    "posinf": (np.inf, r"contains \+inf"),
    "all-neginf": (-np.inf, "is entirely -inf"),
}


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("bad", list(BAD_ROWS))
@pytest.mark.parametrize("n_threads", [1, 2])
def test_rejected_call_leaves_out_untouched(name, bad, n_threads, rng):
    f = FUNCS[name]
    value, msg = BAD_ROWS[bad]
    Z = rng.standard_normal((10, 5))
    if bad == "all-neginf":
        Z[7] = -np.inf
    else:
        Z[7, 3] = value
    out = rng.standard_normal((10, 5))
    before = out.copy()
    with parallel_launches():
        with pytest.raises(ValueError, match=f"Z row 7 {msg}"):
            f(Z, out=out, n_threads=n_threads)
        np.testing.assert_array_equal(out, before)
        assert out.tobytes() == before.tobytes()
        # in place: Z itself is the buffer and must survive too
        Zc = Z.copy()
        with pytest.raises(ValueError, match="Z row 7"):
            f(Z, out=Z, n_threads=n_threads)
        assert Z.tobytes() == Zc.tobytes()


@pytest.mark.parametrize("f", [fs.softmax, fs.log_softmax, fs.logsumexp],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("n_threads", [1, 2])
def test_error_names_first_bad_row(f, n_threads):
    Z = np.zeros((10, 3))
    Z[8, 0] = np.nan   # in the second chunk when two threads run
    Z[2, 1] = np.inf   # in the first chunk
    with parallel_launches():
        with pytest.raises(ValueError, match=r"^Z row 2 contains \+inf"):
            f(Z, n_threads=n_threads)
        Z[2, 1] = 0
        with pytest.raises(ValueError, match="^Z row 8 contains NaN"):
            f(Z, n_threads=n_threads)


@pytest.mark.parametrize("f", [fs.softmax, fs.log_softmax, fs.logsumexp],
                         ids=lambda f: f.__name__)
def test_a_small_call_runs_one_chunk_on_the_calling_thread(f, rng, monkeypatch):
    """Below _launch.SERIAL_WORK a call launches one chunk (at one thread: no
    worker to wake after an idle spell), and the numbers of two chunks (to
    the last bits: a row's vector loop can take another path where the
    buffer's alignment differs)."""
    from fastsoftmax import _functions

    chunks = []
    pick = _functions.rowwise_kernel

    def spy(n_classes):
        kernel = pick(n_classes)
        return lambda Z, mode, out, bad_row, bad_code: (
            chunks.append(bad_row.shape[0]) or kernel(Z, mode, out, bad_row, bad_code))

    monkeypatch.setattr(_functions, "rowwise_kernel", spy)
    Z = rng.standard_normal((300, 7))
    one = f(Z, n_threads=2)
    with parallel_launches():
        two = f(Z, n_threads=2)
    assert chunks == [1, 2]
    np.testing.assert_allclose(one, two, rtol=4 * np.finfo(np.float64).eps, atol=0)


def test_logsumexp_all_neginf_row_is_neginf():
    Z = np.array([[0.0, 1.0], [-np.inf, -np.inf], [2.0, -np.inf]])
    lse = fs.logsumexp(Z)
    assert np.isneginf(lse[1])
    np.testing.assert_allclose(lse[[0, 2]], [np.log1p(np.e), 2.0], rtol=1e-15)
    with pytest.raises(ValueError, match="row 0 contains NaN"):
        fs.logsumexp(np.array([[np.nan, -np.inf]]))


# ------------------------------------------------------- shapes and dtypes

@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_1d_input(dt):
    z = np.array([1.0, 2.0, -np.inf, 0.5], dtype=dt)
    for f in (fs.softmax, fs.log_softmax):
        r = f(z)
        assert r.shape == (4,) and r.dtype == dt
        np.testing.assert_array_equal(r, f(z[None, :])[0])
    lse = fs.logsumexp(z)
    assert np.ndim(lse) == 0 and not isinstance(lse, np.ndarray)
    assert np.asarray(lse).dtype == dt
    assert lse == fs.logsumexp(z[None, :])[0]


def test_zero_rows_and_empty_rows():
    Z = np.empty((0, 3))
    assert fs.softmax(Z).shape == (0, 3)
    assert fs.log_softmax(Z).shape == (0, 3)
    assert fs.logsumexp(Z).shape == (0,)
    for f in (fs.softmax, fs.log_softmax, fs.logsumexp):
        with pytest.raises(ValueError, match="rows of length 0"):
            f(np.empty((3, 0)))
        with pytest.raises(ValueError, match="rows of length 0"):
            f(np.empty(0))
        with pytest.raises(ValueError, match=r"1-D or 2-D, got an array of shape \(2, 2, 2\)"):
            f(np.zeros((2, 2, 2)))


@pytest.mark.parametrize("src", [np.int8, np.int64, np.uint16, np.bool_, np.float16, "list"])
def test_non_float_input_becomes_float64(src):
    Z = np.array([[1, 0, 1], [0, 0, 1]])
    Zin = Z.tolist() if src == "list" else Z.astype(src)
    expect = fs.softmax(Z.astype(np.float64))
    for f in (fs.softmax, fs.log_softmax, fs.logsumexp):
        r = f(Zin)
        assert r.dtype == np.float64
        np.testing.assert_array_equal(r, f(Z.astype(np.float64)))
    np.testing.assert_array_equal(fs.softmax(Zin), expect)


@pytest.mark.parametrize("f", [fs.softmax, fs.log_softmax, fs.logsumexp],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_input_layouts(f, dt, layout, rng):
    Z = (rng.standard_normal((11, 6)) * 5).astype(dt)
    Zin = make_layout(Z, layout)
    before = Zin.copy()
    r = f(Zin)
    assert r.dtype == dt
    np.testing.assert_array_equal(r, f(Z))
    np.testing.assert_array_equal(Zin, before)  # input never written


@pytest.mark.parametrize("f", [fs.softmax, fs.log_softmax, fs.logsumexp],
                         ids=lambda f: f.__name__)
def test_n_threads_argument(f, rng):
    Z = rng.standard_normal((50, 7))
    import numba

    before = numba.get_num_threads()
    one = f(Z, n_threads=1)
    with parallel_launches():
        np.testing.assert_array_equal(one, f(Z, n_threads=2))
    np.testing.assert_array_equal(one, f(Z, n_threads=2))
    assert numba.get_num_threads() == before
    with pytest.raises(ValueError, match="n_threads must be between 1 and"):
        f(Z, n_threads=0)
    with pytest.raises(TypeError, match="n_threads must be an int"):
        f(Z, n_threads=True)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_vector_exp_over_a_block_matches_numpy(dt):
    """The kernels' vector exp on a block of shifted rows (``_exp_flat``):
    within 2 ulp of np.exp over the whole range of arguments <= 0, exactly 0
    below the normal range and for -inf. Under the kernels' fast-math flags
    its argument reduction once lost up to 200 ulp near the bottom of the
    range (see ``_common._exp_loop``)."""
    from fastsoftmax._kernels._common import _EXP_LO32, _EXP_LO64, _exp_flat, _exp_shifted

    lo = _EXP_LO32 if dt == np.float32 else _EXP_LO64
    x = np.concatenate([[0.0, -np.inf, lo * 1.01, -1e30],
                        -np.logspace(-9, np.log10(-lo), 5001)]).astype(dt)
    z = x.copy()
    _exp_flat(z)
    # The one-row form (shift 0): the same loop.
    row = np.empty_like(x)
    total = _exp_shifted(x, dt(0), row)
    truth = np.exp(x.astype(np.float64))
    normal = x >= lo
    for got in (z, row):
        ulps = np.abs(got[normal] - truth[normal]) / np.spacing(truth[normal].astype(dt))
        assert ulps.max() <= 2
        assert np.all(got[~normal] == 0)
        assert got[0] == 1
    assert total == pytest.approx(truth.sum(), rel=10 * eps(dt))


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_row_maximum_helpers_match_numpy(dt, rng):
    """The kernels' row maxima: one compare-and-select chain on short rows
    (``_common``), whole vectors (``_rowvec.max_finite_row``) from LANES_FROM
    entries on, and the row-wise kernels' status of long rows from the
    vector maximum (``_rowwise._row_max_vector``). Every length across that
    boundary, the maximum at every position, and the non-finite entries
    each helper must report wherever they sit (the first entry included:
    it seeds the maximum)."""
    from fastsoftmax._kernels._common import (
        ALL_NEGINF,
        LANES_FROM,
        NAN,
        OK,
        POSINF,
        _max_finite,
        _row_max,
    )
    from fastsoftmax._kernels._rowvec import max_finite_row
    from fastsoftmax._kernels._rowwise import _row_max_vector

    for n in [1, 2, 7, 8, 9, 15, 16, 17, LANES_FROM - 1, LANES_FROM, LANES_FROM + 1, 40, 100]:
        z = rng.standard_normal(n).astype(dt)
        for at in sorted({0, n // 2, n - 1}):
            w = z.copy()
            w[at] = dt(10)
            assert _max_finite(w) == (10, True)
            assert _row_max(w) == (10, OK)
            assert max_finite_row(w) == (10, True)
            if n >= 8:
                assert _row_max_vector(w) == (10, OK)
            for bad in (np.nan, np.inf, -np.inf):
                b = w.copy()
                b[at] = bad
                assert not _max_finite(b)[1]
                assert not max_finite_row(b)[1]
                status = _row_max(b)[1]
                if n >= 8:
                    assert _row_max_vector(b)[1] == status
                if np.isnan(bad):
                    assert status == NAN
                elif bad > 0:
                    assert status == POSINF
                else:
                    assert status == (ALL_NEGINF if n == 1 else OK)
        assert _row_max(np.full(n, -np.inf, dt))[1] == ALL_NEGINF
        nan_last = np.full(n, np.inf, dt)
        nan_last[-1] = np.nan
        assert _row_max(nan_last)[1] == NAN
        if n >= 8:
            assert _row_max_vector(np.full(n, -np.inf, dt))[1] == ALL_NEGINF
            assert _row_max_vector(nan_last)[1] == NAN
