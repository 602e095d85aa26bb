"""Dask: the same data model, objective and SGD epoch, distributed by row blocks.

This module only distributes. X is a dask array chunked by rows (or a dask
DataFrame); each row block is turned into a :class:`~fastsoftmax._data.Dataset`
on the worker that holds it, by the same edge functions as in memory
(errors name the row of the whole data set), and stays there. Then:

* :class:`DaskObjective` evaluates :class:`~fastsoftmax._objective.Objective`
  on every block (the weights sent inside the blocks' tasks where all
  their copies are small, else broadcast once per evaluation; one (k, n)
  partial gradient back per block, already normalised by the global weight total)
  and adds the one L2 penalty on the driver, so full-batch solvers give the
  in-memory result to rounding; for Newton, each block's Hessian at a point
  stays on its worker (with the probabilities its products need) and a
  product sends the direction as the weights and gathers one (k, n) part
  per block;
* :class:`DaskEpochRunner` runs :func:`~fastsoftmax._solvers.sgd.run_epoch`
  over the blocks in turn, the SGD state moving from worker to worker and
  the data never moving; divergence comes back as data.

The solvers themselves (:func:`fastsoftmax._solvers.solve`) are the
in-memory ones. Requires ``dask`` and ``distributed``
(``pip install fastsoftmax[dask]``) and a running ``distributed.Client``.
"""

from __future__ import annotations

import numpy as np

from ._data import make_dataset, row_weights
from ._objective import Objective
from ._penalty import penalize
from ._solvers.sgd import EpochResult, epoch_order, run_epoch
from ._threads import thread_policy
from ._validation import (
    check_class_labels,
    check_n_classes,
    check_weights,
    check_X,
    class_weight_vector,
    encode_labels,
    float_dtype_of,
)

# Weights (or a direction) whose copies for all the blocks come to at most
# this many bytes go inside the blocks' tasks: one round trip to the
# cluster per evaluation instead of two (the broadcast, then the tasks).
# On a local cluster of 2 worker processes and 4 blocks, evaluations and
# fits took 0.72-0.97x the time so, for weights of up to 612 KB
# (`benchmarks/dask_rounds.py`; BENCHMARKS.md, "Fifty-third session");
# the limit stays below distributed's warning about task graphs of more
# than 10 MB. Above it the weights are broadcast once, one copy per
# worker, however many blocks each holds.
INLINE_BYTES = 4 << 20


def _shared(client, payload: tuple, n_blocks: int):
    """``payload`` (arrays or None) itself where small enough for every task, else broadcast."""
    if sum(getattr(a, "nbytes", 0) for a in payload) * n_blocks <= INLINE_BYTES:
        return payload
    return client.scatter(payload, broadcast=True, hash=False)


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
    """X as a 2-D dask array chunked by rows only."""
    import dask.array as da

    if hasattr(X, "columns") and hasattr(X, "to_dask_array"):
        X = X.to_dask_array(lengths=True)
    if not isinstance(X, da.Array):
        raise TypeError(f"expected a dask array or DataFrame, got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got a dask array of shape {X.shape}")
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError("X has unknown chunk sizes; call X.compute_chunk_sizes() first")
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X


def _as_aligned(v, X, name):
    """V as a 1-D dask array with X's row chunks (from dask or in-memory input)."""
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
def _block_dataset(X, y, sw, classes, dtype, offset):
    """On a worker: one row block through the edge, as a Dataset (sample weights only)."""
    X = check_X(X, dtype=dtype, offset=offset, allow_empty=True)
    codes = encode_labels(np.asarray(y), classes, X.shape[0], offset=offset)
    sw = row_weights(codes, sw, None, X.shape[0], X.dtype, offset=offset,
                     require_positive_total=False)
    return make_dataset(X, codes, None, sw, len(classes))


def _block_info(block):
    """(rows, rows per class, weight per class) of a block: what the driver needs."""
    k = block.n_classes
    sw = block.sample_weight if block.weighted else None
    return (block.n_rows, np.bincount(block.labels, minlength=k),
            np.bincount(block.labels, weights=sw, minlength=k))


def _finish_block(block, class_weight, total, mean):
    """Apply the class weights and the global normalisers to a block."""
    if class_weight is not None:
        sw = row_weights(block.labels, block.sample_weight if block.weighted else None,
                         class_weight, block.n_rows, block.dtype,
                         require_positive_total=False)
        block = make_dataset(block.X, block.labels, None, sw, block.n_classes)
    return block.with_totals(total, mean)


def _block_loss_grad(block, weights, n_threads):
    coef, intercept = weights
    with thread_policy(n_threads):
        return Objective(block, warm=True, keep_scratch=True).loss_grad(coef, intercept, 0.0)


def _block_hessian(block, weights, n_threads):
    coef, intercept = weights
    with thread_policy(n_threads):
        return Objective(block, warm=True).hessian(coef, intercept, 0.0)


def _hessian_gradient(H):
    return H.loss, H.grad_coef, H.grad_intercept


