"""The scikit-learn-compatible estimator.

:class:`SoftmaxRegression` only orchestrates: its parameters are checked
into a :class:`~fastsoftmax._params.SolverParams`, the raw data goes once
through the edge into a :class:`~fastsoftmax._data.Dataset` (or the Dask
layer's distributed data), :func:`fastsoftmax._solvers.solve` fits, and
the result is stored. The predict methods dispatch dask input and call
:mod:`fastsoftmax._prediction`. All arithmetic happens in the kernels;
model files are :mod:`fastsoftmax._persistence`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from . import _dask, _persistence, _prediction
from ._data import training_data
from ._params import check_params
from ._solvers import SGDState, choose_solver, solve
from ._validation import is_dask_collection

__all__ = ["SoftmaxRegression"]


@contextlib.contextmanager
def _unchanged_on_error(est):
    """Restore every attribute of ``est`` if the block raises.

    scikit-learn's ``validate_data(reset=True)`` records ``n_features_in_``
    and ``feature_names_in_`` as soon as it has seen X, and a solver can
    still fail after that; this makes a rejected ``fit``/``partial_fit``
    leave the model as it was. Attributes are replaced, never modified in
    place, during a fit, so a shallow copy of ``__dict__`` is enough.
    """
    saved = dict(est.__dict__)
    try:
        yield
    except BaseException:
        est.__dict__.clear()
        est.__dict__.update(saved)
        raise


def _rng(random_state):
    """Return a Generator for the random_state parameter (None, int, Generator or RandomState)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(np.iinfo(np.int32).max))
    return np.random.default_rng(random_state)


def _record_features(est, X, n_features):
    """Record n_features_in_ and feature_names_in_ (scikit-learn's rules) from X on ``est``."""
    if is_dask_collection(X):
        names = getattr(X, "columns", None)
        est.n_features_in_ = n_features
        if names is not None and all(isinstance(c, str) for c in names):
            est.feature_names_in_ = np.asarray(list(names), dtype=object)
        elif hasattr(est, "feature_names_in_"):
            del est.feature_names_in_
        return
    validate_data(est, X, reset=True, skip_check_array=True)


def _start(est, classes, n, dtype):
    """Return the starting weights: zeros, or est's current solution with warm_start."""
    k = len(classes)
    if (est.warm_start and hasattr(est, "coef_") and est.coef_.shape == (k, n)
            and np.array_equal(est.classes_, classes)):
        coef0 = np.array(est.coef_, dtype=dtype, order="C")
        intercept0 = est.intercept_.astype(dtype) if est.fit_intercept else None
    else:
        coef0 = np.zeros((k, n), dtype=dtype)
        intercept0 = np.zeros(k, dtype=dtype) if est.fit_intercept else None
    return coef0, intercept0


def _partial_fit_classes(class_weight, classes, fixed):
    """Return the classes partial_fit works with, refusing class_weight="balanced".

    ``classes`` on the first call (``fixed`` None), ``fixed`` after.
    """
    if isinstance(class_weight, str) and class_weight == "balanced":
        # As scikit-learn's SGDClassifier: one chunk's class frequencies
        # are not the data's, and reweighting per chunk would change
        # the objective from call to call.
        raise ValueError(
            "class_weight='balanced' is not supported by partial_fit: the class "
            "frequencies of one chunk are not those of the whole data. Compute the "
            "weights once, e.g. sklearn.utils.class_weight.compute_class_weight("
            "'balanced', classes=classes, y=y) over all (or a large sample of) the "
            "training labels, and pass class_weight=dict(zip(classes, weights))")
    if fixed is None:
        if classes is None:
            raise ValueError("classes must be given on the first call to partial_fit")
        fixed = np.unique(np.asarray(classes))
        if len(fixed) < 2:
            raise ValueError("classes must list at least 2 classes")
        return fixed
    if classes is not None and not np.array_equal(np.unique(np.asarray(classes)), fixed):
        raise ValueError(
            f"classes={np.unique(classes).tolist()} differs from the classes fixed by "
            f"the first call, {fixed.tolist()}")
    return fixed


