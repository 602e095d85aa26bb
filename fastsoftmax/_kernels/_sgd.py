"""Stochastic gradient descent: one whole epoch per kernel call.

The epoch runs in compiled code, so there is no Python-level work per
sample or per mini-batch. Rows are visited in the order given by ``order``
(the caller's per-epoch shuffle) in consecutive mini-batches of
``batch_size`` rows; batch_size 1 is the lecture notes' per-sample SGD.

For each mini-batch B the gradient of the objective estimate

    J_B = row_scale / |B| * sum_{i in B} w_i * CE_i + alpha/2 ||W||²

is formed (the caller's ``row_scale`` = m / sum(w), divided here by |B|, makes
J_B an unbiased estimate of the full weighted-mean objective) and the
weights move by

    v <- momentum * v - eta_t * grad;   W <- W + v            (heavy ball)
    W <- W + momentum * v - eta_t * grad                       (Nesterov)

with eta_t from the schedule (constant, or eta0 / (1 + t/steps)^power_t,
which decays with the number of epochs seen).

Weights are stored transposed, (k, n), so that every inner loop runs along
contiguous features. The per-row arithmetic is the fused gradient's
(:mod:`._fused`): the 4 rows x 3 classes register-blocked micro-kernels
(given the rows' indices in the shuffled order) and the per-row softmax
error with its finiteness test of every logit. Per-sample SGD (B = 1)
skips the gradient buffer: the update is applied directly from the row's
error and x, in one pass over W. Mini-batches of at least ``PARALLEL_MIN_ROWS``
rows are split across threads (per-chunk partial gradients, serial
reduction); smaller ones run on one thread, because a parallel launch per
batch would cost more than the batch.
"""

from collections import namedtuple

import numpy as np
from numba import njit, prange

from ._common import _chunk, _zero1, _zero2
from ._config import JIT, PJIT
from ._fused import _error4, _row_error
from ._micro import _accumulate1, _accumulate4, _logits1, _logits4

SCHEDULE_CONSTANT = 0
SCHEDULE_INVSCALING = 1

# The epoch's hyper-parameters, one argument of the kernel (Numba types a
# namedtuple field by field; make them with sgd_hyper so that every call
# has the same field types and reuses one compiled specialisation).
SGDHyper = namedtuple("SGDHyper", ["alpha", "momentum", "eta0", "power_t", "t0",
                                   "steps_per_epoch", "schedule", "nesterov",
                                   "fit_intercept"])


def sgd_hyper(*, alpha, momentum, eta0, power_t, t0, steps_per_epoch, schedule, nesterov,
              fit_intercept):
    """Return an SGDHyper with the field types the kernel is compiled for."""
    return SGDHyper(float(alpha), float(momentum), float(eta0), float(power_t), int(t0),
                    int(steps_per_epoch), int(schedule), bool(nesterov), bool(fit_intercept))


# Batches of fewer rows run on one thread whatever their work: a parallel
# launch per batch costs more than a few rows.
PARALLEL_MIN_ROWS = 32

# A batch is split across threads only if it holds at least this many
# multiply-adds per product (B n k) as well as PARALLEL_MIN_ROWS rows: below
# it a parallel launch per batch costs more than it saves. A batch of 64
# MNIST rows (0.5 M multiply-adds) is split: on the 2-core AMD host a B = 64
# epoch took about 25 % less time split than on one thread (float64,
# interleaved runs; BENCHMARKS.md, "Fifth session").
PARALLEL_WORK = 1 << 18

# ...and a split batch gives each thread at least this many rows: every
# chunk's partial gradient (k n entries) is added serially after the
# parallel part, so on many cores a batch of 64 cut into one piece per
# thread would spend more in that sum than in its share of the rows
# (16 cores: 16 sums of k n for 4 rows each).
MIN_CHUNK_ROWS = 16


