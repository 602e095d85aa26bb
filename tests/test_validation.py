"""The edge: every bad input gets a ValueError or TypeError whose message
names the problem (and the row, column, index or value where there is one),
and a rejected call has no side effects (thread count, output buffers)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import fastsoftmax as fs

M, N, K = 6, 3, 4


def base(dt=np.float64):
    rng = np.random.default_rng(0)
    return dict(
        X=rng.standard_normal((M, N)).astype(dt),
        y=np.array([0, 1, 2, 3, 0, 1]),
        W=rng.standard_normal((N, K)).astype(dt),
        b=np.zeros(K, dtype=dt),
        sample_weight=np.ones(M, dtype=dt),
    )


def call(**changes):
    args = base()
    for key, fn in changes.items():
        args[key] = fn(args[key]) if callable(fn) else fn
    X, y, W, b = args.pop("X"), args.pop("y"), args.pop("W"), args.pop("b")
    return fs.loss_and_grad(X, y, W, b, **args)


def with_entry(index, value, dtype=None):
    def change(a):
        a = np.array(a, dtype=dtype if dtype is not None else a.dtype)
        a[index] = value
        return a
    return change


def probs():
    Y = np.full((M, K), 1.0 / K)
    return Y


CASES = {
    # shapes
    "W rows != X columns": (dict(W=np.zeros((2, K))), ValueError,
                            r"W has 2 rows but X has 3 features"),
    "y length": (dict(y=np.zeros(5, dtype=int)), ValueError,
                 r"y has 5 labels but X has 6 rows"),
    "b length": (dict(b=np.zeros(3)), ValueError, r"b has 3 entries but W has 4 columns"),
    "b 2-D": (dict(b=np.zeros((1, K))), ValueError, r"b must be 1-D, got .*\(1, 4\)"),
    "targets columns": (dict(y=np.full((M, 3), 1 / 3)), ValueError,
                        r"y as a target matrix must have shape \(6, 4\).*got \(6, 3\)"),
    "targets rows": (dict(y=np.full((5, K), 1 / K)), ValueError,
                     r"y as a target matrix must have shape \(6, 4\).*got \(5, 4\)"),
    "y 3-D": (dict(y=np.zeros((M, K, 1))), ValueError, r"y must be labels of shape \(6,\)"),
    "sample_weight length": (dict(sample_weight=np.ones(5)), ValueError,
                             r"sample_weight has 5 entries but X has 6 rows"),
    "W 1-D": (dict(W=np.zeros(N)), ValueError, r"W must be 2-D"),
    "W no columns": (dict(W=np.zeros((N, 0)), b=None), ValueError, r"W has 0 columns"),
    "X empty": (dict(X=np.zeros((0, N)), y=np.zeros(0, dtype=int), sample_weight=None),
                ValueError, r"X has no rows"),
    "X no features": (dict(X=np.zeros((M, 0)), W=np.zeros((0, K))), ValueError,
                      r"X has no features"),
    "X 3-D": (dict(X=np.zeros((M, N, 1))), ValueError,
              r"X must be 2-D, got an array of shape \(6, 3, 1\)"),
    "X 1-D": (dict(X=np.zeros(N)), ValueError, r"X must be 2-D"),
    # labels
    "label too large": (dict(y=with_entry(2, 4)), ValueError,
                        r"y\[2\] = 4 is not a class index in 0\.\.3"),
    "label negative": (dict(y=with_entry(1, -1)), ValueError,
                       r"y\[1\] = -1 is not a class index in 0\.\.3"),
    "label not integral": (dict(y=with_entry(3, 1.5, float)), ValueError,
                           r"y must hold integer class labels; y\[3\] = 1\.5"),
    "label NaN": (dict(y=with_entry(4, np.nan, float)), ValueError,
                  r"integer class labels; y\[4\] = nan"),
    "label strings": (dict(y=np.array(list("abcdab"))), TypeError,
                      r"y must hold integer class labels 0\.\.3, got dtype <U1"),
    # non-finite values
    "X NaN": (dict(X=with_entry((2, 1), np.nan)), ValueError,
              r"X contains NaN at row 2, column 1; it must be finite"),
    "X inf": (dict(X=with_entry((4, 0), np.inf)), ValueError,
              r"X contains inf at row 4, column 0"),
    "X -inf": (dict(X=with_entry((5, 2), -np.inf)), ValueError,
               r"X contains -inf at row 5, column 2"),
    "W NaN": (dict(W=with_entry((1, 3), np.nan)), ValueError,
              r"W contains NaN at row 1, column 3"),
    "W inf": (dict(W=with_entry((0, 0), np.inf)), ValueError, r"W contains inf at row 0, column 0"),
    "b inf": (dict(b=with_entry(3, np.inf)), ValueError, r"b contains inf at index 3"),
    "b NaN": (dict(b=with_entry(0, np.nan)), ValueError, r"b contains NaN at index 0"),
    "sample_weight NaN": (dict(sample_weight=with_entry(2, np.nan)), ValueError,
                          r"sample_weight contains NaN at index 2"),
    "sample_weight inf": (dict(sample_weight=with_entry(5, np.inf)), ValueError,
                          r"sample_weight contains inf at index 5"),
    # weights
    "sample_weight negative": (dict(sample_weight=with_entry(1, -1.0)), ValueError,
                               r"sample_weight\[1\] = -1\.0 is negative"),
    "sample_weight all zero": (dict(sample_weight=np.zeros(M)), ValueError,
                               r"sample_weight sums to zero"),
    # soft targets
    "target negative": (dict(y=lambda _: with_entry((2, 0), -0.25)(probs())), ValueError,
                        r"y row 2 is not a probability vector.*min -0\.25"),
    "target sum != 1": (dict(y=lambda _: with_entry((3, 1), 0.5)(probs())), ValueError,
                        r"y row 3 is not a probability vector.*sum 1\.25"),
    "target > 1": (dict(y=lambda _: with_entry((0, slice(None)), [2.0, -1.0, 0, 0])(probs())),
                   ValueError, r"y row 0 is not a probability vector"),
    "target NaN": (dict(y=lambda _: with_entry((5, 2), np.nan)(probs())), ValueError,
                   r"y row 5 is not a probability vector"),
    # types
    "X complex": (dict(X=lambda X: X.astype(complex)), TypeError,
                  r"X must hold real numbers, got dtype complex128 \(complex\)"),
    "X strings": (dict(X=np.full((M, N), "a")), TypeError,
                  r"X must hold real numbers, got dtype <U1"),
    "X objects": (dict(X=np.full((M, N), None)), TypeError,
                  r"X must hold real numbers, got dtype object"),
    "X ragged": (dict(X=[[1.0, 2.0], [3.0]]), TypeError, r"X must be array-like of numbers"),
    "W complex": (dict(W=lambda W: W + 1j), TypeError, r"W must hold real numbers.*complex"),
    "b strings": (dict(b=np.array(list("abcd"))), TypeError, r"b must hold real numbers"),
    "sample_weight strings": (dict(sample_weight=np.array(list("abcdef"))), TypeError,
                              r"sample_weight must hold real numbers"),
    # n_threads
    "n_threads 0": (dict(n_threads=0), ValueError, r"n_threads must be between 1 and \d+"),
    "n_threads -1": (dict(n_threads=-1), ValueError,
                     r"n_threads must be between 1 and \d+.*got -1"),
    "n_threads too large": (dict(n_threads=numba.config.NUMBA_NUM_THREADS + 1), ValueError,
                            r"\(NUMBA_NUM_THREADS\), got \d+"),
    "n_threads float": (dict(n_threads=1.5), TypeError,
                        r"n_threads must be an int or None, got float"),
    "n_threads bool": (dict(n_threads=True), TypeError,
                       r"n_threads must be an int or None, got bool"),
    "n_threads string": (dict(n_threads="2"), TypeError, r"got str"),
    # alpha
    "alpha negative": (dict(alpha=-0.1), ValueError,
                       r"alpha must be a finite number >= 0, got -0\.1"),
    "alpha NaN": (dict(alpha=float("nan")), ValueError,
                  r"alpha must be a finite number >= 0, got nan"),
    "alpha inf": (dict(alpha=float("inf")), ValueError,
                  r"alpha must be a finite number >= 0, got inf"),
    "alpha string": (dict(alpha="0.1"), TypeError, r"alpha must be a real number, got str"),
    "alpha bool": (dict(alpha=True), TypeError, r"alpha must be a real number, got bool"),
    "alpha array": (dict(alpha=np.array([0.1])), TypeError,
                    r"alpha must be a real number, got ndarray"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_rejected_with_a_clear_message(case):
    changes, exc, match = CASES[case]
    before = numba.get_num_threads()
    with pytest.raises(exc, match=match):
        call(**changes)
    assert numba.get_num_threads() == before


def test_valid_base_call_passes():
    """The base problem of the table is itself valid, so each case fails for
    its own reason only."""
    loss, gW, gb = call()
    assert np.isfinite(loss) and gW.shape == (N, K) and gb.shape == (K,)
    call(n_threads=np.int64(1), alpha=np.float32(0.5))  # numpy scalars are accepted
    call(y=probs())


def test_first_bad_entry_is_named():
    X = base()["X"]
    X[4, 2] = np.nan
    X[1, 0] = np.inf
    X[1, 1] = np.nan
    with pytest.raises(ValueError, match=r"X contains inf at row 1, column 0"):
        call(X=X, n_threads=2)
    with pytest.raises(ValueError, match=r"X contains inf at row 1, column 0"):
        call(X=X, n_threads=1)


@pytest.mark.parametrize("path", ["numpy", "compiled", "compiled-parallel"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_first_nonfinite_row_either_way(monkeypatch, path, dt):
    """NumPy's test below SCAN_FROM entries and the compiled scan from there
    (one chunk on the calling thread, as a small scan runs, or a chunk per
    thread) find the same first row: NaN, inf or -inf, first, last or in
    between, 1-D and 2-D; the largest finite values are finite."""
    from fastsoftmax import _launch, _validation
    from fastsoftmax._validation import check_finite, first_nonfinite_row

    if path.startswith("compiled"):
        monkeypatch.setattr(_validation, "SCAN_FROM", 1)
        if path == "compiled-parallel":
            monkeypatch.setattr(_launch, "SERIAL_WORK", 0)
            monkeypatch.setattr(_launch, "SERIAL_WORK_WARM", 0)
    else:
        monkeypatch.setattr(_validation, "SCAN_FROM", 1 << 40)
    rng = np.random.default_rng(5)
    for shape in [(1, 1), (7,), (50, 3), (300, 17)]:
        a = rng.standard_normal(shape).astype(dt)
        a.flat[::5] = np.finfo(dt).max
        assert first_nonfinite_row(a) == -1
        m = shape[0]
        for bad in (np.nan, np.inf, -np.inf):
            for rows in ([0], [m - 1], [m // 2, m - 1], [m // 3, m // 2]):
                b = a.copy()
                for r in rows:
                    b[(r, -1) if b.ndim == 2 else r] = bad
                assert first_nonfinite_row(b, n_threads=2) == min(rows), (shape, bad, rows)
    X = rng.standard_normal((60, 4)).astype(dt)
    X[41, 2], X[52, 0] = np.nan, np.inf
    with pytest.raises(ValueError, match=r"X contains NaN at row 41, column 2; it must be fin"):
        check_finite(X, "X")
    assert first_nonfinite_row(np.empty((0, 3), dt)) == -1


def test_first_nonfinite_row_switches_to_the_compiled_scan_at_scan_from(monkeypatch):
    from fastsoftmax._kernels import _checks
    from fastsoftmax._validation import SCAN_FROM, first_nonfinite_row

    real, calls = _checks._first_nonfinite_row, []
    monkeypatch.setattr(_checks, "_first_nonfinite_row",
                        lambda A, bad_row: calls.append(A.shape) or real(A, bad_row))
    for rows, scans in ((SCAN_FROM // 4 - 1, False), (SCAN_FROM // 4, True)):
        a = np.zeros((rows, 4))
        a[-1, 3] = np.nan
        calls.clear()
        assert first_nonfinite_row(a) == rows - 1
        assert calls == ([(rows, 4)] if scans else []), rows


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("k", [3, 40])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_overflowing_logits_name_the_row(dt, k, n_threads):
    big = np.sqrt(np.finfo(dt).max) * 10  # big * big overflows, 2 * big does not
    X = np.ones((8, 2), dtype=dt)
    X[5] = big
    W = np.ones((2, k), dtype=dt)
    W[:, 0] = big  # every logit finite except row 5, column 0
    with pytest.raises(ValueError, match=(r"logits X @ W \+ b are not finite at row 5: .*"
                                          + np.dtype(dt).name)):
        fs.loss_and_grad(X, np.zeros(8, dtype=int), W, n_threads=n_threads)
    X[5] = 1  # and without that row the same call is fine
    assert np.isfinite(fs.loss_and_grad(X, np.zeros(8, dtype=int), W, n_threads=n_threads)[0])


def test_overflow_float32_1e30():
    X = np.zeros((4, 2), dtype=np.float32)
    X[2] = 1e30
    W = np.full((2, 3), 1e30, dtype=np.float32)
    with pytest.raises(ValueError, match="not finite at row 2: .* too large for float32"):
        fs.loss_and_grad(X, [0, 1, 2, 0], W)


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("f", [fs.softmax, fs.log_softmax, fs.logsumexp], ids=lambda f: f.__name__)
def test_thread_count_restored_after_kernel_error(f, n_threads):
    """The NaN is found inside the thread-count context: it must still be
    restored on the way out."""
    Z = np.zeros((5, 3))
    Z[3, 1] = np.nan
    before = numba.get_num_threads()
    with pytest.raises(ValueError, match="Z row 3 contains NaN"):
        f(Z, n_threads=n_threads)
    assert numba.get_num_threads() == before


@pytest.mark.parametrize("n_threads", [1, 2])
def test_thread_count_restored_after_objective_error(n_threads):
    X = np.full((4, 2), 1e200)
    W = np.full((2, 3), 1e200)
    before = numba.get_num_threads()
    with pytest.raises(ValueError, match="not finite at row 0"):
        fs.loss_and_grad(X, [0, 1, 2, 0], W, n_threads=n_threads)
    assert numba.get_num_threads() == before


@pytest.mark.parametrize("f", [fs.softmax, fs.log_softmax, fs.logsumexp], ids=lambda f: f.__name__)
@pytest.mark.parametrize("Z, exc, match", [
    (np.zeros((2, 2), dtype=complex), TypeError, r"Z must hold real numbers, got dtype complex128"),
    (np.array([["a", "b"]]), TypeError, r"Z must hold real numbers"),
    ([[1.0], [1.0, 2.0]], TypeError, r"Z must be array-like of numbers"),
    (np.zeros((2, 2, 2)), ValueError, r"Z must be 1-D or 2-D"),
    (np.float64(3.0), ValueError, r"Z must be 1-D or 2-D, got an array of shape \(\)"),
])
def test_rowwise_functions_reject_bad_types(f, Z, exc, match):
    with pytest.raises(exc, match=match):
        f(Z)


def test_read_only_input_reaches_the_kernels_as_one_writable_typed_view():
    """A read-only array is passed on as a writable-typed view of the same
    memory (one compiled specialisation per dtype); the caller's array and
    its flags are untouched, and a writable array is passed on as is."""
    from fastsoftmax._validation import check_X, kernel_view

    X = np.arange(12.0).reshape(4, 3)
    X.flags.writeable = False
    V = check_X(X)
    assert V.flags.writeable and V.flags.c_contiguous
    assert np.shares_memory(V, X) and np.array_equal(V, X)
    assert not X.flags.writeable
    W = np.ones((2, 2))
    assert kernel_view(W) is W
    y = np.array([0, 1, 1, 0])
    y.flags.writeable = False
    W3 = np.zeros((3, 2))
    W3.flags.writeable = False
    got = fs.loss_and_grad(X, y, W3)
    want = fs.loss_and_grad(np.array(X), np.array(y), np.zeros((3, 2)))
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    assert not X.flags.writeable and not y.flags.writeable and not W3.flags.writeable


def test_value_beyond_the_model_dtype_is_named_not_warned():
    """A float32 model given float64 data with a value beyond float32's range:
    a ValueError naming the entry, no overflow RuntimeWarning from the cast."""
    import warnings

    X = np.zeros((6, 4), np.float32)
    y = np.array([0, 1, 0, 1, 0, 1])
    model = fs.SoftmaxRegression("lbfgs").fit(X, y)
    X_new = np.zeros((3, 4))
    X_new[1, 2] = 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"X\[1, 2\] = 1e\+300 is outside the range of "
                                             r"float32"):
            model.predict_proba(X_new)


@pytest.mark.parametrize("kind", ["int64", "strided int64", "int32", "uint64", "read-only"])
@pytest.mark.parametrize("m", [0, 1, 7, 1000])
def test_labels_check_names_the_first_label_out_of_range(kind, m):
    """check_labels against NumPy: the first label outside 0..k-1 named, else the labels as int64.

    A writable C-contiguous int64 array comes back as the caller's own
    array (nothing is written to it); other kinds as a converted copy or
    view, equal to it.
    """
    from fastsoftmax._validation import check_labels

    rng = np.random.default_rng(m)
    k = 5
    for trial in range(6):
        labels = rng.integers(0, k, size=2 * m if kind == "strided int64" else m)
        if m and trial:
            bad = labels.shape[0] - 1 if trial == 1 else int(rng.integers(labels.shape[0]))
            labels[bad] = (-1, k, k + 3, -(2 ** 40))[trial % 4]
            if trial > 3:  # two bad labels: the first is named
                labels[int(rng.integers(labels.shape[0]))] = k
        y = {"int64": labels, "strided int64": labels[::2], "int32": labels.astype(np.int32),
             "uint64": labels.astype(np.uint64), "read-only": labels.copy()}[kind]
        if kind == "read-only":
            y.flags.writeable = False
        before = y.copy()
        wrong = np.flatnonzero((y.astype(np.int64) < 0) | (y.astype(np.int64) >= k))
        if wrong.size:
            i = int(wrong[0])
            with pytest.raises(ValueError, match=rf"y\[{i}\] = -?\d+ is not a class index "
                                                 rf"in 0\.\.{k - 1}"):
                check_labels(y, m, k)
        else:
            got = check_labels(y, m, k)
            assert got.dtype == np.int64 and got.flags.c_contiguous
            np.testing.assert_array_equal(got, y.astype(np.int64))
            if kind == "int64":
                assert got is y
        np.testing.assert_array_equal(y, before)


def test_thread_count_check_after_the_layer_is_launched():
    """check_n_threads takes a plain int in 1..NUMBA_NUM_THREADS once Numba's layer runs,
    and still refuses the rest with the same errors."""
    from fastsoftmax._launch import launched_thread_limit
    from fastsoftmax._threads import check_n_threads

    fs.loss_and_grad(np.ones((4, 2)), np.array([0, 1, 0, 1]), np.zeros((2, 2)), n_threads=1)
    limit = numba.config.NUMBA_NUM_THREADS
    assert launched_thread_limit() in (0, limit)  # 0 where the layer has not launched yet
    assert [check_n_threads(n) for n in range(1, limit + 1)] == list(range(1, limit + 1))
    assert check_n_threads(None) is None
    assert check_n_threads(np.int64(1)) == 1
    for bad, error in ((0, ValueError), (limit + 1, ValueError), (True, TypeError),
                       (1.0, TypeError)):
        with pytest.raises(error, match="n_threads must be"):
            check_n_threads(bad)
