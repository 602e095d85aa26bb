"""Plain NumPy reference implementations.

These follow the formulas of the lecture notes line by line (summarised in
docs/user_guide/mathematics.rst): Z = X W + b, P = softmax(Z), E = P - Y,
grad_W = Xᵀ E / m + alpha W. They allocate the full (m, k) matrices and are
written to be obviously correct, not fast: they are the baseline that the
fused kernels are tested and benchmarked against. Inputs are not validated
beyond what NumPy does.

``loss_and_grad`` and ``sgd_epoch`` also take a scipy.sparse X: the same
lines then run as SciPy's sparse products (X @ W, X.T @ E), and X is never
densified. That is the baseline the sparse kernels are measured against.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse

__all__ = ["softmax", "log_softmax", "logsumexp", "loss_and_grad", "hessp", "one_hot",
           "sgd_epoch"]


def _as_matrix(X):
    """X as an array, or as it is when it is scipy.sparse (kept sparse)."""
    return X if scipy.sparse.issparse(X) else np.asarray(X)


def logsumexp(Z):
    """log(sum(exp(Z), axis=-1)), with the row maximum factored out."""
    Z = np.asarray(Z)
    mx = np.max(Z, axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)  # an all -inf row: log(0) = -inf
    with np.errstate(divide="ignore"):
        return (mx + np.log(np.sum(np.exp(Z - mx), axis=-1, keepdims=True)))[..., 0]


def softmax(Z):
    """exp(Z - max) / sum(exp(Z - max)), row by row."""
    Z = np.asarray(Z)
    E = np.exp(Z - np.max(Z, axis=-1, keepdims=True))
    return E / np.sum(E, axis=-1, keepdims=True)


def log_softmax(Z):
    """Z - logsumexp(Z), row by row."""
    Z = np.asarray(Z)
    return Z - logsumexp(Z)[..., None]


def one_hot(y, k, dtype=np.float64):
    """Return the (m, k) matrix Y with Y[i, y_i] = 1 and zeros elsewhere."""
    Y = np.zeros((len(y), k), dtype=dtype)
    Y[np.arange(len(y)), y] = 1
    return Y


def loss_and_grad(X, y, W, b=None, *, alpha=0.0, sample_weight=None):
    """Mean cross-entropy + alpha/2 ||W||² and its gradients.

    y is labels (m,) or a target matrix (m, k). Returns
    (loss, grad_W, grad_b), grad_b None when b is None. Computed in X's
    dtype, as the fused kernel is. X may be scipy.sparse.
    """
    X = _as_matrix(X)
    W = np.asarray(W, dtype=X.dtype)
    m, k = X.shape[0], W.shape[1]
    y = np.asarray(y)
    Y = one_hot(y, k, X.dtype) if y.ndim == 1 else np.asarray(y, dtype=X.dtype)
    s = np.ones(m, dtype=X.dtype) if sample_weight is None else np.asarray(sample_weight, X.dtype)

    Z = np.asarray(X @ W)                       # logits, m x k
    if b is not None:
        Z = Z + np.asarray(b, dtype=X.dtype)
    P = softmax(Z)                              # probabilities
    E = P - Y                                   # error matrix
    # Cross-entropy through logsumexp, never log(P). Zero targets are
    # skipped so that a -inf logit with zero target adds nothing.
    YZ = np.sum(np.where(Y != 0, Y * Z, 0), axis=1)
    per_row = logsumexp(Z) - YZ
    total = s.sum(dtype=np.float64)
    loss = float(np.dot(s.astype(np.float64), per_row.astype(np.float64)) / total)
    loss += 0.5 * alpha * float(np.sum(W.astype(np.float64) ** 2))
    dZ = E * (s / X.dtype.type(total))[:, None]  # dJ/dZ
    grad_W = np.asarray(X.T @ dZ) + X.dtype.type(alpha) * W
    grad_b = dZ.sum(axis=0) if b is not None else None
    return loss, grad_W, grad_b


def hessp(X, y, W, b, V, c=None, *, alpha=0.0, sample_weight=None):
    """Apply the Hessian of :func:`loss_and_grad`'s objective to (V, c).

    The Hessian with respect to the logits of row i is
    (s_i / Σs)(diag(p_i) - p_i p_iᵀ), whatever the targets, so ``y`` does
    not enter (it is taken for symmetry with :func:`loss_and_grad`). For a
    direction (V, c), V (n, k) and c (k,):

        U = X V + c                     the direction's logits, m x k
        S_i = (s_i/Σs)(p_i ⊙ u_i - p_i (p_i · u_i))
        H (V, c) = (Xᵀ S + alpha V, column sums of S)

    Returns (HV (n, k), Hc (k,)); Hc is None when b is None (no intercept:
    c must then be None too). c None with an intercept is the direction
    (V, 0). Computed in X's dtype.
    """
    del y  # the Hessian does not depend on the targets
    X = _as_matrix(X)
    dt = X.dtype
    W = np.asarray(W, dtype=dt)
    V = np.asarray(V, dtype=dt)
    m = X.shape[0]
    if b is None and c is not None:
        raise ValueError("c given for a model without intercept")
    s = np.ones(m, dtype=dt) if sample_weight is None else np.asarray(sample_weight, dt)
    d = (s / dt.type(s.sum(dtype=np.float64)))[:, None]   # w_i / Σw, m x 1

    Z = X @ W                                   # logits, m x k
    if b is not None:
        Z = Z + np.asarray(b, dtype=dt)
    P = softmax(Z)                              # probabilities
    U = X @ V                                   # the direction's logits
    if c is not None:
        U = U + np.asarray(c, dtype=dt)
    PU = np.sum(P * U, axis=1, keepdims=True)   # p_i · u_i
    S = d * (P * U - P * PU)                    # H_z applied to u_i, row by row
    HV = X.T @ S + dt.type(alpha) * V
    Hc = S.sum(axis=0) if b is not None else None
    return HV, Hc


def sgd_epoch(X, y, W, b, order, *, batch_size, eta, alpha=0.0, momentum=0.0,
              nesterov=False, VW=None, Vb=None, sample_weight=None, fit_intercept=True):
    """One epoch of mini-batch SGD, a plain NumPy loop over the batches.

    The lecture notes' update, W <- W - eta * (Xᵦᵀ (Pᵦ - Yᵦ) / B + alpha W),
    with optional (Nesterov) momentum; rows are visited in ``order``. With
    sample weights each row's error is multiplied by w_i / mean(w). y is
    labels (m,) or a target matrix (m, k); X may be scipy.sparse. W, b, VW
    and Vb are updated in place (b only when ``fit_intercept``); returns
    (W, b).
    """
    X = _as_matrix(X)
    y = np.asarray(y)
    m, k = X.shape[0], W.shape[1]
    s = np.ones(m, X.dtype) if sample_weight is None else np.asarray(sample_weight, X.dtype)
    s = s / s.astype(np.float64).mean()
    VW = np.zeros_like(W) if VW is None else VW
    Vb = np.zeros_like(b) if Vb is None else Vb
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        Xb = X[rows]
        P = softmax(np.asarray(Xb @ W) + b)
        Y = one_hot(y[rows], k, X.dtype) if y.ndim == 1 else y[rows].astype(X.dtype)
        E = (P - Y) * s[rows, None].astype(X.dtype)
        gW = np.asarray(Xb.T @ E) / len(rows) + alpha * W
        gb = E.sum(axis=0) / len(rows)
        VW *= momentum
        VW -= eta * gW
        if fit_intercept:
            Vb *= momentum
            Vb -= eta * gb
        if nesterov:
            W += momentum * VW - eta * gW
            if fit_intercept:
                b += momentum * Vb - eta * gb
        else:
            W += VW
            if fit_intercept:
                b += Vb
    return W, b
