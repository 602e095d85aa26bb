"""Data-parallel training on Dask, with the fused kernels on every worker.

X is a dask array chunked by rows (or a dask DataFrame). Its blocks stay on
the workers that hold them: each worker validates and encodes its own
blocks once, then evaluates the fused loss and gradient on them with the
same Numba kernels as in memory. Per iteration the driver broadcasts the
weights once (``Client.scatter(..., broadcast=True)``), every block returns
its (n, k) partial gradient, already divided by the global weight total,
and the driver sums them -- the same reduction the in-memory kernel does
over its thread chunks, so full-batch results equal in-memory training to
rounding. No (m, k) array exists anywhere.

Requires ``dask`` and ``distributed`` (``pip install fastsoftmax[dask]``)
and a running ``distributed.Client``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._objective import SoftmaxObjective
from ._validation import as_float_array, check_finite


def is_dask_collection(x: Any) -> bool:
    """Return True for dask arrays, DataFrames and Series, without importing dask."""
    return type(x).__module__.split(".")[0] in ("dask", "dask_expr") and hasattr(
        x, "__dask_graph__")


def _client():
    try:
        from distributed import get_client
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "training on dask collections needs dask and distributed: "
            "pip install fastsoftmax[dask]") from None
    try:
        return get_client()
    except ValueError:
        raise ValueError(
            "dask input needs a distributed Client: create one (for example "
            "distributed.Client(distributed.LocalCluster())) before fitting") from None


def _as_row_blocks(X):
    """Return X as a 2-D dask array chunked by rows only, and its feature names if any."""
    import dask.array as da

    names = None
    if hasattr(X, "columns") and hasattr(X, "to_dask_array"):
        names = [str(c) for c in X.columns]
        X = X.to_dask_array(lengths=True)
    if not isinstance(X, da.Array):
        raise TypeError(f"expected a dask array or DataFrame, got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got a dask array of shape {X.shape}")
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError("X has unknown chunk sizes; call X.compute_chunk_sizes() first")
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X, names


def _as_aligned(v, X, name):
    """Return v as a 1-D dask array with X's row chunks (from dask or in-memory input)."""
    import dask.array as da

    if v is None:
        return None
    if hasattr(v, "to_dask_array"):
        v = v.to_dask_array(lengths=True)
    if not isinstance(v, da.Array):
        v = np.asarray(v)
        if v.ndim == 0:
            raise ValueError(f"{name} must be 1-D, got a scalar")
        if v.shape[0] != X.shape[0]:  # before chunking it like X
            raise ValueError(f"{name} has {v.shape[0]} entries but X has {X.shape[0]} rows")
        v = da.from_array(v, chunks=(X.chunks[0],) + v.shape[1:])
    if v.ndim == 2 and v.shape[1] == 1:
        v = v[:, 0]
    if v.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {v.shape}")
    if v.shape[0] != X.shape[0]:
        raise ValueError(f"{name} has {v.shape[0]} entries but X has {X.shape[0]} rows")
    return v.rechunk((X.chunks[0],))


# ------------------------------------------------------------ worker tasks
def _prepare_block(X, y, sw, classes, dtype, offset):
    """On a worker: check and convert one block; return it with its codes.

    Errors name the global row, so they read as in memory.
    """
    X = as_float_array(X, "X", ndim=(2,), dtype=dtype)
    try:
        check_finite(X, "X")
    except ValueError as exc:
        raise ValueError(_shift_rows(str(exc), offset)) from None
    y = np.asarray(y)
    codes = np.searchsorted(classes, y)
    inside = np.minimum(codes, len(classes) - 1)
    unseen = classes[inside] != y
    if unseen.any():
        i = int(np.flatnonzero(unseen)[0])
        raise ValueError(f"y[{offset + i}] = {y[i].tolist()!r} is not one of the classes")
    if sw is not None:
        sw = as_float_array(sw, "sample_weight", ndim=(1,), dtype=dtype)
        check_finite(sw, "sample_weight")
        if sw.size and sw.min() < 0:
            i = int(np.argmin(sw))
            raise ValueError(f"sample_weight[{offset + i}] = {sw[i]} is negative")
    return X, codes.astype(np.int64), sw


def _shift_rows(message, offset):
    import re

    return re.sub(r"(row|index) (\d+)", lambda m: f"{m.group(1)} {int(m.group(2)) + offset}",
                  message, count=1)


