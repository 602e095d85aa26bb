"""The scikit-learn-compatible estimator.

:class:`SoftmaxRegression` only orchestrates: it checks parameters and data
at the edge, encodes labels, builds a :class:`SoftmaxObjective`, hands it to
a solver from :mod:`fastsoftmax._solvers`, and stores the result. All
arithmetic happens in the kernels.
"""

from __future__ import annotations

import contextlib
import json
import numbers
import os
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import assert_all_finite
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from . import _dask, _solvers
from ._functions import _log_softmax_inplace, _softmax_inplace
from ._kernels._predict import _predict_labels
from ._objective import SoftmaxObjective
from ._threads import check_n_threads, numba_threads, single_threaded_blas
from ._validation import check_finite, check_sample_weight, first_nonfinite_row

__all__ = ["SoftmaxRegression"]

_SOLVERS = ("lbfgs", "sgd", "bgd")
_FORMAT = "fastsoftmax-model"
_FORMAT_VERSION = 1


def _check_number(name, value, *, low=None, high=None, integer=False,
                  low_open=False, high_open=False):
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if integer else "a real number"
        raise TypeError(f"{name} must be {what}, got {value!r}")
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value!r}")


@contextlib.contextmanager
def _unchanged_on_error(est):
    """Restore every attribute of ``est`` if the block raises.

    scikit-learn's ``validate_data(reset=True)`` records ``n_features_in_``
    and ``feature_names_in_`` as soon as it has seen X, before y, the
    sample weights or the parameters are checked, and a solver can still
    fail; this makes a rejected ``fit``/``partial_fit`` leave the model as
    it was. Attributes are replaced, never modified in place, during a fit,
    so a shallow copy of ``__dict__`` is enough.
    """
    saved = dict(est.__dict__)
    try:
        yield
    except BaseException:
        est.__dict__.clear()
        est.__dict__.update(saved)
        raise


def _one_line(text: str) -> str:
    return " ".join(text.split())


_PLAIN = (bool, int, float, str, type(None))


