"""Stochastic gradient descent: one whole epoch per kernel call.

The epoch runs in compiled code, so there is no Python-level work per
sample or per mini-batch. Rows are visited in the order given by ``order``
(the caller's per-epoch shuffle) in consecutive mini-batches of
``batch_size`` rows; batch_size 1 is the lecture notes' per-sample SGD.

For each mini-batch B the gradient of the objective estimate

    J_B = scale * sum_{i in B} w_i * CE_i + alpha/2 ||W||²

is formed (the caller's ``scale`` = m / sum(w), divided here by |B|, makes
J_B an unbiased estimate of the full weighted-mean objective) and the
weights move by

    v <- momentum * v - eta_t * grad;   W <- W + v            (heavy ball)
    W <- W + momentum * v - eta_t * grad                       (Nesterov)

with eta_t from the schedule (constant, or eta0 / (1 + t/steps)^power_t,
which decays with the number of epochs seen).

Weights are stored transposed, (k, n), so that every inner loop runs along
contiguous features. Mini-batches of at least ``parallel_min`` rows are split
across threads (per-chunk partial gradients, serial reduction); smaller ones
run on one thread, because a parallel launch per batch would cost more than
the batch.
"""

import numpy as np
from numba import njit, prange

from ._config import JIT, PJIT
from ._softmax import _chunk

SCHEDULE_CONSTANT = 0
SCHEDULE_INVSCALING = 1


@njit(inline="always", **JIT)
def _row_error(x, i, Wt, b, y, Y, soft, z):
    """Logits of row x into z, then z <- softmax(z) - Y_i.

    Returns (cross-entropy of the row, ok); ok is False when the logits are
    not finite (the weights have diverged).
    """
    k, n = Wt.shape
    for j in range(k):
        w = Wt[j]
        a = b[j]
        for f in range(n):
            a += w[f] * x[f]
        z[j] = a
    mx = z[0]
    for j in range(1, k):
        if z[j] > mx:
            mx = z[j]
    if not np.isfinite(mx):
        return np.inf, False
    if soft:
        yz = z.dtype.type(0)
        for j in range(k):
            t = Y[i, j]
            if t != 0:
                yz += t * (z[j] - mx)
    else:
        yz = z[y[i]] - mx
    s = z.dtype.type(0)
    for j in range(k):
        e = np.exp(z[j] - mx)
        z[j] = e
        s += e
    inv = z.dtype.type(1) / s
    for j in range(k):
        z[j] *= inv
    if soft:
        for j in range(k):
            z[j] -= Y[i, j]
    else:
        z[y[i]] -= 1
    return np.log(s) - yz, True


@njit(inline="always", **JIT)
def _accumulate(x, e, coef, G, gb):
    """G += coef * e xᵀ and gb += coef * e (one row's gradient)."""
    k, n = G.shape
    for j in range(k):
        ej = coef * e[j]
        g = G[j]
        for f in range(n):
            g[f] += ej * x[f]
        gb[j] += ej


@njit(**PJIT)
def _sgd_epoch(X, y, Y, sw, soft, weighted, order, batch_size, scale,
               Wt, b, fit_intercept, alpha, VWt, Vb, momentum, nesterov,
               eta0, schedule, power_t, t0, steps_per_epoch, parallel_min,
               gWt, gb, z, loss_out):
    """Run one epoch in place on Wt, b, VWt, Vb.

    gWt (n_chunks, k, n), gb (n_chunks, k) and z (n_chunks, k) are scratch.
    loss_out[0] receives the sum of w_i * CE_i over the epoch, each row
    evaluated with the weights in force when its batch was processed.
    Returns the number of updates made, or -(updates + 1) if the logits of
    the next batch were not finite (the caller restores its snapshot).
    """
    m = order.shape[0]
    k, n = Wt.shape
    n_chunks = gWt.shape[0]
    one = Wt.dtype.type(1)
    zero = Wt.dtype.type(0)
    mu = Wt.dtype.type(momentum)
    a = Wt.dtype.type(alpha)
    total = 0.0
    t = t0
    n_steps = 0
    G = gWt[0]
    g0 = gb[0]
    ok_parts = np.ones(n_chunks, dtype=np.bool_)
    loss_parts = np.zeros(n_chunks, dtype=np.float64)
    for start in range(0, m, batch_size):
        stop = min(m, start + batch_size)
        bs = stop - start
        if schedule == SCHEDULE_INVSCALING:
            eta = Wt.dtype.type(eta0 / (1.0 + t / steps_per_epoch) ** power_t)
        else:
            eta = Wt.dtype.type(eta0)
        coef_base = Wt.dtype.type(scale / bs)
        # ---- gradient of the batch -------------------------------------
        if bs >= parallel_min and n_chunks > 1:
            for c in prange(n_chunks):
                lo, hi = _chunk(bs, n_chunks, c)
                Gc = gWt[c]
                Gc[:] = zero
                gbc = gb[c]
                gbc[:] = zero
                zc = z[c]
                part = 0.0
                ok = True
                for p in range(start + lo, start + hi):
                    i = order[p]
                    ce, ok = _row_error(X[i], i, Wt, b, y, Y, soft, zc)
                    if not ok:
                        break
                    w = sw[i] if weighted else one
                    part += w * ce
                    _accumulate(X[i], zc, coef_base * w, Gc, gbc)
                ok_parts[c] = ok
                loss_parts[c] = part
            if not ok_parts.all():
                return -(n_steps + 1)
            for c in range(1, n_chunks):
                G += gWt[c]
                g0 += gb[c]
            total += loss_parts.sum()
        else:
            G[:] = zero
            g0[:] = zero
            zc = z[0]
            for p in range(start, stop):
                i = order[p]
                ce, ok = _row_error(X[i], i, Wt, b, y, Y, soft, zc)
                if not ok:
                    return -(n_steps + 1)
                w = sw[i] if weighted else one
                total += w * ce
                _accumulate(X[i], zc, coef_base * w, G, g0)
        # ---- update, with the L2 term and momentum fused ----------------
        for j in range(k):
            wj = Wt[j]
            vj = VWt[j]
            gj = G[j]
            for f in range(n):
                g = gj[f] + a * wj[f]
                v = mu * vj[f] - eta * g
                vj[f] = v
                if nesterov:
                    wj[f] += mu * v - eta * g
                else:
                    wj[f] += v
            if fit_intercept:
                g = g0[j]
                v = mu * Vb[j] - eta * g
                Vb[j] = v
                if nesterov:
                    b[j] += mu * v - eta * g
                else:
                    b[j] += v
        t += 1
        n_steps += 1
    loss_out[0] = total
    return n_steps