def _block_weight(block):
    X, _, sw = block
    return float(X.shape[0]) if sw is None else float(sw.sum(dtype=np.float64))


def _block_counts(block, k):
    _, codes, sw = block
    return np.bincount(codes, weights=sw, minlength=k)


def _apply_class_weight(block, cw):
    X, codes, sw = block
    row_w = cw[codes].astype(X.dtype)
    return X, codes, row_w if sw is None else sw * row_w


def _block_objective(block, k, total, n_threads):
    X, codes, sw = block
    obj = SoftmaxObjective(X, codes, None, sw, k, n_threads=n_threads)
    # Normalise by the global total, so that block results simply add up.
    obj.total_weight = total
    obj.scale = X.dtype.type(1.0 / total)
    return obj


def _block_loss_grad(block, weights, k, total, n_threads):
    if block[0].shape[0] == 0:
        n = block[0].shape[1]
        return 0.0, np.zeros((n, k), block[0].dtype), np.zeros(k, block[0].dtype)
    W, b = weights
    loss, gW, gb = _block_objective(block, k, total, n_threads)(W, b, 0.0)
    return loss, gW, gb


def _block_sgd(block, state, k, n_threads, params, seed):
    """One SGD pass over one block, on the worker that holds it.

    ``state`` is (W, b, solver state, running sum of weighted losses); the
    new state is returned, so a chain of these tasks is one epoch.
    """
    from ._solvers import sgd_epochs

    W, b, inner, loss_sum = state
    if block[0].shape[0] == 0:
        return state
    obj = _block_objective(block, k, _block_weight(block), n_threads)
    inner = dict(inner)
    result = sgd_epochs(obj, W, b, rng=np.random.default_rng(seed), state=inner,
                        max_iter=1, stop_early=False, **params)
    if result.diverged:
        raise FloatingPointError(f"eta={inner.get('eta', params['eta0']):g}")
    # loss_curve holds the block's mean loss plus the penalty; keep the data term.
    w64 = W.ravel().astype(np.float64)
    data_loss = result.loss_curve[0] - 0.5 * params["alpha"] * float(np.dot(w64, w64))
    return result.W, result.b, inner, loss_sum + data_loss * _block_weight(block)


# ----------------------------------------------------------------- driver
class DaskData:
    """Row blocks of (X, codes, sample weights), validated, on the workers."""

    def __init__(self, X, y, sample_weight, classes, dtype=None):
        client = _client()
        X, self.feature_names = _as_row_blocks(X)
        y = _as_aligned(y, X, "y")
        sw = _as_aligned(sample_weight, X, "sample_weight")
        self.n_features = int(X.shape[1])
        self.dtype = np.dtype(dtype) if dtype is not None else (
            X.dtype if X.dtype in (np.float32, np.float64) else np.dtype(np.float64))
        self.classes = classes
        self.client = client
        xs = X.to_delayed().ravel()
        ys = y.to_delayed().ravel()
        sws = sw.to_delayed().ravel() if sw is not None else [None] * len(xs)
        offsets = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]]).astype(int)
        blocks = [
            client.submit(_prepare_block, *client.compute([xb, yb]), swb_f, classes,
                          self.dtype, int(off), pure=False)
            for xb, yb, swb_f, off in zip(
                xs, ys,
                [client.compute(s) if s is not None else None for s in sws],
                offsets, strict=True)
        ]
        self.blocks = blocks
        weights = client.gather([client.submit(_block_weight, bl) for bl in blocks])
        self.total_weight = float(sum(weights))
        self.n_rows = int(X.shape[0])
        if self.n_rows == 0:
            raise ValueError("X has no rows")
        if not self.total_weight > 0:
            raise ValueError("sample_weight sums to zero: at least one row must have weight")

    def class_counts(self):
        k = len(self.classes)
        parts = self.client.gather(
            [self.client.submit(_block_counts, bl, k) for bl in self.blocks])
        return np.sum(parts, axis=0)

    def reweight(self, class_weight):
        cw = np.asarray(class_weight, dtype=np.float64)
        self.blocks = [self.client.submit(_apply_class_weight, bl, cw, pure=False)
                       for bl in self.blocks]
        weights = self.client.gather([self.client.submit(_block_weight, bl)
                                      for bl in self.blocks])
        self.total_weight = float(sum(weights))
        if not self.total_weight > 0:
            raise ValueError("class_weight and sample_weight leave every row with weight 0")