# The epoch kernel is compiled with parallel=True for its prange over the
# chunks of a large batch, and Numba turns every array expression (a[:] = 0,
# a += b, a.sum(), a.all()) in such a function into a parallel region of its
# own: one thread launch per sample or per batch, which at batch size 1 cost
# more than the sample itself. Outside the prange, arrays are therefore
# zeroed, added and reduced with explicit loops (_zero1, _zero2).


@njit(inline="always", **JIT)
def _eta(schedule, eta0, t, steps_per_epoch, power_t):
    """Return the step size (float64) of update t.

    eta0, or eta0 / (1 + t / steps_per_epoch) ** power_t for
    SCHEDULE_INVSCALING. Shared with the CSR epoch.
    """
    if schedule == SCHEDULE_INVSCALING:
        return eta0 / (1.0 + t / steps_per_epoch) ** power_t
    return eta0


@njit(inline="always", **JIT)
def _intercept_step(b, Vb, gb, mu, eta, nesterov):
    """b, Vb <- one (heavy-ball or Nesterov) momentum step on the intercept.

    gb is the intercept's gradient (unpenalised). Shared with the CSR epoch.
    """
    for j in range(b.shape[0]):
        g = gb[j]
        v = mu * Vb[j] - eta * g
        Vb[j] = v
        if nesterov:
            b[j] += mu * v - eta * g
        else:
            b[j] += v


# Not inline="always": inlined at Numba's IR level into both call sites of
# the parallel epoch kernel (inside and outside the prange), the parfor
# passes run over the whole unrolled 4 x 3 micro-kernel code twice and the
# cold compile takes ten times longer; one plain call per batch costs
# nothing measurable (BENCHMARKS.md, "compile time").
@njit(**JIT)
def _batch_gradient(X, y, Y, sw, soft, weighted, order, lo, hi, coef, Wt, b,
                    G, gb, z4, bits):
    """G, gb <- the scaled gradient sums of the rows order[lo:hi].

    SCRATCH z4 (4, k), bits (4 k,): as in ``_fused._rows_chunk``.

    Returns (sum of w_i * CE_i, ok); ok is False when a row's logits are not
    finite (then G is incomplete and the caller abandons the epoch).
    """
    _zero2(G)
    _zero1(gb)
    total = 0.0
    p = lo
    while p + 4 <= hi:
        i0 = order[p]
        i1 = order[p + 1]
        i2 = order[p + 2]
        i3 = order[p + 3]
        _logits4(X, i0, i1, i2, i3, Wt, b, z4)
        part, bad = _error4(z4, i0, i1, i2, i3, y, Y, sw, soft, weighted, coef, gb, bits)
        if bad >= 0:
            return total, False
        total += part
        _accumulate4(X, i0, i1, i2, i3, z4, G)
        p += 4
    # The last r = (hi - lo) mod 4 rows: one block of r rows (the indices
    # past them repeat the last one and are not read).
    r = hi - p
    if r > 0:
        last = hi - 1
        for q in range(r):
            _logits1(X[order[p + q]], Wt, b, z4[q])
        part, bad = _error4(z4[:r], order[p], order[min(p + 1, last)], order[min(p + 2, last)],
                            order[min(p + 3, last)], y, Y, sw, soft, weighted, coef, gb, bits)
        if bad >= 0:
            return total, False
        total += part
        for q in range(r):
            _accumulate1(X[order[p + q]], z4[q], G)
    return total, True