def _plain(name, value):
    """``value`` as a JSON-safe Python scalar, or a TypeError naming ``name``."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, _PLAIN):
        raise TypeError(
            f"{name}={value!r} cannot be stored in a model file (only None, bool, int, "
            "float and str values can)"
            + ("; set_params(random_state=<int or None>) before saving -- a NumPy "
               "Generator or RandomState is not a plain value"
               if name == "random_state" else "")
        )
    return value


def _encode_params(params: dict) -> dict:
    """Encode constructor parameters as JSON-safe values.

    ``class_weight`` dicts become a list of [label, weight] pairs: JSON
    object keys are always strings, and a pair keeps the label's type (int,
    float or str).
    """
    out = {}
    for name, value in params.items():
        if name == "class_weight" and isinstance(value, dict):
            out[name] = [[_plain("class_weight label", k), _plain("class_weight value", v)]
                         for k, v in value.items()]
        else:
            out[name] = _plain(name, value)
    return out


def _decode_params(params: dict, classes: np.ndarray) -> dict:
    """Inverse of :func:`_encode_params`; a ValueError for malformed values."""
    params = dict(params)
    cw = params.get("class_weight")
    if isinstance(cw, list):
        if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], _PLAIN)
                   and p[0] is not None for p in cw):
            raise ValueError("class_weight must be a list of [label, weight] pairs")
        params["class_weight"] = {key: value for key, value in cw}
    elif isinstance(cw, dict):
        # Files written before the pairs encoding: JSON turned every label
        # into a string; map each back to the class it names.
        by_text = {str(c): c for c in classes.tolist()}
        params["class_weight"] = {by_text.get(key, key): value for key, value in cw.items()}
    return params


class SoftmaxRegression(ClassifierMixin, BaseEstimator):
    """Softmax (multinomial logistic) regression trained with fused kernels.

    Minimises the weighted mean cross-entropy plus ``alpha/2 ||W||²``
    (intercept not penalised). Every solver evaluates the loss and gradient
    with one multithreaded pass over X that never builds the (m, k) matrix
    of probabilities. float32 data is trained in float32.

    ``fit`` (and the predict methods) also accept a dask array chunked by
    rows or a dask DataFrame, with a running ``distributed.Client``
    (``pip install fastsoftmax[dask]``); the blocks stay on the workers.
    lbfgs and bgd then run data-parallel: each iteration broadcasts the
    weights once, every block returns its partial loss and gradient from
    the same fused kernels, and the driver sums them, so the result equals
    in-memory training to rounding. sgd visits the blocks in turn, in a
    shuffled block order each epoch (rows shuffled within each block), the
    model state moving from worker to worker and the data never moving.
    ``early_stopping`` is not supported for dask input. Predictions on
    dask input are lazy dask arrays, computed block by block.

    Parameters
    ----------
    solver : {"lbfgs", "sgd", "bgd"}, default="lbfgs"
        ``"lbfgs"``: scipy's L-BFGS on the full-batch loss; the most
        reliable, no learning rate to tune. ``"sgd"``: shuffled mini-batch
        SGD with momentum, one compiled kernel call per epoch;
        ``batch_size=1`` is per-sample SGD. ``"bgd"``: full-batch gradient
        descent with momentum and a backtracking ("adaptive") step.
    alpha : float, default=1e-4
        L2 penalty strength. scikit-learn's ``LogisticRegression(C=C)``
        fitted on m rows has the same optimum as ``alpha = 1 / (C * m)``.
    fit_intercept : bool, default=True
        Learn an unpenalised intercept per class.
    max_iter : int, default=200
        Iterations for lbfgs and bgd, epochs for sgd.
    tol : float, default=1e-4
        lbfgs: stop when the largest gradient entry is below tol. sgd and
        bgd: an iteration "improves" when the monitored loss falls by more
        than tol below its best so far.
    n_iter_no_change : int, default=5
        sgd and bgd stop after this many iterations without improvement
        (with ``learning_rate="adaptive"``, sgd first divides eta by 5).
    batch_size : int, default=64
        Rows per mini-batch for sgd and partial_fit.
    learning_rate : {"adaptive", "constant", "invscaling"}, default="adaptive"
        Step schedule for sgd and bgd. "constant": eta0 throughout.
        "invscaling": eta0 / (1 + epochs seen) ** power_t. "adaptive":
        sgd keeps eta0 while the loss improves and divides it by 5 when it
        stalls; bgd undoes a step that raises the loss and halves eta.
    eta0 : float, default=0.1
        Initial learning rate.
    power_t : float, default=0.5
        Exponent of the "invscaling" schedule.
    momentum : float, default=0.9
        Momentum for sgd and bgd, in [0, 1).
    nesterov : bool, default=True
        Use Nesterov's momentum.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the training data (stratified),
        monitor the loss on it instead of the training loss, and keep the
        weights with the best held-out loss.
    validation_fraction : float, default=0.1
        Share of the data held out when ``early_stopping`` is on.
    shuffle : bool, default=True
        Shuffle the rows every sgd epoch.
    random_state : int, numpy Generator or None, default=None
        Seeds the shuffling and the validation split; the same seed gives
        bit-identical weights on the same data and thread count.
    warm_start : bool, default=False
        Start ``fit`` from the previous solution (same classes and features).
    class_weight : dict, "balanced" or None, default=None
        Weights per class, multiplied into the sample weights; "balanced"
        uses ``m / (k * count(class))``.
    n_threads : int or None, default=None
        Numba threads used by this estimator's calls; None keeps Numba's
        current setting.
    verbose : int, default=0
        1: a progress bar (tqdm, on stderr) over iterations or epochs,
        showing the current loss. 2 or more: also one line per iteration
        on stdout.

    Attributes
    ----------
    coef_ : ndarray of shape (n_classes, n_features)
        Weights, Wᵀ in the notation of README.md ("The mathematics").
    intercept_ : ndarray of shape (n_classes,)
        Intercept (zeros when ``fit_intercept`` is False).
    classes_ : ndarray of shape (n_classes,)
        Class labels, sorted; any labels (ints, strings).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Present when X had string column names.
    n_iter_ : int
        Iterations (lbfgs, bgd) or epochs (sgd) run by the last fit.
    loss_curve_ : list of float
        Training loss per iteration or epoch (for sgd, the mean over the
        epoch's rows with the weights in force when each was seen).
    validation_loss_curve_ : list of float
        Held-out loss per epoch when ``early_stopping`` is on.

    Notes
    -----
    Binary problems are fitted as two-class softmax, so ``coef_`` has two
    rows; the model is the same as logistic regression on their difference.
    """

    def __init__(self, solver="lbfgs", *, alpha=1e-4, fit_intercept=True, max_iter=200,
                 tol=1e-4, n_iter_no_change=5, batch_size=64, learning_rate="adaptive",
                 eta0=0.1, power_t=0.5, momentum=0.9, nesterov=True, early_stopping=False,
                 validation_fraction=0.1, shuffle=True, random_state=None, warm_start=False,
                 class_weight=None, n_threads=None, verbose=0):
        self.solver = solver
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.eta0 = eta0
        self.power_t = power_t
        self.momentum = momentum
        self.nesterov = nesterov
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.shuffle = shuffle
        self.random_state = random_state
        self.warm_start = warm_start
        self.class_weight = class_weight
        self.n_threads = n_threads
        self.verbose = verbose

    # ------------------------------------------------------------------ edge
    def _check_params(self):
        if self.solver not in _SOLVERS:
            raise ValueError(f"solver must be one of {_SOLVERS}, got {self.solver!r}")
        if self.learning_rate not in _solvers.LEARNING_RATES:
            raise ValueError(
                f"learning_rate must be one of {_solvers.LEARNING_RATES}, "
                f"got {self.learning_rate!r}"
            )
        _check_number("alpha", self.alpha, low=0)
        _check_number("max_iter", self.max_iter, low=1, integer=True)
        _check_number("tol", self.tol, low=0)
        _check_number("n_iter_no_change", self.n_iter_no_change, low=1, integer=True)
        _check_number("batch_size", self.batch_size, low=1, integer=True)
        _check_number("eta0", self.eta0, low=0, low_open=True)
        _check_number("power_t", self.power_t, low=0)
        _check_number("momentum", self.momentum, low=0, high=1, high_open=True)
        _check_number("validation_fraction", self.validation_fraction, low=0, high=1,
                      low_open=True, high_open=True)
        _check_number("verbose", self.verbose, low=0, integer=True)
        for name in ("fit_intercept", "nesterov", "early_stopping", "shuffle", "warm_start"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        cw = self.class_weight
        if not (cw is None or cw == "balanced" or isinstance(cw, dict)):
            raise ValueError(f"class_weight must be None, 'balanced' or a dict, got {cw!r}")
        check_n_threads(self.n_threads)

    def _check_X(self, X, *, reset, dtype=None):
        X = validate_data(
            self, X, reset=reset, dtype=[np.float64, np.float32] if dtype is None else dtype,
            order="C", ensure_all_finite=False, accept_sparse=False,
        )
        X = np.ascontiguousarray(X)
        check_finite(X, "X")
        return X

    def _check_y(self, y):
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        y = column_or_1d(y, warn=True)
        if y.dtype.kind in "fc":
            assert_all_finite(y, input_name="y")
        elif y.dtype.kind == "O":
            for i, v in enumerate(y):
                if isinstance(v, (float, np.floating)) and not np.isfinite(v):
                    raise ValueError(f"y[{i}] = {v!r} is not a class label")
        # scikit-learn's target-type check casts to int64 to look for
        # integral floats; that cast must not surface as a RuntimeWarning.
        with np.errstate(invalid="ignore", over="ignore"):
            check_classification_targets(y)
        return y

    def _encode(self, y, classes, m):
        """Integer codes of y in ``classes``; a clear error for unseen labels."""
        if y.shape[0] != m:
            raise ValueError(f"y has {y.shape[0]} labels but X has {m} rows")
        codes = np.searchsorted(classes, y)
        codes_clipped = np.minimum(codes, len(classes) - 1)
        unseen = classes[codes_clipped] != y
        if np.any(unseen):
            i = int(np.flatnonzero(unseen)[0])
            raise ValueError(
                f"y[{i}] = {y[i].tolist()!r} is not one of the classes {classes.tolist()} "
                "fixed by the first partial_fit (pass every class in `classes`)"
            )
        return codes.astype(np.int64)

    def _weights(self, y_codes, classes, sample_weight, m, dtype):
        sw = None if sample_weight is None else check_sample_weight(sample_weight, m, dtype)
        if self.class_weight is not None:
            if self.class_weight == "balanced":
                present = np.unique(y_codes)
                cw = np.ones(len(classes))
                cw[present] = compute_class_weight("balanced", classes=present, y=y_codes)
            else:
                unknown = [c for c in self.class_weight if c not in set(classes.tolist())]
                if unknown:
                    raise ValueError(f"class_weight names labels not in y: {unknown}")
                cw = np.array([float(self.class_weight.get(c, 1.0)) for c in classes.tolist()])
                if not np.all(np.isfinite(cw)) or np.any(cw < 0):
                    raise ValueError("class_weight values must be finite and >= 0")
            row_w = cw[y_codes].astype(dtype)
            sw = row_w if sw is None else sw * row_w
            if not sw.sum(dtype=np.float64) > 0:
                raise ValueError("class_weight and sample_weight leave every row with weight 0")
        return sw

    def _rng(self):
        rs = self.random_state
        if isinstance(rs, np.random.Generator):
            return rs
        if isinstance(rs, np.random.RandomState):
            return np.random.default_rng(rs.randint(np.iinfo(np.int32).max))
        return np.random.default_rng(rs)

    def _callback(self, solver, total):
        """Return the solvers' per-iteration callback: a progress bar if verbose, else None."""
        if not self.verbose:
            return None
        from ._progress import IterationProgress

        return IterationProgress(total, solver, unit="epoch" if solver == "sgd" else "it",
                                 echo=self.verbose >= 2)

    # ------------------------------------------------------------------- fit
    def fit(self, X, y, sample_weight=None):
        """Fit the model to X and labels y.

        Parameters
        ----------
        X : array-like, dask array or dask DataFrame of shape (m, n)
            Training data; float32 trains in float32, anything else in
            float64. Must be finite. A dask collection is trained on the
            cluster (lbfgs/bgd data-parallel, sgd block by block; see the
            class docstring).
        y : array-like of shape (m,)
            Class labels (any hashable, sortable labels); at least 2 classes.
        sample_weight : array-like of shape (m,), optional
            Non-negative row weights.

        Returns
        -------
        self
        """
        # BLAS stays on one thread for the whole fit: between kernel calls
        # scipy's L-BFGS-B runs BLAS on (n, k)-sized vectors, and a
        # multithreaded BLAS pool left spinning there takes the cores from
        # Numba's workers in the next kernel call.
        with _unchanged_on_error(self), single_threaded_blas():
            return self._fit(X, y, sample_weight)

    def _fit(self, X, y, sample_weight):
        self._check_params()
        if _dask.is_dask_collection(X):
            return self._fit_dask(X, y, sample_weight)
        y = self._check_y(y)
        X = self._check_X(X, reset=True)
        m = X.shape[0]
        classes, codes = np.unique(y, return_inverse=True)
        if y.shape[0] != m:
            raise ValueError(f"y has {y.shape[0]} labels but X has {m} rows")
        if len(classes) < 2:
            raise ValueError(
                "softmax regression needs at least 2 classes in y; got 1 class: "
                f"{classes[0].tolist()!r}"
            )
        codes = codes.astype(np.int64)
        sw = self._weights(codes, classes, sample_weight, m, X.dtype)
        k = len(classes)
        n = X.shape[1]
        W0 = np.zeros((n, k), dtype=X.dtype)
        b0 = np.zeros(k, dtype=X.dtype) if self.fit_intercept else None
        if (self.warm_start and hasattr(self, "coef_") and self.coef_.shape == (k, n)
                and np.array_equal(self.classes_, classes)):
            # A copy, always: with one feature coef_.T is already contiguous,
            # and the SGD kernel updates its weights in place.
            W0 = np.array(self.coef_.T, dtype=X.dtype, order="C")
            if b0 is not None:
                b0 = self.intercept_.astype(X.dtype)
        rng = self._rng()
        validation = None
        if self.early_stopping:
            X, codes, sw, validation = self._split_validation(X, codes, sw, k, rng)
        objective = SoftmaxObjective(X, codes, None, sw, k, n_threads=self.n_threads)
        state: dict = {}
        result = self._run_solver(objective, W0, b0, rng, validation, state)
        # Only now, with everything computed, does the model change.
        self.classes_ = classes
        self._set_result(result, X.dtype)
        self._sgd_state = state if self.solver == "sgd" else {}
        self._sgd_state["sgd_solver"] = self.solver == "sgd"
        return self

    def _fit_dask(self, X, y, sample_weight):
        """Fit on a dask array or DataFrame: see :mod:`fastsoftmax._dask`."""
        classes, result, dtype, n, names = _dask.fit(self, X, y, sample_weight)
        self.classes_ = classes
        self._set_result(result, dtype)
        self.n_features_in_ = n
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self._sgd_state = {}
        return self

    def _split_validation(self, X, codes, sw, k, rng):
        from sklearn.model_selection import StratifiedShuffleSplit

        seed = int(rng.integers(np.iinfo(np.int32).max))
        splitter = StratifiedShuffleSplit(test_size=self.validation_fraction,
                                          random_state=seed)
        try:
            train, val = next(splitter.split(np.zeros(len(codes)), codes))
        except ValueError as exc:
            raise ValueError(
                f"early_stopping cannot hold out validation_fraction="
                f"{self.validation_fraction} of {len(codes)} rows with every class "
                f"represented: {exc}"
            ) from None
        sw_train = None if sw is None else sw[train]
        sw_val = None if sw is None else sw[val]
        if sw_val is not None and not sw_val.sum() > 0:
            raise ValueError("early_stopping: the held-out rows all have weight 0")
        val_obj = SoftmaxObjective(np.ascontiguousarray(X[val]), codes[val], None, sw_val, k,
                                   n_threads=self.n_threads)
        return np.ascontiguousarray(X[train]), codes[train], sw_train, val_obj

    def _run_solver(self, objective, W0, b0, rng, validation, state, *, epochs=None):
        solver = self.solver if epochs is None else "sgd"
        callback = self._callback(solver, self.max_iter if epochs is None else epochs)
        common = dict(alpha=float(self.alpha), callback=callback)
        # The solvers' warnings use stacklevel to point at fit: call them from here.
        try:
            if solver == "lbfgs":
                return _solvers.lbfgs(objective, W0, b0, max_iter=self.max_iter, tol=self.tol,
                                      validation=validation,
                                      n_iter_no_change=self.n_iter_no_change, **common)
            if solver == "bgd":
                return _solvers.bgd(objective, W0, b0, max_iter=self.max_iter, tol=self.tol,
                                    n_iter_no_change=self.n_iter_no_change, eta0=self.eta0,
                                    learning_rate=self.learning_rate, momentum=self.momentum,
                                    nesterov=self.nesterov, power_t=self.power_t,
                                    validation=validation, **common)
            return _solvers.sgd_epochs(
                objective, W0, b0, max_iter=self.max_iter if epochs is None else epochs,
                tol=self.tol, n_iter_no_change=self.n_iter_no_change, eta0=self.eta0,
                learning_rate=self.learning_rate, power_t=self.power_t,
                momentum=self.momentum, nesterov=self.nesterov, batch_size=self.batch_size,
                shuffle=self.shuffle, rng=rng, state=state, validation=validation,
                stop_early=epochs is None, **common,
            )
        finally:
            if callback is not None:
                callback.close()

    def _set_result(self, result, dtype, *, append=False):
        k = result.W.shape[1]
        self.coef_ = np.ascontiguousarray(result.W.T, dtype=dtype)
        self.intercept_ = (result.b.astype(dtype) if result.b is not None
                           else np.zeros(k, dtype=dtype))
        if append:
            self.n_iter_ = getattr(self, "n_iter_", 0) + result.n_iter
            self.loss_curve_ = list(getattr(self, "loss_curve_", [])) + result.loss_curve
        else:
            self.n_iter_ = result.n_iter
            self.loss_curve_ = list(result.loss_curve)
        self.validation_loss_curve_ = list(result.validation_loss_curve)

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One epoch of mini-batch SGD on (X, y): true multinomial online learning.

        ``class_weight="balanced"`` is refused (ValueError), as in
        scikit-learn's SGDClassifier: pass a dict of weights computed over
        all the training labels instead.

        Whatever ``solver`` is, partial_fit updates with SGD (``batch_size``,
        ``learning_rate``, ``eta0``, ``momentum``), carrying the momentum and
        the schedule from call to call. Each call counts as one epoch for the
        "invscaling" schedule; "adaptive" cannot watch a stream stall, so it
        keeps its current eta (as "constant" does).

        Parameters
        ----------
        X : array-like of shape (m, n)
        y : array-like of shape (m,)
        classes : array-like, optional
            Every class that will ever appear; required on the first call
            and fixed thereafter. Labels outside it are an error.
        sample_weight : array-like of shape (m,), optional

        Returns
        -------
        self
        """
        with _unchanged_on_error(self), single_threaded_blas():
            return self._partial_fit(X, y, classes, sample_weight)

    def _partial_fit(self, X, y, classes, sample_weight):
        self._check_params()
        if isinstance(self.class_weight, str) and self.class_weight == "balanced":
            # As scikit-learn's SGDClassifier: one chunk's class frequencies
            # are not the data's, and reweighting per chunk would change the
            # objective from call to call.
            raise ValueError(
                "class_weight='balanced' is not supported by partial_fit: the class "
                "frequencies of one chunk are not those of the whole data. Compute the "
                "weights once, e.g. sklearn.utils.class_weight.compute_class_weight("
                "'balanced', classes=classes, y=y) over all (or a large sample of) the "
                "training labels, and pass class_weight=dict(zip(classes, weights))"
            )
        first = not hasattr(self, "classes_")
        if first:
            if classes is None:
                raise ValueError("classes must be given on the first call to partial_fit")
            classes_arr = np.unique(np.asarray(classes))
            if len(classes_arr) < 2:
                raise ValueError("classes must list at least 2 classes")
            y = self._check_y(y)
            X = self._check_X(X, reset=True)
        else:
            classes_arr = self.classes_
            if classes is not None and not np.array_equal(np.unique(np.asarray(classes)),
                                                          self.classes_):
                raise ValueError(
                    f"classes={np.unique(classes).tolist()} differs from the classes fixed "
                    f"by the first call, {self.classes_.tolist()}"
                )
            y = self._check_y(y)
            X = self._check_X(X, reset=False, dtype=self.coef_.dtype)
        m, n = X.shape
        codes = self._encode(y, classes_arr, m)
        sw = self._weights(codes, classes_arr, sample_weight, m, X.dtype)
        k = len(classes_arr)
        if first:
            W0 = np.zeros((n, k), dtype=X.dtype)
            b0 = np.zeros(k, dtype=X.dtype) if self.fit_intercept else None
            state: dict = {}
        else:
            W0 = np.array(self.coef_.T, order="C")  # a copy: see fit
            b0 = self.intercept_.copy() if self.fit_intercept else None
            state = {key: (v.copy() if isinstance(v, np.ndarray) else v)
                     for key, v in getattr(self, "_sgd_state", {}).items()}
            if not state.get("sgd_solver", False):
                state = {}
        objective = SoftmaxObjective(X, codes, None, sw, k, n_threads=self.n_threads)
        result = self._run_solver(objective, W0, b0, self._rng(), None, state, epochs=1)
        self.classes_ = classes_arr
        self._set_result(result, X.dtype, append=not first)
        state["sgd_solver"] = True
        self._sgd_state = state
        return self

    # --------------------------------------------------------------- predict
    def _prepared(self, X):
        check_is_fitted(self, ("coef_", "intercept_", "classes_"))
        # O(k n): a model whose weights were made non-finite (by hand, or by
        # code outside fit) would otherwise predict class 0 everywhere.
        if not (np.isfinite(self.coef_).all() and np.isfinite(self.intercept_).all()):
            raise ValueError(
                "this model's coef_ or intercept_ holds NaN or inf, so it cannot "
                "predict; refit it (with a smaller eta0 if training diverged)"
            )
        return self._check_X(X, reset=False, dtype=self.coef_.dtype)

    def _logits(self, X):
        X = self._prepared(X)
        # Overflow is reported below with the row, not as a RuntimeWarning.
        with np.errstate(over="ignore", invalid="ignore"):
            Z = X @ self.coef_.T
            Z += self.intercept_
        self._check_logits(Z)
        return Z

    def _check_logits(self, Z):
        """Raise naming the first row of Z holding NaN or inf.

        The scan allocates nothing of Z's size: prediction allocates only
        its answer.
        """
        i = first_nonfinite_row(Z, check_n_threads(self.n_threads))
        if i >= 0:
            raise ValueError(
                f"the logits X @ coef_.T + intercept_ overflow {Z.dtype.name} at row {i}: "
                "the features are too large for this model (rescale X)"
            )

    def decision_function(self, X):
        """Logits ``X @ coef_.T + intercept_``, shape (m, n_classes).

        For two classes, scikit-learn's convention: the (m,) log-odds of
        ``classes_[1]`` against ``classes_[0]``, positive where class 1 wins.
        A dask X gives a lazy dask array, computed block by block.
        """
        if _dask.is_dask_collection(X):
            k = len(self.classes_)
            return _dask.predict_blocks(self.decision_function, X, None if k == 2 else k,
                                        self.coef_.dtype)
        check_is_fitted(self, ("coef_", "intercept_", "classes_"))
        if len(self.classes_) == 2:
            # The log-odds directly from the difference of the two weight
            # rows: only the (m,) answer is allocated, never the (m, 2) logits.
            X = self._prepared(X)
            with np.errstate(over="ignore", invalid="ignore"):
                d = X @ (self.coef_[1] - self.coef_[0])
                d += self.intercept_[1] - self.intercept_[0]
            self._check_logits(d)
            return d
        return self._logits(X)

    def predict_proba(self, X):
        """Class probabilities, shape (m, n_classes); rows sum to 1."""
        if _dask.is_dask_collection(X):
            return _dask.predict_blocks(self.predict_proba, X, len(self.classes_),
                                        self.coef_.dtype)
        return _softmax_inplace(self._logits(X), check_n_threads(self.n_threads))

    def predict_log_proba(self, X):
        """Log class probabilities, computed without log(softmax)."""
        if _dask.is_dask_collection(X):
            return _dask.predict_blocks(self.predict_log_proba, X, len(self.classes_),
                                        self.coef_.dtype)
        return _log_softmax_inplace(self._logits(X), check_n_threads(self.n_threads))

    def predict(self, X):
        """Predict the most probable class of each row, shape (m,).

        Allocates only the answer and a few row blocks: the logits are
        computed block by block and never stored for all rows. A dask X
        gives a lazy dask array, computed block by block.
        """
        if _dask.is_dask_collection(X):
            return _dask.predict_blocks(self.predict, X, None, self.classes_.dtype)
        X = self._prepared(X)
        m = X.shape[0]
        W = np.ascontiguousarray(self.coef_.T)
        idx = np.empty(m, dtype=np.int64)
        if m:
            with numba_threads(check_n_threads(self.n_threads)) as nt:
                n_chunks = max(1, min(m, nt))
                scratch = np.empty((n_chunks, min(256, m), W.shape[1]), dtype=W.dtype)
                with single_threaded_blas():
                    _predict_labels(X, W, self.intercept_, idx, scratch)
        return self.classes_[idx]

    # ------------------------------------------------------------- save/load
    def save(self, path: str | os.PathLike) -> None:
        """Save the fitted model to a ``.npz`` file of plain arrays (no pickle).

        Every constructor parameter is stored and comes back from
        :meth:`load` equal (``get_params()``), including a ``class_weight``
        dict keyed by int, float or str labels. A ``random_state`` that is a
        NumPy ``Generator`` or ``RandomState`` has no plain-value form: it
        is refused with a ``TypeError`` (nothing is written) rather than
        silently dropped; ``set_params(random_state=<int or None>)`` first.
        """
        check_is_fitted(self, ("coef_", "intercept_", "classes_"))
        classes = self.classes_
        if classes.dtype.kind == "O":
            if not all(isinstance(c, str) for c in classes):
                raise TypeError("only numeric or string class labels can be saved")
            classes = classes.astype(str)
        params = _encode_params(self.get_params())
        arrays = {
            "format": np.array(_FORMAT),
            "format_version": np.array(_FORMAT_VERSION),
            "params": np.array(json.dumps(params, allow_nan=True)),
            "coef": self.coef_,
            "intercept": self.intercept_,
            "classes": classes,
            "n_iter": np.array(self.n_iter_),
            "loss_curve": np.asarray(self.loss_curve_, dtype=np.float64),
        }
        if hasattr(self, "feature_names_in_"):
            arrays["feature_names_in"] = np.asarray(self.feature_names_in_, dtype=str)
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SoftmaxRegression:
        """Load a model written by :meth:`save`; pickled content is refused."""
        try:
            with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files}
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            raise
        except ValueError as exc:
            raise ValueError(f"{path}: not a fastsoftmax model file ({exc})") from None
        except Exception as exc:  # zipfile/OSError/EOF on truncated or foreign files
            raise ValueError(f"{path}: not a readable .npz model file ({exc})") from None
        return cls._from_arrays(arrays, path)

    @classmethod
    def _from_arrays(cls, arrays: dict[str, Any], path) -> SoftmaxRegression:
        def fail(why):
            raise ValueError(f"{path}: not a valid fastsoftmax model file: {why}")

        required = ("format", "format_version", "params", "coef", "intercept", "classes",
                    "n_iter", "loss_curve")
        missing = [key for key in required if key not in arrays]
        if missing:
            fail(f"missing arrays {missing}")
        def scalar(key, kind):
            # A 0-d array of the expected kind; anything else in a foreign or
            # edited file must not surface as a TypeError from int()/str().
            a = arrays[key]
            if a.shape != () or a.dtype.kind not in kind:
                fail(f"{key} must be a single {'integer' if kind == 'iu' else 'string'}, "
                     f"got dtype {a.dtype} and shape {a.shape}")
            return a.item()

        if scalar("format", "U") != _FORMAT:
            fail(f"format is {str(arrays['format'])!r}, expected {_FORMAT!r}")
        if scalar("format_version", "iu") != _FORMAT_VERSION:
            fail(f"format_version {int(arrays['format_version'])} is not supported")
        n_iter = scalar("n_iter", "iu")
        params_text = scalar("params", "U")
        loss_curve = arrays["loss_curve"]
        if loss_curve.ndim != 1 or loss_curve.dtype.kind not in "iuf":
            fail(f"loss_curve must be a 1-D float array, got {loss_curve.dtype} "
                 f"{loss_curve.shape}")
        coef, intercept, classes = arrays["coef"], arrays["intercept"], arrays["classes"]
        if coef.ndim != 2 or coef.dtype not in (np.float32, np.float64):
            fail(f"coef must be a 2-D float array, got {coef.dtype} {coef.shape}")
        k, n = coef.shape
        if n == 0:
            fail("coef has 0 columns (features)")
        if intercept.shape != (k,) or intercept.dtype != coef.dtype:
            fail(f"intercept must have shape ({k},) and dtype {coef.dtype}")
        if classes.shape != (k,) or k < 2:
            fail(f"classes must have shape ({k},) with k >= 2, got {classes.shape}")
        if classes.dtype.kind not in "biufU":
            fail(f"classes must be numbers or strings, got dtype {classes.dtype}")
        if len(np.unique(classes)) != k or np.any(classes[1:] < classes[:-1]):
            fail("classes must be sorted and distinct")
        if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(intercept))):
            fail("coef or intercept holds NaN or inf")
        try:
            params = json.loads(params_text)
            if not isinstance(params, dict):
                raise TypeError(f"a JSON object is needed, got {type(params).__name__}")
            params = _decode_params(params, classes)
            model = cls(**params)
            model._check_params()
        except (TypeError, ValueError) as exc:
            fail(f"bad params ({_one_line(str(exc))})")
        model.coef_ = np.ascontiguousarray(coef)
        model.intercept_ = np.ascontiguousarray(intercept)
        model.classes_ = classes
        model.n_features_in_ = n
        if "feature_names_in" in arrays:
            names = arrays["feature_names_in"]
            if names.shape != (n,) or names.dtype.kind != "U":
                fail(f"feature_names_in must be strings of shape ({n},)")
            model.feature_names_in_ = names.astype(object)
        model.n_iter_ = int(n_iter)
        model.loss_curve_ = [float(v) for v in loss_curve]
        model.validation_loss_curve_ = []
        model._sgd_state = {}
        return model