class DaskObjective:
    """The solvers' objective interface over :class:`DaskData`.

    Calling it costs one broadcast of (W, b), one task per block and a
    gather of one (n, k) gradient per block.
    """

    def __init__(self, data: DaskData, n_threads=None):
        self.data = data
        self.dtype = data.dtype
        self.n_classes = len(data.classes)
        self.n_threads = n_threads
        self.total_weight = data.total_weight

    def __call__(self, W, b, alpha=0.0):
        client = self.data.client
        weights = client.scatter((W, b), broadcast=True, hash=False)
        futures = [client.submit(_block_loss_grad, bl, weights, self.n_classes,
                                 self.total_weight, self.n_threads, pure=False)
                   for bl in self.data.blocks]
        parts = client.gather(futures)
        loss = float(sum(p[0] for p in parts))
        grad_W = np.sum([p[1] for p in parts], axis=0).astype(self.dtype)
        grad_b = np.sum([p[2] for p in parts], axis=0).astype(self.dtype) if b is not None \
            else None
        if alpha:
            w64 = W.ravel().astype(np.float64)
            loss += 0.5 * alpha * float(np.dot(w64, w64))
            grad_W += self.dtype.type(alpha) * W
        return loss, grad_W, grad_b


def sgd(data: DaskData, W0, b0, *, alpha, max_iter, tol, n_iter_no_change, eta0,
        learning_rate, power_t, momentum, nesterov, batch_size, shuffle, rng, n_threads,
        callback=None):
    """Mini-batch SGD over the blocks in turn, each pass run by its worker.

    Each epoch visits the blocks in a shuffled order; the model state
    (weights, velocity, schedule: a few (n, k) arrays) moves from block to
    block, the data never moves. Within a block the rows are shuffled as in
    memory. The one difference from single-machine SGD is the shuffle: rows
    are permuted within blocks and blocks as a whole, not across the whole
    data set, so block boundaries are never straddled by a mini-batch.
    """
    from ._solvers import FitResult, _rose, _Stopper

    client = data.client
    k = len(data.classes)
    params = dict(alpha=alpha, tol=tol, n_iter_no_change=n_iter_no_change, eta0=eta0,
                  learning_rate=learning_rate, power_t=power_t, momentum=momentum,
                  nesterov=nesterov, batch_size=batch_size, shuffle=shuffle)
    inner: dict = {"eta": float(eta0)}
    state = client.scatter((W0, b0, inner, 0.0), hash=False)
    last = state
    stopper = _Stopper(tol, n_iter_no_change)
    curve: list[float] = []
    converged = False
    done = 0.0
    for epoch in range(max_iter):
        order = rng.permutation(len(data.blocks)) if shuffle else range(len(data.blocks))
        for i in order:
            state = client.submit(_block_sgd, data.blocks[i], state, k, n_threads, params,
                                  int(rng.integers(2**31)), pure=False)
        try:
            W, b, inner, total = client.gather(state)
        except FloatingPointError as exc:
            from ._solvers import _diverged

            _diverged("sgd", float(str(exc).split("=")[1]), epoch)
            state = last
            break
        last = state
        epoch_loss = (total - done) / data.total_weight
        done = total
        if alpha:
            w64 = W.ravel().astype(np.float64)
            epoch_loss += 0.5 * alpha * float(np.dot(w64, w64))
        curve.append(epoch_loss)
        if callback is not None:
            callback(epoch + 1, epoch_loss)
        if stopper.update(epoch_loss):
            if learning_rate == "adaptive" and inner["eta"] / 5 >= 1e-6 * eta0:
                inner = dict(inner, eta=inner["eta"] / 5)
                state = client.scatter((W, b, inner, total), hash=False)
                stopper.reset()
                continue
            converged = not _rose("sgd", curve, inner["eta"])
            break
    W, b, _, _ = client.gather(state)
    return FitResult(W=W, b=b, n_iter=len(curve), loss_curve=curve, converged=converged)