class SoftmaxRegression(ClassifierMixin, BaseEstimator):
    """Softmax (multinomial logistic) regression trained with fused kernels.

    Minimises the weighted mean cross-entropy plus ``alpha/2 ||W||²``
    (intercept not penalised). Every solver evaluates the loss and gradient
    with one multithreaded pass over X that never builds the (m, k) matrix
    of probabilities. float32 data is trained in float32.

    ``fit`` (and the predict methods) also accept a dask array chunked by
    rows or a dask DataFrame, with a running ``distributed.Client``
    (``pip install fastsoftmax[dask]``); the blocks stay on the workers.
    newton, lbfgs and bgd then run data-parallel: each evaluation
    broadcasts the weights (or a Newton direction) once, every block returns
    its partial loss, gradient or Hessian product from the same fused
    kernels, and the driver sums them, so the result equals in-memory
    training to rounding. sgd visits the blocks in turn, in a
    shuffled block order each epoch (rows shuffled within each block), the
    model state moving from worker to worker and the data never moving.
    ``early_stopping`` is not supported for dask input. Predictions on
    dask input are lazy dask arrays, computed block by block.

    Parameters
    ----------
    solver : {"auto", "newton", "lbfgs", "sgd", "bgd"}, default="auto"
        ``"auto"``: the full-batch solver that reaches the optimum fastest,
        today ``"newton"`` for every data set (the rule and its benchmark:
        ``fastsoftmax._solvers.choose_solver``). ``"newton"``: truncated
        Newton, conjugate gradients on fused Hessian-vector products and a
        backtracking line search; a few tens of iterations, no learning
        rate. ``"lbfgs"``: scipy's L-BFGS on the full-batch loss; no
        learning rate, more (cheaper) iterations. ``"sgd"``: shuffled
        mini-batch SGD with momentum, one compiled kernel call per epoch;
        ``batch_size=1`` is per-sample SGD. ``"bgd"``: full-batch gradient
        descent with momentum and a backtracking ("adaptive") step.
    alpha : float, default=1e-4
        L2 penalty strength. scikit-learn's ``LogisticRegression(C=C)``
        fitted on m rows has the same optimum as ``alpha = 1 / (C * m)``.
    fit_intercept : bool, default=True
        Learn an unpenalised intercept per class.
    max_iter : int, default=200
        Iterations for newton, lbfgs and bgd, epochs for sgd.
    tol : float, default=1e-4
        newton and lbfgs: stop when the largest entry of the objective's
        gradient is below tol (newton also stops when no step lowers the
        loss any more, the rounding floor of float32 data). sgd and bgd: an
        iteration "improves" when the monitored loss falls by more than tol
        below its best so far.
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
        Weights, Wᵀ in the notation of docs/user_guide/mathematics.rst.
    intercept_ : ndarray of shape (n_classes,)
        Intercept (zeros when ``fit_intercept`` is False).
    classes_ : ndarray of shape (n_classes,)
        Class labels, sorted; any labels (ints, strings).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Present when X had string column names.
    n_iter_ : int
        Iterations (newton, lbfgs, bgd) or epochs (sgd) run by the last fit.
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

    def __init__(self, solver="auto", *, alpha=1e-4, fit_intercept=True, max_iter=200,
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

    # ------------------------------------------------------------------- fit
    def fit(self, X, y, sample_weight=None):
        """Fit the model to X and labels y.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix/array, dask array or dask DataFrame of shape (m, n)
            Training data; float32 trains in float32, anything else in
            float64. Must be finite. Sparse X runs the sparse kernels and is
            never densified (CSR as it is, other formats converted once). A
            dask collection (dense or sparse blocks) is trained on the
            cluster (full-batch solvers data-parallel, sgd block by block;
            see the class docstring).
        y : array-like of shape (m,)
            Class labels (any hashable, sortable labels); at least 2 classes.
        sample_weight : array-like of shape (m,), optional
            Non-negative row weights.

        Returns
        -------
        self
        """
        with _unchanged_on_error(self):
            params = check_params(self)
            if is_dask_collection(X):
                if self.early_stopping:
                    raise ValueError("early_stopping is not supported for dask input; hold "
                                     "out a validation set yourself and use score()")
                data, classes = _dask.training_data(X, y, sample_weight,
                                                    class_weight=self.class_weight)
            else:
                data, classes = training_data(X, y, sample_weight,
                                              class_weight=self.class_weight)
            _record_features(self, X, data.n_features)
            coef0, intercept0 = _start(self, classes, data.n_features, data.dtype)
            rng = _rng(self.random_state)
            validation = None
            if self.early_stopping:
                data, validation = data.split(self.validation_fraction,
                                              int(rng.integers(np.iinfo(np.int32).max)))
            result = self._solve(params, data, coef0, intercept0, rng, validation=validation)
            # Only now, with everything computed, does the model change.
            self.classes_ = classes
            self._store(result, data.dtype)
            self._sgd_state = result.state
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _solve(self, params, data, coef0, intercept0, rng, **kw):
        """Run :func:`solve` with the progress bar that ``verbose`` asks for."""
        if params.solver == "auto":  # the bar names the solver that runs
            params = dataclasses.replace(params, solver=choose_solver(data))
        callback = None
        if self.verbose:
            from ._progress import IterationProgress

            epochs = kw.get("epochs")
            callback = IterationProgress(
                params.max_iter if epochs is None else epochs,
                "sgd" if epochs is not None else params.solver,
                unit="epoch" if params.solver == "sgd" or epochs else "it",
                echo=self.verbose >= 2)
        try:
            return solve(params, data, coef0, intercept0, rng=rng, callback=callback, **kw)
        finally:
            if callback is not None:
                callback.close()

    def _store(self, result, dtype, *, append=False):
        k = result.coef.shape[0]
        self.coef_ = np.ascontiguousarray(result.coef, dtype=dtype)
        self.intercept_ = (result.intercept.astype(dtype) if result.intercept is not None
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
        X : array-like or scipy.sparse matrix/array of shape (m, n)
        y : array-like of shape (m,)
        classes : array-like, optional
            Every class that will ever appear; required on the first call
            and fixed thereafter. Labels outside it are an error.
        sample_weight : array-like of shape (m,), optional

        Returns
        -------
        self
        """
        with _unchanged_on_error(self):
            params = check_params(self)
            first = not hasattr(self, "classes_")
            fixed = _partial_fit_classes(self.class_weight, classes,
                                         None if first else self.classes_)
            data, _ = training_data(X, y, sample_weight, class_weight=self.class_weight,
                                    classes=fixed, dtype=None if first else self.coef_.dtype)
            if first:
                _record_features(self, X, data.n_features)
                state = None
                coef0, intercept0 = _start(self, fixed, data.n_features, data.dtype)
            else:
                validate_data(self, X, reset=False, skip_check_array=True)
                state = self._sgd_state
                if state is None or state.coef.shape != self.coef_.shape:
                    state = SGDState.start(self.coef_, self.intercept_ if self.fit_intercept
                                           else None)
                else:
                    state = state.copy()
                coef0, intercept0 = state.coef, state.intercept_or_none
            result = self._solve(params, data, coef0, intercept0, _rng(self.random_state),
                                 state=state, epochs=1)
            self.classes_ = fixed
            self._store(result, data.dtype, append=not first)
            self._sgd_state = result.state
        return self

    # --------------------------------------------------------------- predict
    def decision_function(self, X):
        """Logits ``X @ coef_.T + intercept_``, shape (m, n_classes).

        For two classes, scikit-learn's convention: the (m,) log-odds of
        ``classes_[1]`` against ``classes_[0]``, positive where class 1 wins.
        A dask X gives a lazy dask array, computed block by block.
        """
        if is_dask_collection(X):
            k = len(self.classes_)
            return _dask.predict_blocks(self.decision_function, X, None if k == 2 else k,
                                        self.coef_.dtype)
        return _prediction.decision_function(self, X)

    def predict_proba(self, X):
        """Class probabilities, shape (m, n_classes); rows sum to 1."""
        if is_dask_collection(X):
            return _dask.predict_blocks(self.predict_proba, X, len(self.classes_),
                                        self.coef_.dtype)
        return _prediction.scores(self, X, _prediction.PROBA)

    def predict_log_proba(self, X):
        """Log class probabilities, computed without log(softmax)."""
        if is_dask_collection(X):
            return _dask.predict_blocks(self.predict_log_proba, X, len(self.classes_),
                                        self.coef_.dtype)
        return _prediction.scores(self, X, _prediction.LOG_PROBA)

    def predict(self, X):
        """Predict the most probable class of each row, shape (m,).

        Allocates only the answer and a few row blocks: the logits are
        computed block by block and never stored for all rows. A dask X
        gives a lazy dask array, computed block by block.
        """
        if is_dask_collection(X):
            return _dask.predict_blocks(self.predict, X, None, self.classes_.dtype)
        idx = _prediction.labels(self, X)  # checks the fit before classes_ is read
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
        _persistence.save(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SoftmaxRegression:
        """Load a model written by :meth:`save`; pickled content is refused."""
        return _persistence.load(cls, path)[0]
