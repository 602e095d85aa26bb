"""Launchers for the sparse (CSR) kernels: coerce once, allocate, call, reduce.

:func:`as_csr` is the edge for sparse input: it takes any scipy.sparse
matrix or array, converts CSC, COO and the other formats to CSR once, keeps
float32/float64 values (anything else becomes float64), never densifies,
and rejects malformed or non-finite input with an error naming the row.
It returns a :class:`CSR` whose arrays the kernels take as they are:
``indices`` int32 (int64 only for n >= 2**31), ``indptr`` int64.

The other functions are thin: they check nothing that :func:`as_csr` and
the caller's label/weight validation (:mod:`fastsoftmax._validation`) have
already checked, only cast the small arrays (W, b, labels, weights) to the
kernel dtypes, and allocate the per-chunk buffers. The sparse kernels make
no BLAS calls, so only Numba's thread count is set (:func:`numba_threads`);
:func:`single_threaded_blas` is not needed here.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from ._kernels._hessp import _panel_hessp_rows, _sparse_hessp
from ._kernels._sgd import SCHEDULE_CONSTANT, SCHEDULE_INVSCALING
from ._kernels._sparse import (
    BAD_INDEX,
    BAD_INDPTR,
    BAD_VALUE,
    _csc_gather,
    _csr_first_bad_row,
    _finish_partials,
    _panel_column_pass,
    _panel_fill,
    _panel_layout,
    _panel_row_pass,
    _sparse_logits,
    _sparse_loss_grad,
    _sparse_predict,
    _sparse_sgd_epoch,
)
from ._launch import first_bad, n_chunks, numba_thread_count
from ._threads import kernel_call, numba_threads
from ._validation import kernel_view

if TYPE_CHECKING:  # scipy.sparse is imported where used: dense work never pays its import
    import scipy.sparse

__all__ = ["CSR", "Panels", "as_csr", "transpose", "panels", "gradient_scheme",
           "loss_and_grad", "hessp", "sgd_epoch", "logits", "predict_labels"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INT32_MAX = np.iinfo(np.int32).max
_PROBLEMS = {
    BAD_INDPTR: "an indptr range that decreases or leaves [0, nnz]",
    BAD_INDEX: "a column index outside [0, {n})",
    BAD_VALUE: "a NaN or infinite value",
}


@dataclasses.dataclass(frozen=True)
class CSR:
    """A validated CSR matrix, as the sparse kernels take it.

    Its arrays are read, never written: one may be a writable-typed view of
    a read-only array (:func:`fastsoftmax._validation.kernel_view`).

    Attributes
    ----------
    data : ndarray of shape (nnz,), float32 or float64
    indices : ndarray of shape (nnz,), int32 (int64 when n >= 2**31)
    indptr : ndarray of shape (m + 1,), int64
    shape : (m, n)
    """

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple[int, int]

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the values."""
        return self.data.dtype

    @property
    def nnz(self) -> int:
        """Number of stored entries (duplicates counted separately)."""
        return int(self.indices.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the three arrays."""
        return int(self.data.nbytes + self.indices.nbytes + self.indptr.nbytes)

    def to_scipy(self) -> scipy.sparse.csr_matrix:
        """Return the same matrix as a scipy ``csr_matrix`` (sharing the arrays)."""
        import scipy.sparse

        return scipy.sparse.csr_matrix((self.data, self.indices, self.indptr),
                                       shape=self.shape, copy=False)


def as_csr(X: Any, dtype: Any = None, *, name: str = "X", n_threads: int | None = None,
           offset: int = 0) -> CSR:
    """Check a scipy.sparse matrix or array and return it as a :class:`CSR`.

    Parameters
    ----------
    X : scipy.sparse matrix or array (any format), or a :class:`CSR`
        CSR is used as is (its arrays are not copied when they already
        have the kernel dtypes); CSC, COO and other formats are converted
        to CSR once. Never densified.
    dtype : float32, float64 or None
        dtype of the values; None keeps float32/float64 and turns anything
        else into float64.
    name : str
        Name used in error messages.
    n_threads : int or None
        Threads for the validation scan.
    offset : int
        Added to the row named in errors (a Dask block's first row).

    Returns
    -------
    CSR
        ``indptr`` as int64 (a copy of m + 1 numbers when it was int32),
        ``indices`` as int32 when n < 2**31 (a copy of 4 nnz bytes when it
        was int64). Duplicate and unsorted column indices are kept: the
        kernels treat them as the summed-duplicates matrix.

    Raises
    ------
    TypeError
        If X is not sparse, or its values are not real numbers.
    ValueError
        If X is not 2-D, its arrays disagree in length, or a row has a
        decreasing indptr range, a column index outside [0, n), or a NaN or
        infinite value (the first such row is named).
    """
    if isinstance(X, CSR):
        data, indices, indptr, shape = X.data, X.indices, X.indptr, X.shape
    else:
        import scipy.sparse

        if not scipy.sparse.issparse(X):
            raise TypeError(f"{name} must be a scipy.sparse matrix or array, "
                            f"got {type(X).__name__}")
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {X.shape}")
        if X.format != "csr":
            X = X.tocsr()
        data, indices, indptr, shape = X.data, X.indices, X.indptr, X.shape
    m, n = int(shape[0]), int(shape[1])
    data = np.asarray(data)
    if data.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {data.dtype}")
    if dtype is None:
        target = data.dtype if data.dtype in _FLOATS else np.dtype(np.float64)
    else:
        target = np.dtype(dtype)
        if target not in _FLOATS:
            raise ValueError(f"dtype must be float32 or float64, got {target}")
    data = kernel_view(np.ascontiguousarray(data, dtype=target))
    indices = np.asarray(indices)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{name}.indices must be integers, got dtype {indices.dtype}")
    if indices.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        indices = indices.astype(np.int64)
    indices = kernel_view(np.ascontiguousarray(indices))
    indptr = kernel_view(np.ascontiguousarray(indptr, dtype=np.int64))
    if data.ndim != 1 or indices.ndim != 1 or indices.shape != data.shape:
        raise ValueError(f"{name}: data and indices must be 1-D of one length, got "
                         f"{data.shape} and {indices.shape}")
    if indptr.shape != (m + 1,):
        raise ValueError(f"{name}: indptr must have m + 1 = {m + 1} entries, got {indptr.shape}")
    if m:
        # A small scan on the calling thread, as the dense scan
        # (_validation.first_nonfinite_row): an entry, or a row, counts as
        # a multiply-add.
        with kernel_call(n_threads, data.shape[0] + m, blas=False, ends_call=False):
            bad_row = np.empty(n_chunks(m), dtype=np.int64)
            bad_kind = np.empty_like(bad_row)
            _csr_first_bad_row(data, indices, indptr, n, bad_row, bad_kind)
        hits = np.flatnonzero(bad_row >= 0)
        if hits.size:
            c = hits[np.argmin(bad_row[hits])]
            problem = _PROBLEMS[int(bad_kind[c])].format(n=n)
            raise ValueError(f"{name}: row {int(bad_row[c]) + offset} has {problem}")
    # One index width for the kernels. Validated first: a cast of an int64
    # index >= 2**31 to int32 would wrap into range.
    if indices.dtype != np.int32 and n <= _INT32_MAX:
        indices = indices.astype(np.int32)
    return CSR(data, indices, indptr, (m, n))


def _targets(y: Any, m: int, k: int, dt: np.dtype) -> tuple[np.ndarray, np.ndarray, bool]:
    """(labels, targets, soft) for the kernels; y is (m,) labels or (m, k) targets."""
    y = np.asarray(y)
    if y.ndim == 2:
        return np.empty(0, np.int64), kernel_view(np.ascontiguousarray(y, dtype=dt)), True
    return kernel_view(np.ascontiguousarray(y, dtype=np.int64)), np.empty((0, k), dt), False


def _weights(sample_weight: Any, m: int, dt: np.dtype,
             total: float | None = None) -> tuple[np.ndarray, bool, float]:
    """(sw, weighted, the loss's normaliser: ``total`` or the sum of the weights)."""
    if sample_weight is None or len(sample_weight) == 0:
        return np.empty(0, dt), False, float(m) if total is None else float(total)
    sw = kernel_view(np.ascontiguousarray(sample_weight, dtype=dt))
    return sw, True, float(sw.sum(dtype=np.float64)) if total is None else float(total)


def _kernel_weights(csr: CSR, W: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """W (n, k) and the intercept (zeros for None), C-contiguous in csr's dtype."""
    dt = csr.dtype
    W = kernel_view(np.ascontiguousarray(W, dtype=dt))
    return W, (np.zeros(W.shape[1], dt) if b is None
               else kernel_view(np.ascontiguousarray(b, dtype=dt)))


def _row_pass_buffers(XT: CSR | Panels | None, m: int, n: int, k: int, chunks: int,
                      dt: np.dtype, out: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return a row pass's (rows, G0, Gp): rows (m, k) with XT, else G0 and Gp.

    ``out`` (n, k), when given, is the scatter scheme's G0 (the result's memory).
    """
    if XT is not None:
        return np.empty((m, k), dt), np.empty((0, k), dt), np.empty((0, 0, k), dt)
    G0 = np.empty((n, k), dt) if out is None else out
    return np.empty((0, k), dt), G0, np.empty((chunks - 1, n, k), dt)


def _column_pass(XT: CSR | Panels | None, rows: np.ndarray, G0: np.ndarray, Gp: np.ndarray,
                 W: np.ndarray, alpha: float, n_threads: int, out: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Return (Xᵀ rows, or G0 + the parts, plus alpha W; the blocks' ||W||²) after a row pass.

    The result is written into ``out`` (n, k) when given (the scatter
    scheme's G0 already is ``out``).
    """
    n, k = W.shape
    if isinstance(XT, Panels):
        G0 = np.empty((n, k), W.dtype) if out is None else out
        wsq = np.empty(XT.ptr.shape[0], np.float64)
        owned, owner_start = XT.owners(n_threads)
        _panel_column_pass(XT.data, XT.indices, XT.ptr, XT.bounds, owned, owner_start, rows, W,
                           float(alpha), G0, wsq)
        return G0, wsq
    wsq = np.zeros(max(1, min(n, n_threads)), np.float64)
    if XT is not None:
        G0 = np.empty((n, k), W.dtype) if out is None else out
        _csc_gather(XT.data, XT.indices, XT.indptr, rows, W, float(alpha), G0, wsq)
    elif alpha or Gp.shape[0]:
        _finish_partials(G0, Gp, W, float(alpha), wsq)
    return G0, wsq


def transpose(csr: CSR) -> CSR:
    """Return the CSR arrays of Xᵀ (the CSC arrays of X), for the transpose scheme.

    Row f of the result lists the entries of column f of X with their row
    indices (int32 when m < 2**31; indptr int64). Built once per fit by
    SciPy's CSR -> CSC conversion (O(nnz + n), ~50 ms at 4 M entries) and
    held by the caller: the same size as X again.
    """
    m, n = csr.shape
    xt = csr.to_scipy().tocsc()
    rows = xt.indices
    if rows.dtype != np.int32 and m <= _INT32_MAX:
        rows = rows.astype(np.int32)
    return CSR(np.ascontiguousarray(xt.data), np.ascontiguousarray(rows),
               np.ascontiguousarray(xt.indptr, dtype=np.int64), (n, m))


# Bytes of one panel's rows of W (n_panel x k). Measured on 100,000 x
# 100,000 text with 60 entries per row, k = 20 (BENCHMARKS.md, "Sparse
# panels"): 2 MiB panels (a core's L2 on the hosts measured) were the
# fastest, 1.1-1.3x faster than 1 MiB and 1.3-1.8x faster than 4-8 MiB: each
# panel costs a stream over the rows of E and the panel's offsets, each
# L2 miss a random read.
PANEL_BYTES = 1 << 21
# Panels per thread at least: the column pass gives whole panels to
# threads, so there is one at least for each, and a second evens the load.
PANELS_PER_THREAD = 2
# The panel scheme pays for each panel a pass over every row's offsets:
# worth it while rows hold this many entries per panel, on average.
PANEL_MIN_ENTRIES = 4


@dataclasses.dataclass(frozen=True)
class Panels:
    """X's entries regrouped by column panels: the panel scheme's copy of X.

    Attributes
    ----------
    data, indices : ndarray of shape (nnz,)
        The entries (global column indices), panel by panel, and within a
        panel row by row.
    ptr : ndarray of shape (n_panels, m + 1), int64
        Row i's entries in panel p are ``ptr[p, i]:ptr[p, i + 1]``.
    bounds : ndarray of shape (n_panels + 1,), int64
        Panel p holds columns ``bounds[p]:bounds[p + 1]``.
    shape : (m, n)
    """

    data: np.ndarray
    indices: np.ndarray
    ptr: np.ndarray
    bounds: np.ndarray
    shape: tuple[int, int]

    @property
    def nbytes(self) -> int:
        """Bytes held by the copy."""
        return int(self.data.nbytes + self.indices.nbytes + self.ptr.nbytes)

    def owners(self, n_threads: int) -> tuple[np.ndarray, np.ndarray]:
        """Share the panels among ``n_threads`` owners for the column pass.

        Returns (owned, owner_start): owner t forms the panels
        ``owned[owner_start[t]:owner_start[t + 1]]``. Each panel costs its
        entries plus one offset per row; panels go, costliest first, to the
        owner with the least work so far (longest processing time first),
        which keeps the owners within one panel's cost of each other
        whatever the number of panels. (Numba's static split of a prange
        over 7 panels gave one thread 4 of them, and the pass scaled 1.3x
        on 2 threads.)
        """
        m = self.ptr.shape[1] - 1
        cost = (self.ptr[:, m] - self.ptr[:, 0]) + m
        owners = max(1, min(int(n_threads), len(cost)))
        load = np.zeros(owners)
        mine: list[list[int]] = [[] for _ in range(owners)]
        for p in np.argsort(-cost, kind="stable"):
            t = int(np.argmin(load))
            mine[t].append(int(p))
            load[t] += cost[p]
        owned = np.array([p for panels in mine for p in sorted(panels)], np.int64)
        owner_start = np.cumsum([0] + [len(panels) for panels in mine]).astype(np.int64)
        return owned, owner_start


def panel_bounds(csr: CSR, n_classes: int, n_threads: int | None = None) -> np.ndarray:
    """Column boundaries of the panels: about equal entries each, none too wide for L2.

    At least ``PANELS_PER_THREAD`` panels per thread, and as many more as
    keep each panel's rows of W within ``PANEL_BYTES``, rounded up to a
    multiple of the threads (the column pass gives each thread as many);
    boundaries at equal shares of the entries, then any panel still wider
    than that split evenly.
    """
    m, n = csr.shape
    threads = numba_thread_count() if n_threads is None else max(1, n_threads)
    count = panel_count(csr, n_classes, threads)
    width = _panel_width(csr, n_classes)
    cum = np.cumsum(np.bincount(csr.indices, minlength=n))
    inner = np.searchsorted(cum, cum[-1] * np.arange(1, count) / count, side="right") \
        if cum.size and cum[-1] else np.linspace(0, n, count + 1)[1:-1]
    bounds = np.unique(np.concatenate([[0], inner, [n]]).astype(np.int64))
    pieces = [bounds[:1]]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        parts = -(-(hi - lo) // width)
        pieces.append(np.linspace(lo, hi, parts + 1).round().astype(np.int64)[1:])
    return np.concatenate(pieces)


def _panel_width(csr: CSR, n_classes: int) -> int:
    return max(1, PANEL_BYTES // (n_classes * csr.dtype.itemsize))


def panel_count(csr: CSR, n_classes: int, threads: int) -> int:
    """Panels the scheme aims at (before the split of any too wide)."""
    count = max(PANELS_PER_THREAD * threads, -(-csr.shape[1] // _panel_width(csr, n_classes)))
    return -(-count // threads) * threads


def panels(csr: CSR, n_classes: int, n_threads: int | None = None) -> Panels:
    """Return X regrouped by column panels, for the panel scheme (held by the caller).

    Two parallel passes over the entries (count per row and panel, then
    copy): the same size as X again, plus (n_panels, m + 1) offsets.
    """
    m, n = csr.shape
    bounds = panel_bounds(csr, n_classes, n_threads)
    col_panel = np.repeat(np.arange(len(bounds) - 1, dtype=np.int64), np.diff(bounds))
    ptr = np.empty((len(bounds) - 1, m + 1), np.int64)
    data = np.empty_like(csr.data)
    indices = np.empty_like(csr.indices)
    with numba_threads(n_threads):
        chunks = n_chunks(m)
        _panel_layout(csr.indices, csr.indptr, col_panel, ptr, chunks)
        _panel_fill(csr.data, csr.indices, csr.indptr, col_panel, ptr, data, indices, chunks)
    return Panels(data, indices, ptr, bounds, (m, n))


def gradient_scheme(csr: CSR, n_classes: int, n_threads: int | None = None) -> str:
    """Pick how Xᵀ E is formed: "panels", "scatter" or "transpose".

    * "panels": X regrouped by column panels (:func:`panels`, held by the
      caller) whose rows of W fit a core's L2; a row pass and a column pass
      panel by panel, each panel's gathers and scatters hitting L2. Chosen
      when W is wider than one panel and rows hold at least
      ``PANEL_MIN_ENTRIES`` entries per panel on average (text with dozens
      of terms per row and W of a few to a few tens of MB): there it was the
      fastest scheme, 1.4-1.9x the faster of the other two (BENCHMARKS.md,
      "Sparse panels").
      Extra memory: the copy of X and E. Otherwise:

    * "scatter": rows scatter x_f e into per-thread (n, k) accumulators,
      added at the end. Extra memory (threads - 1) n k beyond the gradient;
      extra work: zeroing and adding those n k numbers per thread.
    * "transpose": the error rows are stored in E (m, k), then a column
      pass over Xᵀ (:func:`transpose`, held by the caller) gathers each
      row of the gradient once. Extra memory: E plus the copy of X.

    "transpose" is chosen when its extra memory (Xᵀ and E) is at most what
    the scatter scheme's per-thread accumulators take (threads x n k): wide
    data, where n k is comparable to X or larger. There it is also faster,
    because it neither zeroes nor adds n k-sized buffers and writes the
    gradient sequentially instead of scattering into it at random
    (BENCHMARKS.md, "Sparse"); on narrower data (X many times n k) the
    scatter scheme needs no copy of X and is as fast.
    """
    m, n = csr.shape
    item = csr.dtype.itemsize
    threads = numba_thread_count() if n_threads is None else n_threads
    if n * n_classes * item > PANEL_BYTES and m and \
            csr.nnz >= PANEL_MIN_ENTRIES * m * panel_count(csr, n_classes, max(1, threads)):
        return "panels"
    copy = csr.data.nbytes + csr.nnz * (4 if m <= _INT32_MAX else 8) + 8 * (n + 1)
    accumulators = max(1, threads) * n * n_classes * item
    return "transpose" if copy + m * n_classes * item <= accumulators else "scatter"


def _pad(row: int, dtype: np.dtype) -> int:
    """Return the padding, in rows of ``row`` entries, between two chunks' buffers.

    128 bytes (a pair of cache lines) between two threads' per-chunk sums or
    scratch rows: each thread writes its own every row, and a shared line
    would move between cores each time (see ``_dense.DenseEngine._accumulators``).
    """
    return -(-128 // (row * np.dtype(dtype).itemsize))


def loss_and_grad(csr: CSR, y: Any, sample_weight: Any, W: Any, b: Any = None,
                  alpha: float = 0.0, n_threads: int | None = None,
                  P: np.ndarray | None = None, XT: CSR | None = None,
                  total: float | None = None
                  ) -> tuple[float, np.ndarray, np.ndarray | None]:
    """Weighted mean cross-entropy + alpha/2 ||W||² and its gradient on CSR data.

    Parameters
    ----------
    csr : CSR
        From :func:`as_csr`.
    y : ndarray (m,) of labels in 0..k-1, or (m, k) of target rows
        Already validated.
    sample_weight : ndarray (m,) or None
    W : ndarray (n, k)
    b : ndarray (k,) or None
        None: no intercept (grad_b is None).
    alpha : float
    n_threads : int or None
    P : ndarray (m, k) of csr's dtype, C-contiguous, or None
        When given, receives softmax(X W + b) (for :func:`hessp`).
    XT : CSR, Panels or None
        ``transpose(csr)``: use the transpose scheme; ``panels(csr, k)``: the
        panel scheme (see :func:`gradient_scheme`); None: the scatter scheme.
    total : float or None
        The loss's normaliser; None: the sum of the weights (m unweighted).
        A Dask block passes the whole data set's.

    Returns
    -------
    loss : float
    grad_W : ndarray (n, k)
    grad_b : ndarray (k,) or None

    Raises
    ------
    ValueError
        If the logits of a row are not finite (the row is named).

    Memory beyond the result (n k): (threads - 1) n k (scatter) or m k
    (transpose, plus the caller's XT).
    """
    m, n = csr.shape
    dt = csr.dtype
    W, bias = _kernel_weights(csr, W, b)
    k = W.shape[1]
    labels, targets, soft = _targets(y, m, k, dt)
    sw, weighted, total = _weights(sample_weight, m, dt, total)
    P_out = np.empty((0, k), dt) if P is None else P
    scale = dt.type(1.0 / total)
    with numba_threads(n_threads) as t:
        chunks = n_chunks(m)
        gb = np.empty((chunks, k + _pad(1, dt)), dt)
        loss = np.empty(chunks, np.float64)
        bad_row = np.empty(chunks, np.int64)
        E, G0, Gp = _row_pass_buffers(XT, m, n, k, chunks, dt)
        if isinstance(XT, Panels):
            _panel_row_pass(XT.data, XT.indices, XT.ptr, labels, targets, sw, soft, weighted,
                            scale, W, bias, P_out, E, gb, loss, bad_row)
        else:
            scratch = np.empty((chunks, 1 + _pad(k, dt), k), dt)
            _sparse_loss_grad(csr.data, csr.indices, csr.indptr, labels, targets, sw, soft,
                              weighted, scale, W, bias, P_out, E, G0, Gp, gb, loss, bad_row,
                              scratch)
        row = first_bad(bad_row)
        if row >= 0:
            from ._objective import logits_error

            raise logits_error(row, dt)
        G, wsq = _column_pass(XT, E, G0, Gp, W, alpha, t)
    value = float(loss.sum()) / total
    if alpha:
        value += 0.5 * alpha * float(wsq.sum())
    grad_b = gb.sum(axis=0)[:k] if b is not None else None
    return value, G, grad_b


def hessp(csr: CSR, P: np.ndarray, sample_weight: Any, V: Any, c: Any = None,
          alpha: float = 0.0, n_threads: int | None = None, XT: CSR | None = None,
          total: float | None = None, scale: float = 1.0, out: np.ndarray | None = None
          ) -> tuple[np.ndarray, np.ndarray | None]:
    """Hessian of the objective at the weights that gave P, times scale (V, c).

    Parameters
    ----------
    csr : CSR
    P : ndarray (m, k)
        Probabilities stored by :func:`loss_and_grad` (its ``P`` argument).
    sample_weight : ndarray (m,) or None
    V : ndarray (n, k)
    c : ndarray (k,) or None
        Intercept direction; None without an intercept (then Hc is None).
    alpha : float
        The L2 term alpha V is added to HV.
    n_threads : int or None
    XT : CSR, Panels or None
        ``transpose(csr)`` or ``panels(csr, k)``, as in :func:`loss_and_grad`.
    total : float or None
        The loss's normaliser, as in :func:`loss_and_grad`.
    scale : float
        The direction is scale (V, c): Newton's conjugate gradients take
        products along unit directions without forming them (the scale
        meets each entry of X before V does, see
        :func:`._kernels._sparse._gather_scaled`).
    out : ndarray (n, k) of csr's dtype, C-contiguous, or None
        Where HV is written (None: a new array).

    Returns
    -------
    HV : ndarray (n, k)
        sum_i x_i s_iᵀ + alpha scale V, s_i = (w_i / sum w)(p_i * u_i - p_i (p_i . u_i)),
        u_i = scale (Vᵀ x_i + c).
    Hc : ndarray (k,) or None
        sum_i s_i.
    """
    with numba_threads(n_threads) as t:
        kernel, args, (V, S, H0, Hp, hc) = hessp_row_pass(
            csr, P, sample_weight, V, c, XT=XT, total=total, scale=scale,
            chunks=n_chunks(csr.shape[0]), out=out)
        kernel(*args)
        HV, _ = _column_pass(XT, S, H0, Hp, V, alpha * scale, t, out)
    return HV, (hc.sum(axis=0)[:V.shape[1]] if c is not None else None)


def hessp_row_pass(csr: CSR, P: np.ndarray, sample_weight: Any, V: Any, c: Any = None, *,
                   XT: CSR | Panels | None = None, total: float | None = None,
                   scale: float = 1.0, chunks: int = 1, out: np.ndarray | None = None
                   ) -> tuple[Any, tuple, tuple[np.ndarray, ...]]:
    """(kernel, arguments, (V, rows, G0, Gp, hc)) of :func:`hessp`'s row pass over ``chunks``.

    The kernel (:func:`~._kernels._hessp._panel_hessp_rows` for panels,
    else :func:`~._kernels._hessp._sparse_hessp`) writes the rows, or G0
    and the per-chunk parts Gp, and hc, for :func:`_column_pass`; V is the
    direction as the kernels read it. Also the argument types a second
    process compiles for a fit (``SparseEngine.hessp_kernels``).
    """
    m, n = csr.shape
    dt = csr.dtype
    V, cv = _kernel_weights(csr, V, c)
    k = V.shape[1]
    cv = cv * dt.type(scale)
    P = kernel_view(np.ascontiguousarray(P, dtype=dt))
    sw, weighted, total = _weights(sample_weight, m, dt, total)
    hc = np.empty((chunks, k + _pad(1, dt)), dt)
    S, H0, Hp = _row_pass_buffers(XT, m, n, k, chunks, dt, out)
    parts = (V, S, H0, Hp, hc)
    if isinstance(XT, Panels):
        return (_panel_hessp_rows, (XT.data, XT.indices, XT.ptr, P, sw, weighted,
                                    dt.type(1.0 / total), V, dt.type(scale), cv, S, hc), parts)
    scratch = np.empty((chunks, 1 + _pad(k, dt), k), dt)
    return (_sparse_hessp, (csr.data, csr.indices, csr.indptr, P, sw, weighted,
                            dt.type(1.0 / total), V, dt.type(scale), cv, S, H0, Hp, hc,
                            scratch), parts)


def sgd_epoch(csr: CSR, y: Any, sample_weight: Any, W: np.ndarray, b: np.ndarray,
              order: Any, *, batch_size: int, eta0: float, alpha: float = 0.0,
              fit_intercept: bool = True, momentum: float = 0.0, nesterov: bool = False,
              VW: np.ndarray | None = None, Vb: np.ndarray | None = None,
              learning_rate: str = "constant", power_t: float = 0.5, t0: int = 0,
              steps_per_epoch: int | None = None, mean_weight: float | None = None
              ) -> tuple[int, float]:
    """One mini-batch SGD epoch over the rows ``order``, updating W, b (and VW, Vb) in place.

    Parameters
    ----------
    csr : CSR
    y, sample_weight
        As in :func:`loss_and_grad`, validated by the caller.
    W : ndarray (n, k), csr's dtype, C-contiguous
        Updated in place.
    b : ndarray (k,), csr's dtype
        Updated in place when ``fit_intercept``.
    order : array of int (m_epoch,)
        Rows in visiting order (the caller's shuffle).
    batch_size, eta0, alpha, momentum, nesterov, power_t
        As in the dense SGD epoch; ``learning_rate`` "constant" or
        "invscaling" (eta0 / (1 + t / steps_per_epoch) ** power_t, t the
        number of updates so far, starting at ``t0``).
    steps_per_epoch : int or None
        Mini-batches in an epoch of the whole data set (the schedule's
        divisor); None: those of these rows.
    mean_weight : float or None
        Σ w / rows over the whole data set (each row's step is scaled by
        w_i / mean_weight); None: over these rows.
    VW : ndarray (n, k) or None
        Velocity, needed (and updated) only when momentum > 0.
    Vb : ndarray (k,) or None
        Intercept velocity (updated when fit_intercept).

    Returns
    -------
    n_steps : int
        Updates made, or -(updates + 1) if a row's logits became non-finite
        (the caller restores its snapshot of W and b).
    loss_sum : float
        Sum of w_i * CE_i over the epoch's rows (divide by sum w for the mean);
        NaN when the epoch diverged.

    Cost: O(nnz of the batch * k) per update when momentum == 0 (L2 through
    a scale factor, multiplied into W at the end of the epoch: one O(n k)
    pass per epoch); O(n k) per update when momentum > 0.
    """
    m, n = csr.shape
    dt = csr.dtype
    if W.dtype != dt or not W.flags.c_contiguous or not W.flags.writeable:
        raise ValueError(f"W must be a writeable C-contiguous {dt.name} array (updated in place)")
    k = W.shape[1]
    if b.dtype != dt or b.shape != (k,):
        raise ValueError(f"b must be a ({k},) {dt.name} array (updated in place)")
    labels, targets, soft = _targets(y, m, k, dt)
    sw, weighted, total = _weights(sample_weight, m, dt)
    inv_mean_weight = m / total if mean_weight is None else 1.0 / mean_weight
    order = kernel_view(np.ascontiguousarray(order, dtype=np.int64))
    if order.size and (order.min() < 0 or order.max() >= m):
        # O(len(order)), against the epoch's O(nnz k): cheap insurance
        # against an out-of-bounds read in the kernel.
        raise ValueError(f"order must hold row indices in [0, {m})")
    batch_size = int(max(1, min(batch_size, max(1, order.shape[0]))))
    if steps_per_epoch is None:
        steps_per_epoch = max(1, -(-m // batch_size))
    schedule = SCHEDULE_INVSCALING if learning_rate == "invscaling" else SCHEDULE_CONSTANT
    if momentum:
        if VW is None:
            raise ValueError("momentum > 0 needs the velocity VW")
    else:
        VW = np.empty((0, k), dt)
    Vb = np.zeros(k, dt) if Vb is None else Vb
    wscale = np.ones(1, np.float64)
    loss_out = np.full(1, np.nan)
    steps = _sparse_sgd_epoch(
        csr.data, csr.indices, csr.indptr, labels, targets, sw, soft, weighted, order,
        batch_size, inv_mean_weight, W, wscale, b, bool(fit_intercept), float(alpha), VW, Vb,
        float(momentum), bool(nesterov), float(eta0), schedule, float(power_t), int(t0),
        steps_per_epoch, np.empty((batch_size, k), dt), np.empty(k, dt), loss_out)
    if wscale[0] != 1.0:
        W *= dt.type(wscale[0])
    return int(steps), float(loss_out[0])


def logits(csr: CSR, W: Any, b: Any = None, out: np.ndarray | None = None,
           n_threads: int | None = None) -> np.ndarray:
    """X W + b into ``out`` (m, k) (allocated when None; csr's dtype, C-contiguous)."""
    m = csr.shape[0]
    W, bias = _kernel_weights(csr, W, b)
    if out is None:
        out = np.empty((m, W.shape[1]), csr.dtype)
    with numba_threads(n_threads):
        _sparse_logits(csr.data, csr.indices, csr.indptr, W, bias, out, n_chunks(m))
    return out


def predict_labels(csr: CSR, W: Any, b: Any = None, n_threads: int | None = None) -> np.ndarray:
    """argmax_j (X W + b)_ij for every row (int64, ties to the lowest j), no (m, k) array."""
    m = csr.shape[0]
    W, bias = _kernel_weights(csr, W, b)
    out = np.empty(m, np.int64)
    with numba_threads(n_threads):
        k = W.shape[1]
        _sparse_predict(csr.data, csr.indices, csr.indptr, W, bias, out,
                        np.empty((n_chunks(m), 1 + _pad(k, csr.dtype), k), csr.dtype))
    return out