def _hessian_matvec(H, direction, n_threads):
    with thread_policy(n_threads):
        return H.matvec(*direction)


def _block_epoch(block, carry, params, seed, steps_per_epoch, n_threads):
    """One SGD pass over one block; ``carry`` is (state, loss sum, updates, ok)."""
    state, loss_sum, steps, ok = carry
    if not ok:
        return carry
    state = state.copy()
    with thread_policy(n_threads):
        result = run_epoch(block, state, epoch_order(block.n_rows, params.shuffle, seed),
                           params, steps_per_epoch=steps_per_epoch)
    return state, loss_sum + result.loss_sum, steps + result.steps, result.ok


# ----------------------------------------------------------------- driver
class DaskData:
    """Validated row blocks on the workers, with the totals of the whole data set."""

    def __init__(self, client, blocks, classes, n_features, dtype, n_rows, block_rows,
                 total_weight):
        self.client = client
        self.blocks = blocks
        self.classes = classes
        self.n_classes = len(classes)
        self.n_features = n_features
        self.dtype = dtype
        self.n_rows = n_rows
        self.block_rows = block_rows
        self.total_weight = total_weight

    def objective(self, n_threads: int | None = None, newton: bool = False) -> DaskObjective:
        del newton  # each worker compiles the kernels its blocks run
        return DaskObjective(self, n_threads)

    def sgd_runner(self, n_threads: int | None = None) -> DaskEpochRunner:
        return DaskEpochRunner(self, n_threads)


def distribute(X, y, sample_weight, classes, class_weight, dtype=None) -> DaskData:
    """Turn dask (X, y, weights) into validated blocks on the workers."""
    client = _client()
    X = _as_row_blocks(X)
    y = _as_aligned(y, X, "y")
    sw = _as_aligned(sample_weight, X, "sample_weight")
    dtype = float_dtype_of(X) if dtype is None else np.dtype(dtype)
    xs = X.to_delayed().ravel()
    ys = y.to_delayed().ravel()
    sws = sw.to_delayed().ravel() if sw is not None else [None] * len(xs)
    offsets = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]]).astype(int)
    blocks = [client.submit(_block_dataset, *client.compute([xb, yb]),
                            None if swb is None else client.compute(swb), classes, dtype,
                            int(off), pure=False)
              for xb, yb, swb, off in zip(xs, ys, sws, offsets, strict=True)]
    info = client.gather([client.submit(_block_info, bl) for bl in blocks])
    rows = np.array([i[0] for i in info])
    n_rows = int(rows.sum())
    if n_rows == 0:
        raise ValueError("X has no rows")
    cw = class_weight_vector(class_weight, classes, np.sum([i[1] for i in info], axis=0))
    class_totals = np.sum([i[2] for i in info], axis=0)
    total = float(class_totals @ (cw if cw is not None else np.ones(len(classes))))
    if not total > 0:
        raise ValueError("sample_weight sums to zero: at least one row must have weight"
                         if cw is None else
                         "class_weight and sample_weight leave every row with weight 0")
    kept = [client.submit(_finish_block, bl, cw, total, total / n_rows, pure=False)
            for bl, r in zip(blocks, rows, strict=True) if r > 0]
    return DaskData(client, kept, classes, int(X.shape[1]), dtype, n_rows,
                    [int(r) for r in rows if r > 0], total)


def training_data(X, y, sample_weight, *, class_weight) -> tuple[DaskData, np.ndarray]:
    """Pass dask input through the estimator's edge: return (DaskData, sorted classes)."""
    import dask.array as da

    blocks = _as_row_blocks(X)
    y_blocks = _as_aligned(y, blocks, "y")
    classes = check_class_labels(np.unique(da.unique(y_blocks).compute()))
    check_n_classes(classes)
    return distribute(blocks, y_blocks, sample_weight, classes, class_weight), classes


class DaskObjective:
    """The solvers' objective over :class:`DaskData`.

    One evaluation costs one task per block, which carries (coef,
    intercept) unless they are broadcast first (:data:`INLINE_BYTES`), and
    a gather of one (k, n) gradient per block.
    """

    def __init__(self, data: DaskData, n_threads: int | None = None):
        self.data = data
        self.dtype = data.dtype
        self.n_classes = data.n_classes
        self.n_threads = n_threads
        self.total_weight = data.total_weight

    def _on_each_block(self, task, blocks, payload, *args):
        """Run ``task(block, payload, *args)`` on every block (``payload`` by :func:`_shared`)."""
        client = self.data.client
        shared = _shared(client, payload, len(blocks))
        return client.gather([client.submit(task, bl, shared, *args, pure=False)
                              for bl in blocks])

    def _sum(self, parts, coef, intercept, alpha):
        """(loss, grad_coef, grad_intercept) summed over blocks, with the L2 penalty."""
        grad_coef = np.sum([p[1] for p in parts], axis=0).astype(self.dtype)
        grad_intercept = (np.sum([p[2] for p in parts], axis=0).astype(self.dtype)
                          if intercept is not None else None)
        loss = penalize(float(sum(p[0] for p in parts)), grad_coef, coef, alpha)
        return loss, grad_coef, grad_intercept

    def compile_hessp_aside(self) -> None:
        """Nothing to start: each worker compiles the kernels its blocks run."""

    def loss_grad(self, coef, intercept, alpha=0.0):
        parts = self._on_each_block(_block_loss_grad, self.data.blocks, (coef, intercept),
                                    self.n_threads)
        return self._sum(parts, coef, intercept, alpha)

    def hessian(self, coef, intercept, alpha=0.0) -> DaskHessian:
        client = self.data.client
        weights = _shared(client, (coef, intercept), len(self.data.blocks))
        held = [client.submit(_block_hessian, bl, weights, self.n_threads, pure=False)
                for bl in self.data.blocks]
        parts = client.gather([client.submit(_hessian_gradient, h, pure=False) for h in held])
        return DaskHessian(self, held, coef, intercept is not None, alpha,
                           *self._sum(parts, coef, intercept, alpha))