@njit(inline="always", **JIT)
def _update(Wt, VWt, G, x, e, use_row, a, mu, eta, nesterov):
    """W, V <- one (heavy-ball or Nesterov) momentum step, L2 term fused.

    The gradient of W is G, or, when ``use_row`` (B = 1), the outer product
    e xᵀ of one row's error and features formed on the fly (no G pass).
    """
    k, n = Wt.shape
    for j in range(k):
        wj = Wt[j]
        vj = VWt[j]
        if use_row:
            ej = e[j]
            if nesterov:
                for f in range(n):
                    g = ej * x[f] + a * wj[f]
                    v = mu * vj[f] - eta * g
                    vj[f] = v
                    wj[f] += mu * v - eta * g
            else:
                for f in range(n):
                    g = ej * x[f] + a * wj[f]
                    v = mu * vj[f] - eta * g
                    vj[f] = v
                    wj[f] += v
        else:
            gj = G[j]
            if nesterov:
                for f in range(n):
                    g = gj[f] + a * wj[f]
                    v = mu * vj[f] - eta * g
                    vj[f] = v
                    wj[f] += mu * v - eta * g
            else:
                for f in range(n):
                    g = gj[f] + a * wj[f]
                    v = mu * vj[f] - eta * g
                    vj[f] = v
                    wj[f] += v


@njit(inline="always", **JIT)
def _update_row_then_logits(Wt, VWt, x, e, xn, zn, a, mu, eta, nesterov):
    """Per-sample step fused with the next sample's forward pass.

    W, V <- one momentum step with the gradient e xᵀ + a W (formed on the
    fly), and, in the same sweep over W, zn[j] = W_new[j] . xn: the logits
    (without the intercept) of the next row under the updated weights --
    exactly what the next step would compute, but W is read from the cache
    once per sample instead of twice (W and V of MNIST size do not fit in
    L1 together, so per-sample SGD is bound by these sweeps).
    """
    k, n = Wt.shape
    zero = Wt.dtype.type(0)
    for j in range(k):
        wj = Wt[j]
        vj = VWt[j]
        ej = e[j]
        acc = zero
        if nesterov:
            for f in range(n):
                g = ej * x[f] + a * wj[f]
                v = mu * vj[f] - eta * g
                vj[f] = v
                w = wj[f] + (mu * v - eta * g)
                wj[f] = w
                acc += w * xn[f]
        else:
            for f in range(n):
                g = ej * x[f] + a * wj[f]
                v = mu * vj[f] - eta * g
                vj[f] = v
                w = wj[f] + v
                wj[f] = w
                acc += w * xn[f]
        zn[j] = acc


@njit(inline="always", **JIT)
def _step_row_then_logits(Wt, x, e, xn, zn, a, eta):
    """:func:`_update_row_then_logits` without momentum: W <- W - eta (e xᵀ + a W).

    The velocity is neither read nor written: with momentum 0 it plays no
    part in the step, and W alone fits the cache better than W and V
    together (per-sample SGD is bound by these sweeps). The epoch's last
    step, never fused, goes through :func:`_update` and leaves V as the
    momentum path leaves it (-eta times the last gradient).
    """
    k, n = Wt.shape
    zero = Wt.dtype.type(0)
    for j in range(k):
        wj = Wt[j]
        ej = e[j]
        acc = zero
        for f in range(n):
            w = wj[f] - eta * (ej * x[f] + a * wj[f])
            wj[f] = w
            acc += w * xn[f]
        zn[j] = acc


