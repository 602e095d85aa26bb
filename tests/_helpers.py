"""Shared test helpers: the one place for plain functions and constants that
more than one test module uses (fixtures live in conftest.py; the command
line's helpers in _cli_helpers.py). Test modules import from here, and never import
each other or conftest.

The package's internals take coef in scikit-learn's layout (k, n); tests of
the kernels compare with ``fastsoftmax.reference`` in the public layout
W (n, k). These helpers build the internal objects from plain arrays and
translate, so that each test reads like the formula it checks.

* dtypes and layouts: FLOAT_DTYPES, dtype_id, make_layout, LAYOUTS
* data: toy_data (the notes' toy problem), dataset, make_problem
* internals in the public layout: PublicObjective (loss and gradient),
  product (Hessian-vector products), sgd_params, sgd_epoch
* loss-and-gradient checks: TOL, truth, assert_close
* Hessian-product checks: HESSP_TOL, HESSP_VARIANTS, f64, ref_hessp64
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import scipy.sparse

from fastsoftmax import SoftmaxRegression, _launch
from fastsoftmax import reference as ref
from fastsoftmax._data import make_dataset
from fastsoftmax._objective import Objective
from fastsoftmax._params import check_params
from fastsoftmax._solvers.sgd import SGDState, run_epoch
from fastsoftmax._sparse import as_csr
from fastsoftmax._threads import thread_policy

FLOAT_DTYPES = (np.float32, np.float64)


@contextlib.contextmanager
def parallel_launches():
    """Every kernel call in the block on every thread in force, however small.

    A small call otherwise runs on the calling thread alone
    (``_launch.serial_call``): tests of how chunks are split and their
    reports reduced need the parallel launch.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_launch, "SERIAL_WORK", 0)
        mp.setattr(_launch, "SERIAL_WORK_WARM", 0)
        yield


def dtype_id(dt) -> str:
    return np.dtype(dt).name


def make_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """Return ``a``'s values in a given memory layout, as a test input.

    "c": a C-contiguous copy; "readonly": a read-only C-contiguous copy;
    "strided": a non-contiguous view (every other column of a wider array,
    or every other element of a longer 1-D array); "fortran": a Fortran
    ordered copy. The returned array always compares equal to ``a``.
    """
    if layout == "c":
        return np.array(a, order="C")
    if layout == "readonly":
        r = np.array(a, order="C")
        r.flags.writeable = False
        return r
    if layout == "strided":
        if a.ndim == 1:
            wide = np.zeros(2 * a.shape[0], dtype=a.dtype)
            wide[::2] = a
            v = wide[::2]
        else:
            wide = np.zeros((a.shape[0], 2 * a.shape[1]), dtype=a.dtype)
            wide[:, ::2] = a
            v = wide[:, ::2]
        assert not v.flags.c_contiguous or v.size <= 1
        return v
    if layout == "fortran":
        return np.asfortranarray(a)
    raise ValueError(layout)


LAYOUTS = ("c", "readonly", "strided", "fortran")


def toy_data(seed=0):
    """The lecture notes' toy problem: three Gaussian classes, 500 points each."""
    rng = np.random.default_rng(seed)
    means = np.array([[2.0, 2.0], [8.0, 3.0], [3.0, 6.0]])
    X = np.concatenate([rng.standard_normal((500, 2)) + mu for mu in means])
    y = np.repeat(np.arange(3), 500)
    return X, y


def dataset(X, y, k, sample_weight=None):
    """A Dataset from labels (m,) or a target matrix (m, k), without the edge's checks.

    A SciPy sparse X goes in the engines' CSR form, as the edge hands it on
    (``as_csr``: int64 row pointers); SciPy's own int32 ones would compile
    every sparse kernel once more, for a signature no fit uses.
    """
    if scipy.sparse.issparse(X):
        X = as_csr(X)
    y = np.asarray(y)
    soft = y.ndim == 2
    return make_dataset(X, None if soft else y.astype(np.int64),
                        y.astype(X.dtype) if soft else None, sample_weight, k)


class PublicObjective:
    """An :class:`Objective` called as obj(W (n, k), b, alpha) -> (loss, grad_W (n, k), grad_b)."""

    def __init__(self, X, y, k, sample_weight=None, *, strategy=None, n_threads=None):
        self.objective = Objective(dataset(X, y, k, sample_weight), strategy=strategy)
        self.strategy = self.objective.strategy
        self.n_threads = n_threads

    def __call__(self, W, b=None, alpha=0.0):
        with thread_policy(self.n_threads):
            loss, g, gb = self.objective.loss_grad(np.ascontiguousarray(W.T), b, alpha)
        return loss, np.ascontiguousarray(g.T), gb


def sgd_params(**overrides):
    """Checked SolverParams of an SGD estimator with the given parameters."""
    return check_params(SoftmaxRegression("sgd", **overrides))


