"""The model behind the estimator, without scikit-learn.

:class:`SoftmaxModel` holds everything :class:`~fastsoftmax.SoftmaxRegression`
does -- parameters, ``fit``, ``partial_fit``, the predict methods, ``save``
and ``load`` -- and imports nothing from scikit-learn at module level
(only on error and warning paths). It exists so that the command line can
train and predict without importing scikit-learn, which alone costs about
a second of every command's start-up. ``SoftmaxRegression`` is this class
plus scikit-learn's ``BaseEstimator`` and ``ClassifierMixin`` (parameters,
cloning, ``score``, tags) and scikit-learn's feature-name checks.

It only orchestrates: its parameters are checked into a
:class:`~fastsoftmax._params.SolverParams`, the raw data goes once through
the edge into a :class:`~fastsoftmax._data.Dataset` (or the Dask layer's
distributed data), :func:`fastsoftmax._solvers.solve` fits, and the result
is stored. The predict methods dispatch dask input and call
:mod:`fastsoftmax._prediction`. All arithmetic happens in the kernels;
model files are :mod:`fastsoftmax._persistence`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os

import numpy as np

from . import _persistence, _prediction
from ._data import training_data
from ._params import check_params
from ._validation import is_dask_collection

# The solvers (with the compiled kernels, and Numba) and the Dask layer are
# imported where a fit or dask input needs them: loading a model and
# predicting labels of dense data imports neither (the command line's
# ``predict`` starts about 0.2 s sooner).

__all__ = ["SoftmaxModel"]


@contextlib.contextmanager
def _unchanged_on_error(est):
    """Restore every attribute of ``est`` if the block raises.

    ``n_features_in_`` and ``feature_names_in_`` are recorded as soon as
    X has been seen (scikit-learn's ``validate_data(reset=True)`` does so in
    :class:`~fastsoftmax.SoftmaxRegression`), and a solver can still fail
    after that; this makes a rejected ``fit``/``partial_fit``
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


class SoftmaxModel:
    """Softmax regression without scikit-learn: :class:`~fastsoftmax.SoftmaxRegression`'s engine.

    The parameters, attributes and methods are
    :class:`~fastsoftmax.SoftmaxRegression`'s (documented there). Features
    are recorded and checked by their count and, for a pandas DataFrame,
    their string column names; ``SoftmaxRegression`` replaces both checks
    with scikit-learn's.
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

    @classmethod
    def _param_names(cls):
        return [p for p in inspect.signature(SoftmaxModel.__init__).parameters
                if p != "self"]

    def get_params(self, deep=True):
        """Return the constructor parameters by name (scikit-learn's ``get_params``)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set constructor parameters by name (scikit-learn's ``set_params``, without nesting)."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for estimator {self}. "
                                 f"Valid parameters are: {sorted(valid)!r}.")
            setattr(self, name, value)
        return self

    # ---------------------------------------------------------- feature checks
    def _record_features(self, X, n_features):
        """Record ``n_features_in_`` and, for string column names, ``feature_names_in_``."""
        names = getattr(X, "columns", None)
        self.n_features_in_ = n_features
        if names is not None and len(names) and all(isinstance(c, str) for c in names):
            self.feature_names_in_ = np.asarray(list(names), dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_

    def _check_features(self, X):
        """Refuse X whose number of columns is not the fitted model's."""
        n = X.shape[1] if len(getattr(X, "shape", ())) == 2 else None
        if n is not None and n != self.n_features_in_:
            raise ValueError(f"X has {n} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")

    def _check_fitted(self):
        """Raise scikit-learn's NotFittedError unless fit has stored the model."""
        if not all(hasattr(self, a) for a in ("coef_", "intercept_", "classes_")):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this estimator.")

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
                from . import _dask

                data, classes = _dask.training_data(X, y, sample_weight,
                                                    class_weight=self.class_weight)
            else:
                data, classes = training_data(X, y, sample_weight,
                                              class_weight=self.class_weight)
            self._record_features(X, data.n_features)
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

    def _solve(self, params, data, coef0, intercept0, rng, **kw):
        """Run :func:`solve` with the progress bar that ``verbose`` asks for."""
        from ._solvers import choose_solver, solve

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
                self._record_features(X, data.n_features)
                state = None
                coef0, intercept0 = _start(self, fixed, data.n_features, data.dtype)
            else:
                self._check_features(X)
                state = self._sgd_state
                if state is None or state.coef.shape != self.coef_.shape:
                    from ._solvers import SGDState

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
            from . import _dask

            return _dask.predict_blocks(self.decision_function, X, None if k == 2 else k,
                                        self.coef_.dtype)
        return _prediction.decision_function(self, X)

    def predict_proba(self, X):
        """Class probabilities, shape (m, n_classes); rows sum to 1."""
        if is_dask_collection(X):
            from . import _dask

            return _dask.predict_blocks(self.predict_proba, X, len(self.classes_),
                                        self.coef_.dtype)
        return _prediction.scores(self, X, "proba")

    def predict_log_proba(self, X):
        """Log class probabilities, computed without log(softmax)."""
        if is_dask_collection(X):
            from . import _dask

            return _dask.predict_blocks(self.predict_log_proba, X, len(self.classes_),
                                        self.coef_.dtype)
        return _prediction.scores(self, X, "log_proba")

    def predict(self, X):
        """Predict the most probable class of each row, shape (m,).

        Allocates only the answer and a few row blocks: the logits are
        computed block by block and never stored for all rows. A dask X
        gives a lazy dask array, computed block by block.
        """
        if is_dask_collection(X):
            from . import _dask

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
        self._check_fitted()
        _persistence.save(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SoftmaxModel:
        """Load a model written by :meth:`save`; pickled content is refused."""
        return _persistence.load(cls, path)[0]