@njit(**PJIT)
def _sgd_epoch(X, y, Y, sw, soft, weighted, order, batch_size, row_scale, hyper,
               Wt, b, VWt, Vb, gWt, gb, loss_out):
    """Run one epoch in place on the state (Wt, b, VWt, Vb).

    IN: X (m, n); y, Y, sw, soft, weighted as in :mod:`._fused`; order (m,)
    the rows in visiting order; batch_size; row_scale = m / sum(w) (1 / the
    mean weight); hyper an :data:`SGDHyper`.
    IN/OUT: Wt (k, n) weights, b (k,) intercept (left at 0 unless
    hyper.fit_intercept), VWt (k, n) and Vb (k,) velocities.
    SCRATCH: gWt (n_chunks, k, n), gb (n_chunks, k) per-chunk gradients.
    OUT: loss_out[0], the sum of w_i * CE_i over the epoch, each row
    evaluated with the weights in force when its batch was processed.

    Returns the number of updates made, or -(updates + 1) if the logits of
    a batch were not finite (the state is then partly updated: the caller
    restores its snapshot).
    """
    m = order.shape[0]
    k, n = Wt.shape
    n_chunks = gWt.shape[0]
    mu = Wt.dtype.type(hyper.momentum)
    a = Wt.dtype.type(hyper.alpha)
    nesterov = hyper.nesterov
    total = 0.0
    t = hyper.t0
    n_steps = 0
    G = gWt[0]
    g0 = gb[0]
    scratch = np.empty((n_chunks, 8, k), dtype=Wt.dtype)
    ok_parts = np.empty(n_chunks, dtype=np.bool_)
    loss_parts = np.empty(n_chunks, dtype=np.float64)
    have_logits = False
    for start in range(0, m, batch_size):
        stop = min(m, start + batch_size)
        bs = stop - start
        eta = Wt.dtype.type(_eta(hyper.schedule, hyper.eta0, t, hyper.steps_per_epoch,
                                 hyper.power_t))
        coef = Wt.dtype.type(row_scale / bs)
        e = scratch[0, 0]
        use_row = bs == 1
        # ---- gradient of the batch -------------------------------------
        if use_row:
            # Per-sample SGD: the row's error e is all the gradient there is
            # (G = e xᵀ is applied inside the update, never stored). The
            # logits come from the previous step's fused sweep, except for
            # the first row of the epoch.
            i = order[start]
            x = X[i]
            if not have_logits:
                _logits1(x, Wt, b, e)
            _zero1(g0)
            ce, ok = _row_error(e, i, y, Y, sw, soft, weighted, coef, g0, scratch[0, 4])
            if not ok:
                return -(n_steps + 1)
            total += ce
        elif bs >= PARALLEL_MIN_ROWS and n_chunks > 1 and bs * n * k >= PARALLEL_WORK:
            used = min(n_chunks, bs // MIN_CHUNK_ROWS)
            for c in prange(used):
                lo, hi = _chunk(bs, used, c)
                part, ok = _batch_gradient(X, y, Y, sw, soft, weighted, order,
                                           start + lo, start + hi, coef, Wt, b,
                                           gWt[c], gb[c], scratch[c, :4],
                                           scratch[c, 4:].reshape(4 * k))
                ok_parts[c] = ok
                loss_parts[c] = part
            for c in range(used):
                if not ok_parts[c]:
                    return -(n_steps + 1)
                total += loss_parts[c]
            for c in range(1, used):
                Gc = gWt[c]
                gbc = gb[c]
                for j in range(k):
                    g0[j] += gbc[j]
                    for f in range(n):
                        G[j, f] += Gc[j, f]
        else:
            part, ok = _batch_gradient(X, y, Y, sw, soft, weighted, order, start, stop,
                                       coef, Wt, b, G, g0, scratch[0, :4],
                                       scratch[0, 4:].reshape(4 * k))
            if not ok:
                return -(n_steps + 1)
            total += part
        # ---- update, with the L2 term and momentum fused ----------------
        i = order[start]
        fuse_next = use_row and stop < m and batch_size == 1
        if fuse_next:
            zn = scratch[0, 1]
            if hyper.momentum != 0.0:
                _update_row_then_logits(Wt, VWt, X[i], e, X[order[stop]], zn, a, mu, eta,
                                        nesterov)
            else:
                _step_row_then_logits(Wt, X[i], e, X[order[stop]], zn, a, eta)
        else:
            _update(Wt, VWt, G, X[i], e, use_row, a, mu, eta, nesterov)
        if hyper.fit_intercept:
            _intercept_step(b, Vb, g0, mu, eta, nesterov)
        if fuse_next:
            for j in range(k):
                e[j] = zn[j] + b[j]
        have_logits = fuse_next
        t += 1
        n_steps += 1
    loss_out[0] = total
    return n_steps