def sgd_epoch(X, y, k, W0, b0, order, *, sample_weight=None, n_threads=None, **params):
    """One compiled SGD epoch in the given row order; returns (W (n, k), b, updates, ok)."""
    state = SGDState.start(W0.T, b0)
    p = sgd_params(**params)
    m = X.shape[0]
    with thread_policy(n_threads):
        result = run_epoch(dataset(X, y, k, sample_weight), state, order, p,
                           steps_per_epoch=-(-m // min(p.batch_size, m)))
    return np.ascontiguousarray(state.coef.T), state.intercept, result.steps, result.ok


# --------------------------------------------------- loss-and-gradient checks
# Tolerances. The truth is ``reference.loss_and_grad`` evaluated in float64
# on the same numbers (cast from the test's dtype). float64 results must
# agree to rtol 1e-12 on the loss and 1e-11 * max|grad| on the gradients
# (sums of m products, all of magnitude <= max|grad| * m); float32 results
# to rtol 2e-5 on the loss (row terms in float32, summed in float64) and
# 2e-4 * max|grad| on the gradients (float32 accumulation over m rows).
TOL = {
    np.dtype(np.float32): {"loss": 2e-5, "grad": 2e-4},
    np.dtype(np.float64): {"loss": 1e-12, "grad": 1e-11},
}


def make_problem(rng, m, n, k, dt, *, intercept=True, weights=False, soft=False):
    X = rng.standard_normal((m, n)).astype(dt)
    W = (0.5 * rng.standard_normal((n, k))).astype(dt)
    b = (0.5 * rng.standard_normal(k)).astype(dt) if intercept else None
    if soft:
        y = rng.dirichlet(np.full(k, 0.5), size=m).astype(dt)
    else:
        y = rng.integers(0, k, size=m)
    sw = rng.uniform(0.0, 3.0, size=m).astype(dt) if weights else None
    return X, y, W, b, sw


def truth(X, y, W, b=None, *, alpha=0.0, sample_weight=None):
    """The reference in float64 on the same numbers."""

    def f64(a):
        return None if a is None else np.asarray(a, dtype=np.float64)

    y = np.asarray(y)
    return ref.loss_and_grad(f64(X), y.astype(np.float64) if y.ndim == 2 else y, f64(W),
                             f64(b), alpha=alpha, sample_weight=f64(sample_weight))


def assert_close(got, want, dt, *, grad_scale=None):
    """Compare (loss, grad_W, grad_b) triples with the module's tolerances."""
    tol = TOL[np.dtype(dt)]
    loss, gW, gb = got
    loss_r, gW_r, gb_r = want
    assert isinstance(loss, float)
    np.testing.assert_allclose(loss, loss_r, rtol=tol["loss"], atol=tol["loss"])
    scale = grad_scale if grad_scale is not None else max(
        np.max(np.abs(gW_r)), 0 if gb_r is None else np.max(np.abs(gb_r)), 1e-3)
    np.testing.assert_allclose(gW, gW_r, rtol=0, atol=tol["grad"] * scale)
    if gb_r is None:
        assert gb is None
    else:
        np.testing.assert_allclose(gb, gb_r, rtol=0, atol=tol["grad"] * scale)


# ------------------------------------------------- Hessian-vector product checks
# Tolerances. The truth is ``reference.hessp`` in float64 on the same numbers.
# Errors are measured against the magnitude of the terms summed, not of the
# result (H V can be small through cancellation): for the products
# ``M = |X|ᵀ |S| + alpha |V|`` with S the reference's per-row s_i (the column
# sums of |S| for the intercept). float64 must agree to ``5e-14 * max M``,
# float32 to ``5e-6 * max M`` (u_i is a dot product of n = 45 terms and each
# chunk sums ~100 rows in the input dtype; worst seen over these shapes, 3
# seeds: 8e-16 and 4.4e-7).
HESSP_TOL = {np.dtype(np.float32): 5e-6, np.dtype(np.float64): 5e-14}
HESSP_VARIANTS = ("plain", "weights", "soft", "no-b", "all")


class product:  # noqa: N801 (reads as the function it stands for)
    """Objective.hessian at (W, b), public layout in, run on ``n_threads`` threads."""

    def __init__(self, X, y, W, b, sw, alpha, *, n_threads=None, strategy=None, mode=None):
        self.objective = Objective(dataset(X, y, W.shape[1], sw), strategy=strategy, mode=mode)
        self.strategy, self.mode = self.objective.strategy, self.objective.engine.mode
        self.alpha, self.n_threads = alpha, n_threads
        with thread_policy(n_threads):
            self.H = self.objective.hessian(np.ascontiguousarray(W.T), b, alpha)
        self.loss, self.grad_coef, self.grad_intercept = (
            self.H.loss, self.H.grad_coef, self.H.grad_intercept)
        self.P = self.H._P

    def matvec(self, V, c=None):
        with thread_policy(self.n_threads):
            return self.H.matvec(V, c)


def f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


def ref_hessp64(X, y, W, b, V, c, alpha, sw):
    """reference.hessp in float64, and the magnitudes of its summed terms."""
    X, W, b, V, c, sw = map(f64, (X, W, b, V, c, sw))
    HV, Hc = ref.hessp(X, y, W, b, V, c, alpha=alpha, sample_weight=sw)
    # the per-row s_i again, for the magnitudes
    m = X.shape[0]
    d = (np.ones(m) if sw is None else sw) / (m if sw is None else sw.sum())
    P = ref.softmax(X @ W + (0 if b is None else b))
    U = X @ V + (0 if c is None else c)
    S = d[:, None] * (P * U - P * np.sum(P * U, axis=1, keepdims=True))
    mag = np.abs(X).T @ np.abs(S) + alpha * np.abs(V)
    return HV, Hc, mag, np.abs(S).sum(axis=0)


def fresh_process_env(**extra) -> dict:
    """The environment for a fresh Python process importing fastsoftmax from this checkout.

    This checkout first on PYTHONPATH, Numba's JIT on, ``extra`` set on top.
    """
    import os
    from pathlib import Path

    import fastsoftmax

    repo = str(Path(fastsoftmax.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]),
               **extra)
    env.pop("NUMBA_DISABLE_JIT", None)
    return env