class DaskHessian:
    """The Hessian at one point, its blocks held on the workers.

    The interface of :class:`fastsoftmax._objective.Hessian`: ``loss``,
    ``grad_coef``, ``grad_intercept`` and ``matvec(V, c, scale=, out=)``.
    """

    def __init__(self, objective, held, coef, fit_intercept, alpha, loss, grad_coef,
                 grad_intercept):
        self._objective = objective
        self._held = held
        self._coef = coef
        self._fit_intercept = fit_intercept
        self._alpha = float(alpha)
        self.loss, self.grad_coef, self.grad_intercept = loss, grad_coef, grad_intercept

    def _total(self, parts):
        first = np.sum([p[0] for p in parts], axis=0).astype(self._coef.dtype)
        second = (np.sum([p[1] for p in parts], axis=0).astype(self._coef.dtype)
                  if self._fit_intercept else None)
        return first, second

    def matvec(self, V, c=None, *, scale=1.0, out=None):
        obj = self._objective
        if scale != 1.0:
            V = V * V.dtype.type(scale)
            c = None if c is None else c * c.dtype.type(scale)
        HV, Hc = self._total(obj._on_each_block(_hessian_matvec, self._held, (V, c),
                                                obj.n_threads))
        if self._alpha:
            HV += HV.dtype.type(self._alpha) * V
        if out is not None:
            out[...] = HV
            HV = out
        return HV, Hc


class DaskEpochRunner:
    """SGD epochs over the blocks in turn, each pass run by the block's worker.

    Each epoch visits the blocks in a shuffled order and the rows of each
    block in a shuffled order; the one difference from in-memory SGD is
    that a mini-batch never straddles two blocks.
    """

    def __init__(self, data: DaskData, n_threads: int | None = None):
        self.data = data
        self.n_threads = n_threads
        self.total_weight = data.total_weight

    def epoch(self, state, params, seed) -> EpochResult:
        client = self.data.client
        rng = np.random.default_rng(seed)
        n_blocks = len(self.data.blocks)
        order = rng.permutation(n_blocks) if params.shuffle else np.arange(n_blocks)
        steps = sum(-(-r // min(params.batch_size, r)) for r in self.data.block_rows)
        carry = client.scatter((state, 0.0, 0, True), hash=False)
        for i in order:
            carry = client.submit(_block_epoch, self.data.blocks[i], carry, params,
                                  int(rng.integers(np.iinfo(np.int64).max)), steps,
                                  self.n_threads, pure=False)
        new_state, loss_sum, done, ok = client.gather(carry)
        state.restore(new_state)
        return EpochResult(float(loss_sum), int(done), bool(ok))


def loss_and_grad(X, y, W, b=None, *, alpha=0.0, sample_weight=None, n_threads=None):
    """:func:`fastsoftmax.loss_and_grad` for a dask X (integer labels y)."""
    if hasattr(y, "ndim") and y.ndim == 2 and y.shape[1] != 1:
        raise ValueError("with dask input, y must be integer labels (m,); "
                         "target matrices are supported in memory only")
    blocks = _as_row_blocks(X)
    dt = float_dtype_of(blocks)
    W, b = check_weights(W, b, int(blocks.shape[1]), dt)
    data = distribute(blocks, y, sample_weight, np.arange(W.shape[1]), None, dtype=dt)
    coef = np.ascontiguousarray(W.T)
    with thread_policy(n_threads):
        loss, g_coef, g_b = DaskObjective(data, n_threads).loss_grad(coef, b, alpha)
    return loss, np.ascontiguousarray(g_coef.T), g_b


def predict_blocks(method, X, n_out, dtype):
    """Apply a fitted model's predict-like method block by block, lazily."""
    X = _as_row_blocks(X)
    if n_out is None:
        return X.map_blocks(method, drop_axis=1, dtype=dtype)
    return X.map_blocks(method, chunks=(X.chunks[0], (n_out,)), dtype=dtype)
