"""The peers of fastsoftmax.loss_and_grad, each built for a given thread count.

Every contender computes the same thing on the same arrays: the mean
cross-entropy of softmax(X W + b) against integer labels plus alpha/2 ||W||²,
and its gradients in W and b. :func:`make` returns a callable (no arguments)
or None when the peer's package is not installed. Thread pools:

============== =====================================================
fastsoftmax    Numba's pool, ``n_threads``; BLAS held at 1 (its policy)
numpy          fastsoftmax.reference; OpenBLAS at ``n_threads`` (threadpoolctl)
sklearn        LinearModelLoss.loss_gradient(n_threads=...); BLAS at ``n_threads``
onedal         daal4py cross_entropy_loss; ``daal4py.daalinit(n_threads)``
torch          eager autograd; ``torch.set_num_threads(n_threads)``
torch.compile  the same function through torch.compile; same pool
jax            jax.jit(jax.value_and_grad); XLA's pool, limited by the CPU
               affinity the worker process runs under
gemms          not a peer: the two products X W and Xᵀ E alone, through
               NumPy's OpenBLAS at ``n_threads`` (benchmarks/gemm_floor.py)
stream         not a peer: one read of X alone (each row summed), a Numba
               parallel loop on ``n_threads``: the memory floor of any
               pass that reads X once (benchmarks/scaling_floor.py)
fma            not a peer: a fixed amount of multiply-adds on data each
               thread keeps in its own L1 cache, no line shared (a Numba parallel loop on
               ``n_threads``; X only gives the dtype): how the cores'
               arithmetic alone scales from 1 to N threads
square_gemm    not a peer: A @ B on (2048 x 2048) operands of X's dtype
               through NumPy's OpenBLAS at ``n_threads``: how the BLAS's
               most compute-bound call scales
============== =====================================================

Each contender should run in its own process (``benchmarks/_worker.py``):
pools of different libraries left alive in one process fight for the cores.
"""

from __future__ import annotations

import importlib.util

import numpy as np

CONTENDERS = ("fastsoftmax", "numpy", "sklearn", "onedal", "torch", "torch.compile", "jax")


def available(name: str) -> bool:
    """Return True when the package behind contender ``name`` is installed."""
    module = {"sklearn": "sklearn", "onedal": "daal4py", "torch": "torch",
              "torch.compile": "torch", "jax": "jax",
              "stream": "numba", "fma": "numba"}.get(name, "numpy")  # gemms: NumPy
    return importlib.util.find_spec(module) is not None