def loss_and_grad(X, y, W, b=None, *, alpha=0.0, sample_weight=None, n_threads=None):
    """:func:`fastsoftmax.loss_and_grad` for a dask X (integer labels y)."""
    if hasattr(y, "ndim") and y.ndim == 2 and y.shape[1] != 1:
        raise ValueError("with dask input, y must be integer labels (m,); "
                         "target matrices are supported in memory only")
    X_blocks, _ = _as_row_blocks(X)
    dt = X_blocks.dtype if X_blocks.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    W = as_float_array(W, "W", ndim=(2,), dtype=dt)
    if W.shape[0] != X_blocks.shape[1]:
        raise ValueError(f"W has {W.shape[0]} rows but X has {X_blocks.shape[1]} features; "
                         "W must be (n_features, n_classes)")
    check_finite(W, "W")
    k = W.shape[1]
    if b is not None:
        b = as_float_array(b, "b", ndim=(1,), dtype=dt)
        if b.shape[0] != k:
            raise ValueError(f"b has {b.shape[0]} entries but W has {k} columns")
        check_finite(b, "b")
    data = DaskData(X_blocks, y, sample_weight, np.arange(k), dtype=dt)
    return DaskObjective(data, n_threads)(W, b, alpha)


def unique_labels(y, X):
    """Compute the sorted distinct labels of a dask (or in-memory) y."""
    import dask.array as da

    X, _ = _as_row_blocks(X)
    y = _as_aligned(y, X, "y")
    return np.unique(da.unique(y).compute())


def fit(estimator, X, y, sample_weight):
    """SoftmaxRegression.fit on dask input; returns the attributes to set."""
    from . import _solvers

    if estimator.early_stopping:
        raise ValueError("early_stopping is not supported for dask input; hold out a "
                         "validation set yourself and use score()")
    classes = unique_labels(y, X)
    if len(classes) < 2:
        raise ValueError(
            f"softmax regression needs at least 2 classes in y; got {len(classes)}")
    data = DaskData(X, y, sample_weight, classes)
    k, n = len(classes), data.n_features
    if estimator.class_weight is not None:
        if estimator.class_weight == "balanced":
            counts = data.class_counts()
            cw = np.where(counts > 0, data.n_rows / (k * np.maximum(counts, 1e-300)), 1.0)
        else:
            cw = np.array([float(estimator.class_weight.get(c, 1.0)) for c in classes.tolist()])
        data.reweight(cw)
    dt = data.dtype
    W0 = np.zeros((n, k), dtype=dt)
    b0 = np.zeros(k, dtype=dt) if estimator.fit_intercept else None
    if (estimator.warm_start and hasattr(estimator, "coef_")
            and estimator.coef_.shape == (k, n) and np.array_equal(estimator.classes_, classes)):
        W0 = np.ascontiguousarray(estimator.coef_.T, dtype=dt)
        if b0 is not None:
            b0 = estimator.intercept_.astype(dt)
    alpha = float(estimator.alpha)
    rng = estimator._rng()
    # The same per-iteration callback as in memory: a progress bar with the
    # loss when verbose is set (and one line per iteration when verbose >= 2).
    callback = estimator._callback(estimator.solver, estimator.max_iter)
    try:
        if estimator.solver == "lbfgs":
            result = _solvers.lbfgs(DaskObjective(data, estimator.n_threads), W0, b0, alpha,
                                    max_iter=estimator.max_iter, tol=estimator.tol,
                                    callback=callback)
        elif estimator.solver == "bgd":
            result = _solvers.bgd(DaskObjective(data, estimator.n_threads), W0, b0, alpha,
                                  max_iter=estimator.max_iter, tol=estimator.tol,
                                  n_iter_no_change=estimator.n_iter_no_change,
                                  eta0=estimator.eta0, learning_rate=estimator.learning_rate,
                                  momentum=estimator.momentum, nesterov=estimator.nesterov,
                                  power_t=estimator.power_t, callback=callback)
        else:
            result = sgd(data, W0, b0, alpha=alpha, max_iter=estimator.max_iter,
                         tol=estimator.tol, n_iter_no_change=estimator.n_iter_no_change,
                         eta0=estimator.eta0, learning_rate=estimator.learning_rate,
                         power_t=estimator.power_t, momentum=estimator.momentum,
                         nesterov=estimator.nesterov, batch_size=estimator.batch_size,
                         shuffle=estimator.shuffle, rng=rng, n_threads=estimator.n_threads,
                         callback=callback)
    finally:
        if callback is not None:
            callback.close()
    return classes, result, dt, n, data.feature_names


def predict_blocks(method, X, n_out, dtype):
    """Apply a fitted model's predict-like method block by block, lazily."""
    X, _ = _as_row_blocks(X)
    if n_out is None:
        return X.map_blocks(method, drop_axis=1, dtype=dtype)
    return X.map_blocks(method, chunks=(X.chunks[0], (n_out,)), dtype=dtype)
