"""The scikit-learn-compatible estimator.

:class:`SoftmaxRegression` is :class:`~fastsoftmax._model.SoftmaxModel`
(parameters, ``fit``, ``partial_fit``, the predict methods, ``save`` and
``load``) with scikit-learn's ``BaseEstimator`` and ``ClassifierMixin``
(``get_params``/``set_params``, cloning, ``score``, tags) and scikit-learn's
own checks of the features' count and names (``validate_data``). The
command line uses ``SoftmaxModel`` itself, which never imports
scikit-learn on a successful run.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import validate_data

from ._model import SoftmaxModel
from ._validation import is_dask_collection

__all__ = ["SoftmaxRegression"]


class SoftmaxRegression(ClassifierMixin, BaseEstimator, SoftmaxModel):
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

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _record_features(self, X, n_features):
        """Record n_features_in_ and feature_names_in_ by scikit-learn's rules."""
        if is_dask_collection(X):  # validate_data would compute the collection
            super()._record_features(X, n_features)
            return
        validate_data(self, X, reset=True, skip_check_array=True)

    def _check_features(self, X):
        """scikit-learn's checks of X's features against the fitted ones (count, names)."""
        if type(X) is np.ndarray and getattr(self, "feature_names_in_", None) is None:
            # A plain array against a model fitted without names: scikit-learn's
            # check is the count alone, with the same message, after probing X
            # for a dataframe (about a third of a small prediction's time).
            SoftmaxModel._check_features(self, X)
            return
        validate_data(self, X, reset=False, skip_check_array=True)
