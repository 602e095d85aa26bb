"""The objective over one validated data set.

    J(coef, b) = Σ_i w_i CE_i / Σ w  +  α/2 ‖coef‖²

:class:`Objective` evaluates J and its gradient on a
:class:`~fastsoftmax._data.Dataset` with one fused kernel pass over X, and
for Newton's method a :class:`Hessian` at a point: its products with
directions, one pass over X each. Parameters are in
scikit-learn's layout, ``coef`` (k, n) and ``intercept`` (k,) or None; the
kernel launches live in the engines (:mod:`fastsoftmax._dense`,
:mod:`fastsoftmax._sparse_engine`). Solvers
build one objective per fit and call it every iteration: validation has
already happened and buffers are reused. Thread counts are not touched
here: the caller runs inside :func:`fastsoftmax._threads.thread_policy`.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from . import _calibration
from ._blas_choice import kernel_library
from ._data import Dataset
from ._dense import DenseEngine
from ._launch import launch_work, n_chunks, serial_call
from ._settings import env_value
from ._sparse_engine import SparseEngine
from ._threads import single_threaded_blas


def logits_error(row: int, dtype: np.dtype) -> ValueError:
    """Return the error for logits that overflowed at ``row``."""
    return ValueError(
        f"the logits X @ W + b are not finite at row {row}: the features or weights "
        f"are too large for {dtype.name} (rescale X or lower the learning rate)")


def both_hessp_kernels(data: Dataset, mode: str | None, warm: bool,
                       keep_scratch: bool) -> list[tuple[Any, tuple]]:
    """[(kernel, argument types)] of both dense strategies' Hessian products on ``data``.

    The ``aside`` of a Newton fit's calibration (:func:`._calibration.calibrate`),
    which compiles them in a second process while it compiles both
    strategies' gradient kernels to time them, before the winner is known:
    the signatures the fit's engine will call, the fixed rule's strategy
    first.
    """
    work = data.n_rows * data.n_features * data.n_classes
    first = _calibration.fixed_rule(data.n_features, data.n_classes, work, data.dtype.itemsize)
    return [found for s in (first, "gemm" if first == "rows" else "rows")
            for found in DenseEngine(data, s, mode, warm, keep_scratch).hessp_kernels()]


# call_objective's objectives, per thread: {key: (wisdom, objective)}, at
# most _KEPT_OBJECTIVES of them (a new key beyond empties the set).
_kept = threading.local()
_KEPT_OBJECTIVES = 8


def call_objective(data: Dataset) -> Objective:
    """Return the objective of one call of the function API on ``data``, bound to it.

    ``loss_and_grad`` and ``hessp`` make one per call, inside the call's
    thread policy. On dense data the objective made for the last call of the
    same shape, classes, dtype and launch (on the calling thread or not, and
    the chunk count) on this thread is bound to ``data`` instead, while the
    wisdom and the strategy and BLAS overrides that chose its engine stand:
    the strategy, the GEMM blocks and the engine's layout depend on nothing
    else. Making them again (the lookups of the wisdom, the engine's
    choices, a dozen Python calls) was 2-6 microseconds, 5-10 %, of a call
    on a small problem in the caller's loop (BENCHMARKS.md, "Fiftieth
    session"). The caller enters it in a ``with`` block, which unbinds it
    when the call is done: no caller's array outlives the call. Sparse data gets a new objective:
    its engine holds the data's transposed copy.
    """
    if data.sparse:
        return Objective(data, keep_scratch=True)
    m, n, k = data.n_rows, data.n_features, data.n_classes
    serial = serial_call(launch_work(m, n, k))  # counts the call, as the engine would
    key = (m, n, k, data.dtype, serial, 1 if serial else n_chunks(m),
           env_value("FASTSOFTMAX_STRATEGY"), env_value("FASTSOFTMAX_BLAS"))
    store = getattr(_kept, "objectives", None)
    if store is None:
        store = _kept.objectives = {}
    held = store.get(key)
    if held is not None and held[0] is _calibration.wisdom_object():
        objective = held[1]
        objective.bind(data)
        engine = objective.engine
        if engine.uses_blas and isinstance(engine, DenseEngine):
            engine.use_blas()  # as the engine's making does
        return objective
    objective = Objective(data, keep_scratch=True, serial=serial)
    if len(store) >= _KEPT_OBJECTIVES:
        store.clear()
    # The wisdom as it stands after the making, which may have timed the shape.
    store[key] = (_calibration.wisdom_object(), objective)
    return objective


class Objective:
    """J, its gradient and its Hessian on one :class:`~fastsoftmax._data.Dataset`.

    Parameters
    ----------
    data : Dataset
        Validated data; its ``total_weight`` normalises the loss (a Dask
        block carries the total of the whole data set, so that block
        results simply add up).
    strategy : {"rows", "gemm"} or None
        Dense kernel strategy; None picks this host's best for the shape
        (:func:`fastsoftmax._calibration.strategy`). Sparse data (X a
        :class:`fastsoftmax._sparse.CSR`) always runs the sparse kernels
        (:mod:`fastsoftmax._sparse_engine`).
    mode : {"cached", "recompute"} or None
        Whether Hessian products read the probabilities stored by the
        gradient pass or recompute them; None decides by the memory budget
        (:func:`fastsoftmax._dense.choose_mode`).
    warm : bool
        The objective serves a solver (many calls back to back): small
        problems run the parallel kernels too.
    keep_scratch : bool
        The objective serves one call: the dense kernels' scratch is kept
        between such calls, per thread (:class:`fastsoftmax._dense.DenseEngine`).
    newton : bool
        The objective serves Newton's method: where choosing the strategy
        calibrates first, both strategies' Hessian products compile in a
        second process meanwhile (:func:`both_hessp_kernels`).
    serial : bool or None
        Dense data: whether the kernels run on the calling thread, as the
        caller decided (:func:`fastsoftmax._launch.serial_call`); None
        decides in the engine.
    """

    def __init__(self, data: Dataset, strategy: str | None = None, mode: str | None = None,
                 warm: bool = False, keep_scratch: bool = False, newton: bool = False,
                 serial: bool | None = None):
        self.data: Dataset | None = data  # None between calls (:meth:`bind`)
        self.dtype = data.dtype
        self.n_features = data.n_features
        self.n_classes = data.n_classes
        self.total_weight = data.total_weight
        self.engine: SparseEngine | DenseEngine
        if data.sparse:
            self.engine = SparseEngine(data, warm)
        else:
            if strategy is None:
                aside = (functools.partial(both_hessp_kernels, data, mode, warm, keep_scratch)
                         if newton else None)
                strategy = _calibration.strategy(
                    self.n_features, self.n_classes, self.dtype,
                    work=data.n_rows * self.n_features * self.n_classes, aside=aside)
            self.engine = DenseEngine(data, strategy, mode, warm, keep_scratch, serial=serial)
        self.strategy = self.engine.strategy

    def bind(self, data: Dataset | None) -> None:
        """Evaluate on ``data`` (the shape, classes and dtype of the objective's own), or let go.

        For :func:`call_objective`'s objectives, kept between calls of the
        function API: None drops the caller's arrays once a call is done.
        """
        self.data = data
        if data is not None:
            self.total_weight = data.total_weight
        if isinstance(self.engine, DenseEngine):
            self.engine.bind(data)
        elif data is not None:
            raise ValueError("a sparse objective serves the data it was made for")

    def __enter__(self) -> Objective:
        return self

    def __exit__(self, *exc) -> None:
        """Let go of the call's data (``bind(None)``): ``with call_objective(data) as o:``."""
        self.bind(None)

    def blas_hold(self) -> single_threaded_blas:
        """Return the BLAS hold for a call of the engine's kernels, for the caller to enter.

        The one library the GEMM kernels' products call (``_blas_choice.kernel_library``)
        at one thread; nothing for kernels that call no BLAS (the rows and
        sparse kernels) or a library that needs no hold.
        """
        if not self.engine.uses_blas:
            return single_threaded_blas(False)
        library = kernel_library(self.dtype)
        return single_threaded_blas(library is not None, library)

    def compile_hessp_aside(self) -> None:
        """Start compiling the Hessian products' kernel in a second process, where it helps.

        Called by Newton's method before its first gradient, so that the
        kernel compiles beside the gradient's (:mod:`fastsoftmax._side_compile`).
        """
        from . import _side_compile

        _side_compile.start(self.engine.hessp_kernels)

    @property
    def coef_order(self) -> str:
        """The memory order of coef (k, n) that the engine takes and returns without a copy.

        "F" for the dense GEMM strategy, whose kernels read W = coefᵀ
        C-contiguous and whose gradient is the transpose of an (n, k) sum,
        and for the sparse kernels, whose gradient is too; "C" for the rows
        strategy. A solver that keeps its coef in this order (L-BFGS's flat
        vector, as Newton's) spares a transposing copy each way on every
        call.
        """
        rows = isinstance(self.engine, DenseEngine) and self.engine.strategy == "rows"
        return "C" if rows else "F"

    def _bias(self, intercept: np.ndarray | None) -> np.ndarray:
        return intercept if intercept is not None else np.zeros(self.n_classes, self.dtype)

    def loss_grad(self, coef: np.ndarray, intercept: np.ndarray | None,
                  alpha: float = 0.0) -> tuple[float, np.ndarray, np.ndarray | None]:
        """J and its gradient at (coef, intercept).

        ``coef`` (k, n) and ``intercept`` (k,) or None, of the data's dtype;
        ``coef`` in either memory order (the transposed view of a public
        (n, k) W is passed without a copy). Returns ``(loss, grad_coef,
        grad_intercept)``, grad_coef (k, n) in the engine's order (C, or F
        for the dense GEMM strategy: the transpose of a C-contiguous (n, k)),
        grad_intercept None when intercept is None. Raises ValueError if the
        logits overflow to a non-finite value.
        """
        loss, g_coef, g_b = self.engine.gradient(coef, self._bias(intercept), alpha=alpha)
        return loss, g_coef, g_b if intercept is not None else None

    def hessian(self, coef: np.ndarray, intercept: np.ndarray | None,
                alpha: float = 0.0) -> Hessian:
        """J, its gradient and the Hessian's products at (coef, intercept).

        One gradient pass, which also keeps what the products need (the
        probabilities P, when they fit the memory budget). Raises
        ValueError if the logits overflow, as :meth:`loss_grad` does.
        """
        bias = self._bias(intercept)
        P = self.engine.proba_buffer()
        loss, g_coef, g_b = self.engine.gradient(coef, bias, P, alpha)
        return Hessian(self.engine, coef, bias, intercept is not None, alpha, P,
                       loss, g_coef, g_b if intercept is not None else None)


    def hessp(self, coef: np.ndarray, intercept: np.ndarray | None, V: np.ndarray,
              c: np.ndarray | None, alpha: float = 0.0) -> tuple[np.ndarray, np.ndarray | None]:
        """One Hessian-vector product at (coef, intercept), in one pass over X.

        The probabilities are recomputed inside the pass (no gradient pass
        first): the public :func:`fastsoftmax.hessp`. Raises ValueError if
        the logits at the point overflow.
        """
        dt = self.dtype
        cv = np.zeros(self.n_classes, dt) if c is None else c
        HV, Hc = self.engine.hessp(coef, self._bias(intercept), self.engine.no_proba, V, cv,
                                   alpha)
        if not (np.isfinite(HV).all() and np.isfinite(Hc).all()):
            self.engine.gradient(coef, self._bias(intercept))  # names the row that overflowed
            raise ValueError(f"the Hessian-vector product overflows {dt.name}: the "
                             "direction is too large (scale it down)")
        return HV, (Hc if intercept is not None else None)


class Hessian:
    """Loss, gradient and Hessian-vector products at one point.

    Made by :meth:`Objective.hessian`; ``loss``, ``grad_coef`` and
    ``grad_intercept`` are J and its gradient there. Directions and results
    are in coef layout, V (k, n), and c (k,) for the intercept (None: 0;
    an intercept part is refused when the model has no intercept).
    """

    def __init__(self, engine, coef, bias, fit_intercept, alpha, P, loss, grad_coef,
                 grad_intercept):
        self._engine = engine
        self._coef = coef
        self._bias = bias
        self._fit_intercept = fit_intercept
        self._alpha = float(alpha)
        self._P = P
        self.loss = loss
        self.grad_coef = grad_coef
        self.grad_intercept = grad_intercept

    def matvec(self, V: np.ndarray, c: np.ndarray | None = None, *, scale: float = 1.0,
               out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """H (scale V, scale c): (HV (k, n), Hc (k,) or None without intercept); one pass over X.

        ``scale`` lets a caller take the product along a multiple of V
        without forming it (Newton's unit directions); ``out`` (k, n)
        receives HV (the caller's reused memory; None: a new array).
        """
        dt = self._coef.dtype
        if c is not None and not self._fit_intercept:
            raise ValueError("an intercept direction c for a model without intercept")
        # V in its own memory order: each engine makes the layout its kernels
        # read (a transposed view of the sparse or GEMM layout costs no copy).
        V = np.asarray(V, dtype=dt)
        cv = np.zeros(V.shape[0], dt) if c is None else np.ascontiguousarray(c, dtype=dt)
        HV, Hc = self._engine.hessp(self._coef, self._bias, self._P, V, cv, self._alpha,
                                    scale, out)
        return HV, (Hc if self._fit_intercept else None)