def problem(m, n, k, dtype, seed=0):
    """Deterministic (X, y, W, b) for a shape: standard normal X, small W."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n), dtype=np.float32).astype(dtype, copy=False)
    y = rng.integers(0, k, m)
    W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
    return X, y, W, np.zeros(k, dtype)


def make(name, X, y, W, b, alpha, n_threads, scale=1.0):
    """A callable computing (loss, grad_W, grad_b) with contender ``name``, or None.

    ``scale`` sizes the machine contenders ``fma`` and ``square_gemm``, whose
    work does not come from X (1.0: the sizes below; 0.01 for a smoke test).
    """
    if not available(name):
        return None
    if name in ("fma", "square_gemm"):
        return globals()["_" + name](X, n_threads, scale)
    return globals()["_" + name.replace(".", "_")](X, y, W, b, alpha, n_threads)


def _fastsoftmax(X, y, W, b, alpha, n_threads):
    import fastsoftmax as fs

    return lambda: fs.loss_and_grad(X, y, W, b, alpha=alpha, n_threads=n_threads)


def _numpy(X, y, W, b, alpha, n_threads):
    from threadpoolctl import threadpool_limits

    from fastsoftmax import reference

    threadpool_limits(n_threads, user_api="blas")  # this process only runs this contender
    return lambda: reference.loss_and_grad(X, y, W, b, alpha=alpha)


def _gemms(X, y, W, b, alpha, n_threads):
    from threadpoolctl import threadpool_limits

    threadpool_limits(n_threads, user_api="blas")  # this process only runs this contender
    Z = np.empty((X.shape[0], W.shape[1]), X.dtype)
    G = np.empty_like(W)

    def products():
        np.dot(X, W, Z)
        np.dot(X.T, Z, G)

    return products


def _stream(X, y, W, b, alpha, n_threads):
    import numba

    numba.set_num_threads(n_threads)

    @numba.njit(parallel=True, fastmath=True)
    def row_sums(X, out):
        for i in numba.prange(X.shape[0]):
            acc = X.dtype.type(0)
            for j in range(X.shape[1]):
                acc += X[i, j]
            out[i] = acc

    out = np.empty(X.shape[0], X.dtype)
    return lambda: row_sums(X, out)


# fma: 64 independent rows of 512 entries (32 zmm registers of float32),
# each updated FMA_REPS times, one row at a time so that it stays in L1; the
# prange splits the rows among the threads, so the work is the same at every
# thread count and 1 -> N is the cores' own scaling on arithmetic that never
# leaves L1 (clock under load, cores that share their execution units). Rows
# start FMA_STRIDE entries apart, each on a cache line: no two threads ever
# write one line, and no vector spans two (with a row split across lines
# the loop ran at half speed, by the allocation's luck).
FMA_ROWS, FMA_WIDTH, FMA_STRIDE, FMA_REPS = 64, 512, 1024, 100_000


def _fma(X, n_threads, scale):
    import numba

    numba.set_num_threads(n_threads)

    @numba.njit(parallel=True, fastmath=True)
    def multiply_adds(acc, width, reps):
        for r in numba.prange(acc.shape[0]):
            a = acc[r, :width]
            for _ in range(reps):
                for j in range(width):
                    a[j] = a[j] * a.dtype.type(0.999) + a.dtype.type(0.001)

    from fastsoftmax._launch import aligned_empty

    acc = aligned_empty((FMA_ROWS, FMA_STRIDE), X.dtype)
    acc[:] = 1
    reps = max(1, int(FMA_REPS * scale))
    return lambda: multiply_adds(acc, FMA_WIDTH, reps)


SQUARE_SIDE = 2048


def square_gemm_flops(scale: float = 1.0) -> float:
    """Floating-point operations of one call of contender ``square_gemm``."""
    return 2.0 * _square_side(scale) ** 3


def _square_side(scale: float) -> int:
    return max(64, int(SQUARE_SIDE * scale ** (1 / 3)))  # the work goes as side³


def _square_gemm(X, n_threads, scale):
    from threadpoolctl import threadpool_limits

    threadpool_limits(n_threads, user_api="blas")
    rng = np.random.default_rng(0)
    side = _square_side(scale)
    A = rng.standard_normal((side, side)).astype(X.dtype)
    B = rng.standard_normal((side, side)).astype(X.dtype)
    C = np.empty_like(A)
    return lambda: np.dot(A, B, C)


def _sklearn(X, y, W, b, alpha, n_threads):
    from sklearn._loss.loss import HalfMultinomialLoss
    from sklearn.linear_model._linear_loss import LinearModelLoss
    from threadpoolctl import threadpool_limits

    threadpool_limits(n_threads, user_api="blas")
    k = W.shape[1]
    loss = LinearModelLoss(base_loss=HalfMultinomialLoss(n_classes=k), fit_intercept=True)
    coef = np.ascontiguousarray(np.hstack([W.T, b[:, None]]))  # (k, n + 1)
    yf = y.astype(X.dtype)
    return lambda: loss.loss_gradient(coef, X, yf, l2_reg_strength=alpha, n_threads=n_threads)


def _onedal(X, y, W, b, alpha, n_threads):
    import daal4py

    daal4py.daalinit(n_threads)
    k = W.shape[1]
    # oneDAL's layout: one row per class, the intercept first; its L2 term
    # is penaltyL2 * ||W||², so penaltyL2 = alpha / 2.
    beta = np.ascontiguousarray(np.hstack([b[:, None], W.T]).reshape(-1, 1))
    yc = np.ascontiguousarray(y.astype(X.dtype).reshape(-1, 1))
    algo = daal4py.optimization_solver_cross_entropy_loss(
        nClasses=k, numberOfTerms=X.shape[0], fptype="float" if X.dtype == np.float32
        else "double", method="defaultDense", interceptFlag=True, penaltyL1=0.0,
        penaltyL2=alpha / 2, resultsToCompute="value|gradient")
    algo.setup(X, yc, beta)

    def run():
        res = algo.compute(X, yc, beta)
        return res.valueIdx[0, 0], res.gradientIdx

    return run


def _torch_function(X, y, W, b, alpha, n_threads):
    import torch

    torch.set_num_threads(n_threads)
    Xt = torch.from_numpy(X)
    yt = torch.from_numpy(y.astype(np.int64))
    Wt = torch.from_numpy(W.copy()).requires_grad_(True)
    bt = torch.from_numpy(b.copy()).requires_grad_(True)

    def step():
        loss = torch.nn.functional.cross_entropy(torch.addmm(bt, Xt, Wt), yt)
        loss = loss + 0.5 * alpha * (Wt * Wt).sum()
        gW, gb = torch.autograd.grad(loss, (Wt, bt))
        return loss.detach(), gW, gb

    return step


def _torch(X, y, W, b, alpha, n_threads):
    return _torch_function(X, y, W, b, alpha, n_threads)


def _torch_compile(X, y, W, b, alpha, n_threads):
    import torch

    return torch.compile(_torch_function(X, y, W, b, alpha, n_threads))


def _jax(X, y, W, b, alpha, n_threads):
    import jax
    import jax.numpy as jnp

    if X.dtype == np.float64:
        jax.config.update("jax_enable_x64", True)

    def objective(params, X, y):
        W, b = params
        Z = X @ W + b
        ce = jax.nn.logsumexp(Z, axis=1) - jnp.take_along_axis(Z, y[:, None], axis=1)[:, 0]
        return ce.mean() + 0.5 * alpha * jnp.sum(W * W)

    f = jax.jit(jax.value_and_grad(objective))
    args = ((jnp.asarray(W), jnp.asarray(b)), jnp.asarray(X), jnp.asarray(y))

    def run():
        value, grads = f(*args)
        return jax.block_until_ready((value, grads))

    return run
