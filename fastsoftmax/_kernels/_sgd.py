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
error with its finiteness test of every logit; rows a few places ahead
in the order are prefetched (``AHEAD_ROWS``). Per-sample SGD (B = 1)
skips the gradient buffer and makes two steps per sweep over W
(:func:`_per_sample_epoch`). Mini-batches are split across threads: by
rows (per-part partial gradients, summed and applied by one thread;
:func:`_sgd_epoch`; from ``PARALLEL_MIN_ROWS`` rows), or, where a batch's
rows are short against its features (n >= ``FEATURE_SPLIT_RATIO`` B), by
features (each thread updates its own columns of W;
:func:`_feature_split_epoch`; from ``FEATURE_SPLIT_MIN_ROWS`` rows).
Either way the whole epoch is one parallel region whose threads hand the
batches on through atomic flags (:mod:`._atomic`). Smaller batches, and
batches of little work (``ROW_SPLIT_WORK``, ``PARALLEL_WORK``), run on one
thread: a hand-over per batch would cost more than the batch saves.
"""

from collections import namedtuple

import numpy as np
from numba import njit, prange

from ._ahead import logits4_cols, prefetch_row
from ._atomic import fetch_add, publish, try_take, wait_nonzero
from ._backward import accumulate4_cols, accumulate4_gather_ahead
from ._common import _chunk, _zero1, _zero2
from ._config import JIT, PJIT
from ._fused import _block_error_t, _error4, _row_error
from ._micro import _accumulate1, _logits1
from ._width import _wide_vectors

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


# Batches of fewer rows are not split by rows whatever their work.
PARALLEL_MIN_ROWS = 32

# A batch is split by features only if it holds at least this many
# multiply-adds per product (B n k) as well as FEATURE_SPLIT_MIN_ROWS rows:
# the bound was set when every batch opened a parallel region, which cost
# more than a smaller batch saved (lower bounds were slower at 300
# features even in one region: FEATURE_SPLIT_MIN_ROWS). A batch of 64
# MNIST rows (0.5 M multiply-adds) is split: on the 2-core AMD host a B = 64
# epoch took about 25 % less time split than on one thread (float64,
# interleaved runs; BENCHMARKS.md, "Fifth session").
PARALLEL_WORK = 1 << 18

# Batches split by rows hand their parts between threads inside one
# parallel region per epoch (:func:`_sgd_epoch`), at a fraction of a
# region's cost, so they are split from far less work. B = 64 on 2 cores
# against one thread (versions.py sgd64, 300,000 rows): 0.66-0.84x the
# time at 3,200-5,120 multiply-adds a batch, 0.81-0.88x at 10,240-64,000,
# 1.01-1.02x at 2,560 (BENCHMARKS.md, "Thirty-fourth session").
ROW_SPLIT_WORK = 1 << 12

# ...and a split batch gives each thread at least this many rows: every
# chunk's partial gradient (k n entries) is added serially after the
# parallel part, so on many cores a batch of 64 cut into one piece per
# thread would spend more in that sum than in its share of the rows
# (16 cores: 16 sums of k n for 4 rows each).
MIN_CHUNK_ROWS = 16

# An epoch reads X's rows in shuffled order, which the hardware's
# prefetchers cannot follow from one row to the next. So the kernels ask
# for the rows ahead (:func:`._ahead.prefetch_row`, into L2): each block of
# four rows of a batch, for the block AHEAD_ROWS further on in the order
# (into the next batch at a batch's end); each pair of per-sample steps,
# for the pair PAIR_AHEAD_ROWS further on. Ad hoc at the MNIST shape, one
# thread, float32: the feature-split epoch's logits and updates of 939
# batches of 64 took 36 ms without, 32 ms with 8 to 32 rows ahead (33 ms
# at 128); per-sample epochs 0.8x the time with 4 or 8 rows ahead (2 was
# too late). BENCHMARKS.md, "Twenty-fourth session".
AHEAD_ROWS = 16
PAIR_AHEAD_ROWS = 4


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
                    G, gb, z4):
    """G, gb <- the scaled gradient sums of the rows order[lo:hi].

    SCRATCH z4 (4, k): as in ``_fused._rows_chunk``.

    Returns (sum of w_i * CE_i, ok); ok is False when a row's logits are not
    finite (then G is incomplete and the caller abandons the epoch).
    """
    _zero2(G)
    _zero1(gb)
    total = 0.0
    m = order.shape[0]
    n = X.shape[1]
    p = lo
    while p + 4 <= hi:
        i0 = order[p]
        i1 = order[p + 1]
        i2 = order[p + 2]
        i3 = order[p + 3]
        for ahead in range(p + AHEAD_ROWS, min(m, p + AHEAD_ROWS + 4)):
            prefetch_row(X, order[ahead], 0, n)
        logits4_cols(X, i0, i1, i2, i3, Wt, b, z4, 0, 0, n)
        part, bad = _error4(z4, i0, i1, i2, i3, y, Y, sw, soft, weighted, coef, gb)
        if bad >= 0:
            return total, False
        total += part
        accumulate4_cols(X, i0, i1, i2, i3, z4, 0, G, 0, n)
        p += 4
    # The last r = (hi - lo) mod 4 rows: one block of r rows (the indices
    # past them repeat the last one and are not read).
    r = hi - p
    if r > 0:
        last = hi - 1
        for q in range(r):
            _logits1(X[order[p + q]], Wt, b, z4[q])
        part, bad = _error4(z4[:r], order[p], order[min(p + 1, last)], order[min(p + 2, last)],
                            order[min(p + 3, last)], y, Y, sw, soft, weighted, coef, gb)
        if bad >= 0:
            return total, False
        total += part
        for q in range(r):
            _accumulate1(X[order[p + q]], z4[q], G)
    return total, True


@njit(inline="always", **JIT)
def _update(Wt, VWt, G, a, mu, eta, nesterov, f0, f1):
    """W, V <- one (heavy-ball or Nesterov) momentum step on the gradient G, L2 term fused.

    Only the features [f0, f1) move (a feature-split batch's share; 0, n
    for the whole).
    """
    k = Wt.shape[0]
    nf = f1 - f0
    for j in range(k):
        # Views of the range (the loops index from 0): an index f0 + f that
        # might be negative keeps Numba's wraparound test in the loop, and
        # LLVM turns the loads into gathers.
        wj = Wt[j, f0:f1]
        vj = VWt[j, f0:f1]
        gj = G[j, f0:f1]
        if nesterov:
            for f in range(nf):
                g = gj[f] + a * wj[f]
                v = mu * vj[f] - eta * g
                vj[f] = v
                wj[f] += mu * v - eta * g
        else:
            for f in range(nf):
                g = gj[f] + a * wj[f]
                v = mu * vj[f] - eta * g
                vj[f] = v
                wj[f] += v


# ------------------------------------------------------------ per-sample SGD
#
# Per-sample SGD (batch_size 1) is bound by its sweeps over W (and V): of
# MNIST size in float64, W alone is 62.7 KB, twice Zen 4's L1, so every step
# reads it from L2 and writes it back. The epoch below makes two steps per
# sweep. One step is an affine map of each weight and its velocity,
#
#     w' = A w + B v + alpha_j x,    v' = C w + D v + beta_j x,
#
# with A, B, C, D the same for every weight of the step and alpha_j, beta_j
# proportional to class j's error (:func:`_step_map`), so two steps are one
# such map in w, v, x_p and x_p+1. What the second step's error needs, the
# logits W_p+1 x_p+1, follows from dot products taken in the previous
# sweep: W_p+1 x_p+1 = A W_p x_p+1 + B V_p x_p+1 + alpha_j (x_p . x_p+1).
# So each sweep applies two steps and takes, of the weights it writes, the
# dots with the next two rows: W (and V) read and written once per two
# samples. The result is the sequential algorithm's, up to rounding. The
# classes go four at a time without momentum (each row of x loaded serves
# four weight rows), two at a time with it (two weight and two velocity
# rows). The epoch kernel at MNIST size, float64, no momentum: 2.5 us a
# step with one step a sweep and one class at a time, 1.8 us with this
# (BENCHMARKS.md, "Sixth session").


@njit(inline="always", **JIT)
def _step_map(eta, a, mu, one, nesterov):
    """Return one step's (A, B, C, D, ca, cb): alpha_j = ca e_j, beta_j = cb e_j.

    Heavy ball: v' = mu v - eta (e_j x + a w), w' = w + v'. Nesterov: the
    same v', w' = w + mu v' - eta (e_j x + a w). Without momentum (mu = 0)
    both give w' = (1 - eta a) w - eta e_j x, and v' is unused. Every
    argument (``one`` is 1) and result is of the weights' dtype: a Python
    1 would make float32 arithmetic float64.
    """
    C = -eta * a
    if nesterov:
        return one + (one + mu) * C, mu * mu, C, mu, -eta * (one + mu), -eta
    return one + C, mu, C, mu, -eta, -eta


@njit(inline="always", **JIT)
def _dot(x, z):
    acc = x.dtype.type(0)
    for f in range(x.shape[0]):
        acc += x[f] * z[f]
    return acc


@njit(inline="always", **JIT)
def _sweep_quad_plain(w0, w1, w2, w3, p, g0, g1, g2, g3, h0, h1, h2, h3, xa, xb, xc, xd):
    """Four rows at once, as :func:`_sweep_pair_plain`: returns the eight dots, row by row."""
    zero = xa.dtype.type(0)
    s00 = zero
    s01 = zero
    s10 = zero
    s11 = zero
    s20 = zero
    s21 = zero
    s30 = zero
    s31 = zero
    for f in range(xa.shape[0]):
        ya = xa[f]
        yb = xb[f]
        u0 = p * w0[f] + g0 * ya + h0 * yb
        u1 = p * w1[f] + g1 * ya + h1 * yb
        u2 = p * w2[f] + g2 * ya + h2 * yb
        u3 = p * w3[f] + g3 * ya + h3 * yb
        w0[f] = u0
        w1[f] = u1
        w2[f] = u2
        w3[f] = u3
        yc = xc[f]
        yd = xd[f]
        s00 += u0 * yc
        s01 += u0 * yd
        s10 += u1 * yc
        s11 += u1 * yd
        s20 += u2 * yc
        s21 += u2 * yd
        s30 += u3 * yc
        s31 += u3 * yd
    return s00, s01, s10, s11, s20, s21, s30, s31


@njit(inline="always", **JIT)
def _sweep_pair_plain(w0, w1, p, g0, g1, h0, h1, xa, xb, xc, xd):
    """Rows w0, w1 <- p w + g xa + h xb (two steps without momentum).

    Returns the new rows' dots with xc and xd: (w0.xc, w0.xd, w1.xc, w1.xd).
    """
    zero = xa.dtype.type(0)
    s00 = zero
    s01 = zero
    s10 = zero
    s11 = zero
    for f in range(xa.shape[0]):
        ya = xa[f]
        yb = xb[f]
        u0 = p * w0[f] + g0 * ya + h0 * yb
        u1 = p * w1[f] + g1 * ya + h1 * yb
        w0[f] = u0
        w1[f] = u1
        yc = xc[f]
        yd = xd[f]
        s00 += u0 * yc
        s01 += u0 * yd
        s10 += u1 * yc
        s11 += u1 * yd
    return s00, s01, s10, s11


@njit(inline="always", **JIT)
def _sweep_one_plain(w, p, g, h, xa, xb, xc, xd):
    """:func:`_sweep_pair_plain` for one row (the last of an odd k): returns (w.xc, w.xd)."""
    zero = xa.dtype.type(0)
    s0 = zero
    s1 = zero
    for f in range(xa.shape[0]):
        u = p * w[f] + g * xa[f] + h * xb[f]
        w[f] = u
        s0 += u * xc[f]
        s1 += u * xd[f]
    return s0, s1


@njit(inline="always", **JIT)
def _sweep_momentum_pair(w0, v0, w1, v1, p11, p12, p21, p22, g0, h0, q0, r0, g1, h1, q1, r1,
                         xa, xb, xc, xd):
    """Two rows and their velocities at once, as :func:`_sweep_momentum`.

    Returns (w0.xc, w0.xd, v0.xd, w1.xc, w1.xd, v1.xd).
    """
    zero = xa.dtype.type(0)
    s0 = zero
    s1 = zero
    s2 = zero
    t0 = zero
    t1 = zero
    t2 = zero
    for f in range(xa.shape[0]):
        ya = xa[f]
        yb = xb[f]
        yc = xc[f]
        yd = xd[f]
        wf = w0[f]
        vf = v0[f]
        u = p11 * wf + p12 * vf + g0 * ya + h0 * yb
        t = p21 * wf + p22 * vf + q0 * ya + r0 * yb
        w0[f] = u
        v0[f] = t
        s0 += u * yc
        s1 += u * yd
        s2 += t * yd
        wf = w1[f]
        vf = v1[f]
        u = p11 * wf + p12 * vf + g1 * ya + h1 * yb
        t = p21 * wf + p22 * vf + q1 * ya + r1 * yb
        w1[f] = u
        v1[f] = t
        t0 += u * yc
        t1 += u * yd
        t2 += t * yd
    return s0, s1, s2, t0, t1, t2


@njit(inline="always", **JIT)
def _sweep_momentum(w, v, p11, p12, p21, p22, g, h, q, r, xa, xb, xc, xd):
    """Take two steps on a row w and its velocity v, as one map.

    w <- p11 w + p12 v + g xa + h xb and v <- p21 w + p22 v + q xa + r xb.
    Returns the new rows' dots (w.xc, w.xd, v.xd).
    """
    zero = xa.dtype.type(0)
    s0 = zero
    s1 = zero
    s2 = zero
    for f in range(xa.shape[0]):
        ya = xa[f]
        yb = xb[f]
        wf = w[f]
        vf = v[f]
        u = p11 * wf + p12 * vf + g * ya + h * yb
        t = p21 * wf + p22 * vf + q * ya + r * yb
        w[f] = u
        v[f] = t
        yd = xd[f]
        s0 += u * xc[f]
        s1 += u * yd
        s2 += t * yd
    return s0, s1, s2


@njit(inline="always", **JIT)
def _dots(Wt, VWt, xc, xd, zc, zd, zv, momentum):
    """Set zc = W xc, zd = W xd and (with momentum) zv = V xd: what a pair of steps needs."""
    for j in range(Wt.shape[0]):
        zc[j] = _dot(Wt[j], xc)
        zd[j] = _dot(Wt[j], xd)
        if momentum:
            zv[j] = _dot(VWt[j], xd)


# _sample_error and _one_step are plain calls, not inlined: a call per step
# costs nothing next to a sweep over W, and each body is compiled once
# instead of once per call site (the cold compile of the epoch kernel).
@njit(**JIT)
def _sample_error(e, i, y, Y, sw, soft, weighted, coef, g0):
    """Turn row i's logits e into its scaled error; g0 <- the same (zeroed first).

    Returns (w_i CE_i, ok) as :func:`._fused._row_error`.
    """
    _zero1(g0)
    return _row_error(e, i, y, Y, sw, soft, weighted, coef, g0)


@njit(**JIT)
def _one_step(x, e, i, y, Y, sw, soft, weighted, coef, Wt, b, VWt, Vb, g0, a, mu, eta,
              nesterov, fit_intercept):
    """One per-sample step from the row's logits in e (intercept included), not fused.

    e becomes the row's error; W, V (and b, Vb with ``fit_intercept``) take
    one momentum step, the gradient e xᵀ + a W formed on the fly. Without
    momentum V ends at -eta times that gradient, as the momentum update
    leaves it. Returns (w_i CE_i, ok).
    """
    ce, ok = _sample_error(e, i, y, Y, sw, soft, weighted, coef, g0)
    if not ok:
        return ce, ok
    for j in range(Wt.shape[0]):
        wj = Wt[j]
        vj = VWt[j]
        ej = e[j]
        for f in range(x.shape[0]):
            g = ej * x[f] + a * wj[f]
            v = mu * vj[f] - eta * g
            vj[f] = v
            wj[f] += (mu * v - eta * g) if nesterov else v
    if fit_intercept:
        _intercept_step(b, Vb, g0, mu, eta, nesterov)
    return ce, ok


# Not inline: a plain call from the parallel epoch kernel, compiled on its
# own (inlined there, the parfor passes would go over it too and the cold
# compile would grow; see _batch_gradient).
@njit(**JIT)
def _per_sample_epoch(X, y, Y, sw, soft, weighted, order, row_scale, hyper, Wt, b, VWt, Vb,
                      g0, scratch, loss_out):
    """:func:`_sgd_epoch` for batch_size 1: two steps per sweep over W (see above).

    SCRATCH g0 (k,) and scratch (5, k). Returns what :func:`_sgd_epoch` does.
    The epoch's last step is always a plain one (:func:`_one_step`), so
    that without momentum it leaves V at -eta times its gradient, as the
    momentum path does.
    """
    m = order.shape[0]
    k = Wt.shape[0]
    dt = Wt.dtype.type
    mu = dt(hyper.momentum)
    a = dt(hyper.alpha)
    nesterov = hyper.nesterov
    fit_intercept = hyper.fit_intercept
    momentum = hyper.momentum != 0.0
    coef = dt(row_scale)
    one = dt(1)
    e = scratch[0]  # the current row's logits, then its error
    e1 = scratch[1]  # the next row's error
    zc = scratch[2]  # dots of the current W with the pair's rows
    zd = scratch[3]
    zv = scratch[4]
    total = 0.0
    t = hyper.t0
    p = 0
    if m > 2:
        _dots(Wt, VWt, X[order[0]], X[order[1]], zc, zd, zv, momentum)
    # Pairs of steps p, p + 1 while a step is left after them.
    while p + 2 < m:
        i0 = order[p]
        i1 = order[p + 1]
        xa = X[i0]
        xb = X[i1]
        # step p: its logits are zc (+ b)
        eta1 = dt(_eta(hyper.schedule, hyper.eta0, t, hyper.steps_per_epoch, hyper.power_t))
        for j in range(k):
            e[j] = zc[j] + b[j]
        ce, ok = _sample_error(e, i0, y, Y, sw, soft, weighted, coef, g0)
        if not ok:
            loss_out[0] = total
            return -(p + 1)
        total += ce
        if fit_intercept:
            _intercept_step(b, Vb, g0, mu, eta1, nesterov)
        A1, B1, C1, D1, ca1, cb1 = _step_map(eta1, a, mu, one, nesterov)
        # step p + 1: W_p+1 x_p+1 = A1 W x_p+1 + B1 V x_p+1 + alpha_j (x_p . x_p+1)
        eta2 = dt(_eta(hyper.schedule, hyper.eta0, t + 1, hyper.steps_per_epoch,
                       hyper.power_t))
        xx = _dot(xa, xb)
        for j in range(k):
            z = A1 * zd[j] + ca1 * e[j] * xx + b[j]
            if momentum:
                z += B1 * zv[j]
            e1[j] = z
        ce, ok = _sample_error(e1, i1, y, Y, sw, soft, weighted, coef, g0)
        if not ok:
            loss_out[0] = total
            return -(p + 2)
        total += ce
        if fit_intercept:
            _intercept_step(b, Vb, g0, mu, eta2, nesterov)
        A2, B2, C2, D2, ca2, cb2 = _step_map(eta2, a, mu, one, nesterov)
        # The two steps as one map, and the dots with the next two rows (the
        # second a stand-in when there is none: its dots go unused).
        xc = X[order[p + 2]]
        xd = X[order[min(p + 3, m - 1)]]
        for q in range(p + PAIR_AHEAD_ROWS, min(m, p + PAIR_AHEAD_ROWS + 2)):
            prefetch_row(X, order[q], 0, X.shape[1])
        p11 = A2 * A1 + B2 * C1
        if momentum:
            p12 = A2 * B1 + B2 * D1
            p21 = C2 * A1 + D2 * C1
            p22 = C2 * B1 + D2 * D1
            # x_p's coefficients (step p's, carried through step p + 1:
            # g for w, q for v) and x_p+1's (step p + 1's own: ca2, cb2).
            gx = A2 * ca1 + B2 * cb1
            qx = C2 * ca1 + D2 * cb1
            for j in range(0, k - 1, 2):
                zc[j], zd[j], zv[j], zc[j + 1], zd[j + 1], zv[j + 1] = _sweep_momentum_pair(
                    Wt[j], VWt[j], Wt[j + 1], VWt[j + 1], p11, p12, p21, p22,
                    gx * e[j], ca2 * e1[j], qx * e[j], cb2 * e1[j],
                    gx * e[j + 1], ca2 * e1[j + 1], qx * e[j + 1], cb2 * e1[j + 1],
                    xa, xb, xc, xd)
            if k % 2:
                j = k - 1
                zc[j], zd[j], zv[j] = _sweep_momentum(
                    Wt[j], VWt[j], p11, p12, p21, p22, gx * e[j], ca2 * e1[j],
                    qx * e[j], cb2 * e1[j], xa, xb, xc, xd)
        else:
            gx = A2 * ca1
            j = 0
            while j + 4 <= k:
                (zc[j], zd[j], zc[j + 1], zd[j + 1], zc[j + 2], zd[j + 2], zc[j + 3],
                 zd[j + 3]) = _sweep_quad_plain(
                    Wt[j], Wt[j + 1], Wt[j + 2], Wt[j + 3], p11,
                    gx * e[j], gx * e[j + 1], gx * e[j + 2], gx * e[j + 3],
                    ca2 * e1[j], ca2 * e1[j + 1], ca2 * e1[j + 2], ca2 * e1[j + 3],
                    xa, xb, xc, xd)
                j += 4
            if k - j >= 2:
                zc[j], zd[j], zc[j + 1], zd[j + 1] = _sweep_pair_plain(
                    Wt[j], Wt[j + 1], p11, gx * e[j], gx * e[j + 1],
                    ca2 * e1[j], ca2 * e1[j + 1], xa, xb, xc, xd)
                j += 2
            if j < k:
                zc[j], zd[j] = _sweep_one_plain(Wt[j], p11, gx * e[j], ca2 * e1[j],
                                                xa, xb, xc, xd)
        t += 2
        p += 2
    # The last one or two steps, one at a time (the first from the last
    # sweep's dots when there was one).
    have = p > 0
    while p < m:
        i = order[p]
        x = X[i]
        if have:
            for j in range(k):
                e[j] = zc[j] + b[j]
        else:
            _logits1(x, Wt, b, e)
        eta = dt(_eta(hyper.schedule, hyper.eta0, t, hyper.steps_per_epoch, hyper.power_t))
        ce, ok = _one_step(x, e, i, y, Y, sw, soft, weighted, coef, Wt, b, VWt, Vb, g0,
                           a, mu, eta, nesterov, fit_intercept)
        if not ok:
            loss_out[0] = total
            return -(p + 1)
        total += ce
        have = False
        t += 1
        p += 1
    loss_out[0] = total
    return m


@njit(**PJIT)
def _per_sample_kernel(X, y, Y, sw, soft, weighted, order, row_scale, hyper, Wt, b, VWt, Vb,
                       g0, loss_out):
    """One epoch of per-sample SGD (:func:`_per_sample_epoch`), a kernel of its own.

    The arguments and result are :func:`_sgd_epoch`'s without batch_size
    and with g0 (k,) the scratch. The epoch runs from a parallel region of
    one iteration: Numba marks a prange body's arrays as not aliasing one
    another, and with that mark LLVM compiles the epoch's loops better
    (the same results; 0.57-0.97x the time at 20-784 features on 2 cores,
    BENCHMARKS.md, "Thirty-fourth session"). A kernel of its own, so that a
    first fit compiles only the epoch it runs (per-sample or mini-batch).
    """
    scratch = np.empty((5, Wt.shape[0]), dtype=Wt.dtype)
    steps = np.zeros(1, dtype=np.int64)
    for _ in prange(1):
        steps[0] = _per_sample_epoch(X, y, Y, sw, soft, weighted, order, row_scale, hyper,
                                     Wt, b, VWt, Vb, g0, scratch, loss_out)
    return steps[0]


# The flag a batch's last part publishes in the epochs split across threads
# (its step made, or its error formed), or that the epoch stopped at the
# batch on logits that are not finite.
_PUBLISHED = 1
_STOPPED = 2

# A cache line: what one part writes is kept this far from the next part's.
LINE_BYTES = 64


@njit(**JIT)
def row_split_parts(batch_size, n, k, n_threads):
    """Return the parts (of rows) each batch of an epoch is split into, or 1: one thread.

    Per-sample SGD and batches below the thresholds above run on one thread.
    """
    if (batch_size < PARALLEL_MIN_ROWS or n_threads < 2
            or batch_size * n * k < ROW_SPLIT_WORK):
        return 1
    return max(1, min(n_threads, batch_size // MIN_CHUNK_ROWS))


@njit(inline="always", **JIT)
def _used_parts(s, batch_size, m, parts):
    """Return how many of batch s's parts hold rows (the last batch may be short)."""
    bs = min(m, (s + 1) * batch_size) - s * batch_size
    return min(parts, max(1, bs // MIN_CHUNK_ROWS))


@njit(**JIT)
def _finish_batch(s, batch_size, m, parts, hyper, Wt, b, VWt, Vb, gWt, gb, loss_parts,
                  ok_parts, total):
    """After batch s's parts: its loss into total, its parts' gradients summed, its step.

    Returns False, nothing moved, where a part's logits were not finite.
    """
    k, n = Wt.shape
    dt = Wt.dtype.type
    used = _used_parts(s, batch_size, m, parts)
    for c in range(used):
        if not ok_parts[c, 0]:
            return False
        total[0] += loss_parts[c, 0]
    G = gWt[0]
    g0 = gb[0]
    for q in range(1, used):
        Gq = gWt[q]
        gq = gb[q]
        for j in range(k):
            g0[j] += gq[j]
            for f in range(n):
                G[j, f] += Gq[j, f]
    mu = dt(hyper.momentum)
    eta = dt(_eta(hyper.schedule, hyper.eta0, hyper.t0 + s, hyper.steps_per_epoch,
                  hyper.power_t))
    _update(Wt, VWt, G, dt(hyper.alpha), mu, eta, hyper.nesterov, 0, n)
    if hyper.fit_intercept:
        _intercept_step(b, Vb, g0, mu, eta, hyper.nesterov)
    return True


@njit(**PJIT)
def _sgd_epoch(X, y, Y, sw, soft, weighted, order, batch_size, row_scale, hyper,
               Wt, b, VWt, Vb, gWt, gb, loss_out):
    """Run one epoch in place on the state (Wt, b, VWt, Vb).

    IN: X (m, n); y, Y, sw, soft, weighted as in :mod:`._fused`; order (m,)
    the rows in visiting order; batch_size; row_scale = m / sum(w) (1 / the
    mean weight); hyper an :data:`SGDHyper`.
    IN/OUT: Wt (k, n) weights, b (k,) intercept (left at 0 unless
    hyper.fit_intercept), VWt (k, n) and Vb (k,) velocities.
    SCRATCH: gWt (n_chunks, k, n), gb (n_chunks, >= k) per-part gradients.
    OUT: loss_out[0], the sum of w_i * CE_i over the epoch, each row
    evaluated with the weights in force when its batch was processed.

    Returns the number of updates made, or -(updates + 1) if the logits of
    a batch were not finite (the state is then partly updated: the caller
    restores its snapshot).

    Batches split by rows (:func:`row_split_parts`) run as the feature-split
    epoch does, the whole epoch in one parallel region: per batch, parts of
    its rows, each part's gradient into its own gWt[c]; the thread that
    finishes the last part sums the parts' gradients, makes the batch's step
    and publishes it, and the next batch's parts wait for that. Parts are
    handed between threads as in :func:`_feature_split_epoch`. (Summing and
    applying the step by ranges of columns on every thread, a second
    hand-over per batch, took 1.03-1.08x the time of one region per batch
    at 300-400 features on 2 cores; this, 0.92-0.94x: BENCHMARKS.md,
    "Thirty-fourth session". On 16 cores it took 1.02-1.31x this epoch's
    time: "Thirty-fifth session".)
    """
    m = order.shape[0]
    k, n = Wt.shape
    n_chunks = gWt.shape[0]
    # Per part, the four rows of logits of _batch_gradient (a view of the
    # first four of more rows: the kernel's float64 row split ran 1.09x as
    # long on C-contiguous blocks of four, at (300000, 100, 10), a
    # compiled-code difference), and its loss and success. Each part's
    # entries are a cache line or more apart from the next part's: they are
    # written at every block of four rows, by a thread of their own.
    scratch = np.empty((n_chunks, 5 + LINE_BYTES // (k * Wt.itemsize), k), dtype=Wt.dtype)
    n_batches = (m + batch_size - 1) // batch_size
    parts = min(n_chunks, row_split_parts(batch_size, n, k, n_chunks))
    loss_parts = np.empty((n_chunks, LINE_BYTES // 8), dtype=np.float64)
    ok_parts = np.empty((n_chunks, LINE_BYTES), dtype=np.bool_)
    total = np.zeros(1, dtype=np.float64)
    # One part (batches on one thread) runs through the same region, of one
    # iteration: a loop of its own beside it would compile the gradient into
    # this function once more. Per batch: its parts' flags (taken or not;
    # part c's flags of every batch side by side, so that a thread taking
    # its own part writes to no line that holds another part's flag), how
    # many parts are done, and the flag its last part publishes once the
    # batch's step is made (_STOPPED where a row's logits were not finite).
    taken = np.zeros(n_batches * parts, dtype=np.int64)
    done = np.zeros(n_batches, dtype=np.int64)
    stepped = np.zeros(n_batches, dtype=np.int64)
    result = np.full(1, n_batches, dtype=np.int64)
    for w in prange(parts):
        first = np.int64(w)
        for s in range(n_batches):
            for u in range(parts):
                c = (first + u) % parts
                if not try_take(taken, c * n_batches + s):
                    continue
                # Part c of the batch's rows (none where the batch, the
                # last, has too few rows for every part). The gradient is
                # called here, not through a function around it: each
                # compiled function it is linked into optimises it again.
                start = s * batch_size
                bs = min(m, start + batch_size) - start
                used = _used_parts(s, batch_size, m, parts)
                if c < used:
                    lo, hi = _chunk(bs, used, c)
                    part, ok = _batch_gradient(X, y, Y, sw, soft, weighted, order, start + lo,
                                               start + hi, Wt.dtype.type(row_scale / bs), Wt,
                                               b, gWt[c], gb[c], scratch[c, :4])
                    loss_parts[c, 0] = part
                    ok_parts[c, 0] = ok
                if fetch_add(done, s, 1) != parts - 1:
                    continue
                if _finish_batch(s, batch_size, m, parts, hyper, Wt, b, VWt, Vb, gWt, gb,
                                 loss_parts, ok_parts, total):
                    publish(stepped, s, _PUBLISHED)
                else:
                    result[0] = -(s + 1)
                    publish(stepped, s, _STOPPED)
            if wait_nonzero(stepped, s) == _STOPPED:
                break
    if result[0] >= 0:
        loss_out[0] = total[0]
    return result[0]


# ------------------------------------------------- feature-split mini-batches
#
# A batch split by rows (above) leaves each thread a partial gradient of all
# k n weights: summed serially, then applied serially, and carried from core
# to core every batch. At MNIST size (k n = 7840), B = 64, float32, a
# second thread took the epoch only from 44 to 35 ms (BENCHMARKS.md, "Ninth
# session"), where the arithmetic alone would halve. Split
# by features instead, each thread owns a range of W's columns: its share of
# the logits is a partial sum over its features (B k numbers to add up),
# while its share of the gradient, Eᵀ X[:, f0:f1], and the update of its
# columns need nothing from the other threads. Per batch t, each column
# range (a "part") does batch t - 1's gradient and update on its columns and
# then the partial logits of batch t with the columns just updated; then one
# thread sums the partial logits (B k), forms the softmax error and steps
# the intercept. W stays in the cache of the core that owns its columns.
# The updates are the row-split epoch's, up to the order of the sums.
#
# The whole epoch is one parallel region: a region per batch cost about
# 2.5 us to open and close on two cores, 938 times an epoch at MNIST size
# (BENCHMARKS.md, "Thirty-fourth session"). Inside it the threads hand the
# batches on through flags (._atomic): a thread takes a part of batch t by
# setting its flag atomically (try_take; its own part first, so that
# columns stay on their core), the one that finishes batch t's last part
# computes the batch's error and publishes it, and the parts of batch t + 1
# wait for that. A thread tries every part of a batch before it waits, so however
# the region's iterations are spread over threads -- all on one thread,
# say, where fewer threads run than parts -- every part is taken by a
# thread that is running, and none waits for a part that nobody will take.


# Features per unit of the split: ranges start on multiples of 64 bytes of
# float32 (128 of float64), so that where W's rows start on a cache line,
# two threads write none of the same lines.
FEATURE_BLOCK = 16

# A batch is split by features when n >= FEATURE_SPLIT_RATIO * B: the
# per-batch work the split saves (the serial sum and update of k n
# weights) grows with n, what it adds (the serial error of B k entries,
# each row's product in two passes) with B. Side by side on the 2-core
# Intel host (one epoch, both kernels interleaved; BENCHMARKS.md, "Ninth
# session"): n / B = 12 (MNIST, B = 64) 0.91-0.97x the row split's time,
# 24 (B = 32) 0.89-0.97x, 47 (n = 3000) 0.80-0.86x; n / B = 6 (B = 128)
# 1.04-1.11x and 4.7 (n = 300) 1.19-1.21x, slower.
FEATURE_SPLIT_RATIO = 8

# ...and each thread's range holds at least this many features, so that
# the register tiles' feature loops stay long (k = 100, n = 100 split over
# two threads ran 1.36-1.73x slower than by rows). On two cores the rule
# above already asks for n >= 256; the bound is for many threads, where a
# range of n / threads features gets short. It is reasoned, not measured:
# no host with more than 2 cores was at hand.
MIN_SPLIT_FEATURES = 128

# Batches split by features from this many rows (with PARALLEL_WORK
# multiply-adds), fewer than the row split asks for: a part is a range of
# columns of every row, and a batch is handed on inside the epoch's one
# region. B = 16 on 2 cores (versions.py sgd16, 20,000-30,000 rows of
# 1,536-3,000 features): 0.59-0.84x the time on one thread; B = 8 at
# (20000, 3000, 20) 0.70-0.87x. Below PARALLEL_WORK it did not pay: B = 16
# at (100000, 300, 10) 1.23-1.40x, at the MNIST shape 0.89-0.98x
# (BENCHMARKS.md, "Thirty-fourth session").
FEATURE_SPLIT_MIN_ROWS = 8


def feature_split_parts(batch_size, n, k, n_threads):
    """Return the thread count a batch is split over by features, or 1: split by rows.

    Per-sample SGD and batches below the parallel thresholds (above) are
    never split by features.
    """
    if (batch_size < FEATURE_SPLIT_MIN_ROWS or batch_size * n * k < PARALLEL_WORK
            or n < FEATURE_SPLIT_RATIO * batch_size):
        return 1
    return max(1, min(n_threads, n // MIN_SPLIT_FEATURES))


@njit(**JIT)
def _columns_update(X, order, start, stop, E, G, Wt, VWt, a, mu, eta, nesterov, f0, f1):
    """Apply the batch order[start:stop]'s step to the features [f0, f1) of W and V.

    IN: E (>= 4 ceil((stop - start) / 4), k), the batch's scaled error rows,
    zero past stop - start. SCRATCH: G[:, f0:f1].
    """
    _wide_vectors(X)
    k = Wt.shape[0]
    zero = Wt.dtype.type(0)
    for j in range(k):
        gj = G[j, f0:f1]
        for f in range(f1 - f0):
            gj[f] = zero
    last = stop - 1
    m = order.shape[0]
    bs = stop - start
    # The tiles ask for the next batch's rows at the same places (the
    # batch after this one is the one whose logits come next): memory then
    # works through this sweep too. The epoch took 0.87-0.96x the time
    # (B = 64, 784 and 3,000 features; versions.py, 2 cores).
    for p in range(start, stop, 4):
        q = p - start
        nx = p + bs
        accumulate4_gather_ahead(X, order[p], order[min(p + 1, last)], order[min(p + 2, last)],
                                 order[min(p + 3, last)], E, q, G, f0, f1,
                                 order[nx] if nx < m else -1,
                                 order[nx + 1] if nx + 1 < m else -1,
                                 order[nx + 2] if nx + 2 < m else -1,
                                 order[nx + 3] if nx + 3 < m else -1)
    _update(Wt, VWt, G, a, mu, eta, nesterov, f0, f1)


@njit(**JIT)
def _columns_logits(X, order, start, stop, Wt, no_bias, P, f0, f1):
    """P[q] <- X[order[start + q], f0:f1] . Wt[:, f0:f1] (rows past stop repeat its last).

    Each block of four rows first prefetches the block AHEAD_ROWS further
    on in the order (into the next batch at the batch's end).
    """
    _wide_vectors(X)
    last = stop - 1
    m = order.shape[0]
    for p in range(start, stop, 4):
        q = p - start
        for ahead in range(p + AHEAD_ROWS, min(m, p + AHEAD_ROWS + 4)):
            prefetch_row(X, order[ahead], f0, f1)
        logits4_cols(X, order[p], order[min(p + 1, last)], order[min(p + 2, last)],
                     order[min(p + 3, last)], Wt, no_bias, P, q, f0, f1)


@njit(**JIT)
def _split_batch_error(P, b, order, start, stop, y, Y, sw, soft, weighted, coef, gb, E, flat,
                       yb, Yb, swb, no_proba):
    """E <- the scaled softmax error of the batch order[start:stop], gb <- its column sums.

    IN: P (n_parts, rows4, k) the threads' partial logits (rows4 >= stop -
    start, a multiple of 4), b (k,). OUT: E (rows4, k), zero past the
    batch's rows (so that 4-row blocks may run past its end). SCRATCH: flat
    ((k + 2) rows4,), yb, Yb, swb (the batch's labels, targets and weights
    gathered in visiting order). Returns (sum of w_i * CE_i, -1), or (0, q)
    with q the first row (in the batch) whose logits are not finite.

    The logits are summed into a transposed block, one column a row, and
    the error runs along the rows (:func:`._fused._block_error_t`): on rows
    of a few classes, four rows at a time (:func:`._fused._error4`) spend
    their time in short loops.
    """
    n_parts, rows4, k = P.shape
    bs = stop - start
    for i in range(bs):
        r = order[start + i]
        if soft:
            for j in range(k):
                Yb[i, j] = Y[r, j]
        else:
            yb[i] = y[r]
        if weighted:
            swb[i] = sw[r]
    ZT = flat[:k * bs].reshape(k, bs)
    for j in range(k):
        zj = ZT[j]
        for i in range(bs):
            z = b[j]
            for c in range(n_parts):
                z += P[c, i, j]
            zj[i] = z
    _zero1(gb)
    rest = flat[k * rows4:]
    part, bad = _block_error_t(ZT, 0, yb, Yb, swb, soft, weighted, coef, gb, rest[:bs],
                               rest[rows4:rows4 + bs], no_proba)
    if bad >= 0:
        return part, bad
    zero = E.dtype.type(0)
    for i in range(bs):
        for j in range(k):
            E[i, j] = ZT[j, i]
    for i in range(bs, rows4):
        for j in range(k):
            E[i, j] = zero
    return part, -1


@njit(**JIT)
def _split_part(X, order, batch_size, s, c, n_parts, hyper, Wt, VWt, E, G, P, no_bias):
    """Part c (a range of columns) of batch s: batch s - 1's step on it, then batch s's logits.

    IN: E, batch s - 1's scaled error (:func:`_split_batch_error`). OUT:
    P (rows4, k), this range's share of batch s's logits. SCRATCH: G.
    """
    m = order.shape[0]
    n = X.shape[1]
    dt = Wt.dtype.type
    units = (n + FEATURE_BLOCK - 1) // FEATURE_BLOCK
    lo, hi = _chunk(units, n_parts, c)
    f0 = lo * FEATURE_BLOCK
    f1 = min(n, hi * FEATURE_BLOCK)
    if s > 0:
        prev = (s - 1) * batch_size
        eta = dt(_eta(hyper.schedule, hyper.eta0, hyper.t0 + s - 1, hyper.steps_per_epoch,
                      hyper.power_t))
        _columns_update(X, order, prev, min(m, prev + batch_size), E, G, Wt, VWt,
                        dt(hyper.alpha), dt(hyper.momentum), eta, hyper.nesterov, f0, f1)
    start = min(m, s * batch_size)
    stop = min(m, start + batch_size)
    if stop > start:
        _columns_logits(X, order, start, stop, Wt, no_bias, P, f0, f1)


@njit(**PJIT)
def _feature_split_epoch(X, y, Y, sw, soft, weighted, order, batch_size, row_scale, hyper,
                         Wt, b, VWt, Vb, gWt, gb, loss_out):
    """:func:`_sgd_epoch` with every batch split by features into gWt.shape[0] parts.

    The arguments and result are :func:`_sgd_epoch`'s, but for the scratch
    gb (k,). Each part c accumulates its columns of the gradient in its own
    gWt[c] (n_parts, k, n): in one shared G the lines where two ranges meet
    passed between the cores at every 4-row block, and two threads ran the
    epoch slower than one. One parallel region of n_parts iterations runs
    the epoch, the parts handed between its threads as the comment above
    says; the results do not depend on which thread takes which part.
    """
    n_parts = gWt.shape[0]
    m = order.shape[0]
    k = Wt.shape[0]
    dt = Wt.dtype.type
    rows4 = (batch_size + 3) // 4 * 4
    P = np.empty((n_parts, rows4, k), dtype=Wt.dtype)
    E = np.empty((rows4, k), dtype=Wt.dtype)
    no_bias = np.zeros(k, dtype=Wt.dtype)
    flat = np.empty((k + 2) * rows4, dtype=Wt.dtype)
    yb = np.empty(rows4, dtype=y.dtype)
    Yb = np.empty((rows4 if soft else 0, k), dtype=Wt.dtype)
    swb = np.empty(rows4 if weighted else 0, dtype=Wt.dtype)
    no_proba = np.empty((0, k), dtype=Wt.dtype)
    n_batches = (m + batch_size - 1) // batch_size
    # Per batch: its parts' flags (taken or not; part by part, as in
    # _sgd_epoch), how many parts are done, and its error's flag; then the
    # epoch's result and loss.
    taken = np.zeros((n_batches + 1) * n_parts, dtype=np.int64)
    done = np.zeros(n_batches + 1, dtype=np.int64)
    error = np.zeros(n_batches + 1, dtype=np.int64)
    result = np.full(1, n_batches, dtype=np.int64)
    total = np.zeros(1, dtype=np.float64)
    mu = dt(hyper.momentum)
    for w in prange(n_parts):
        first = np.int64(w)
        for s in range(n_batches + 1):
            if s > 0 and wait_nonzero(error, s - 1) == _STOPPED:
                break
            for u in range(n_parts):
                c = (first + u) % n_parts
                if not try_take(taken, c * (n_batches + 1) + s):
                    continue
                _split_part(X, order, batch_size, s, c, n_parts, hyper, Wt, VWt, E, gWt[c],
                            P[c], no_bias)
                if fetch_add(done, s, 1) != n_parts - 1 or s == n_batches:
                    continue
                # ---- the last part of batch s: its error and intercept step ----
                start = s * batch_size
                stop = min(m, start + batch_size)
                part, bad = _split_batch_error(P, b, order, start, stop, y, Y, sw, soft,
                                               weighted, dt(row_scale / (stop - start)), gb,
                                               E, flat, yb, Yb, swb, no_proba)
                if bad >= 0:
                    result[0] = -(s + 1)
                    publish(error, s, _STOPPED)
                    continue
                total[0] += part
                if hyper.fit_intercept:
                    eta = dt(_eta(hyper.schedule, hyper.eta0, hyper.t0 + s,
                                  hyper.steps_per_epoch, hyper.power_t))
                    _intercept_step(b, Vb, gb, mu, eta, hyper.nesterov)
                publish(error, s, _PUBLISHED)
    if result[0] >= 0:
        loss_out[0] = total[0]
    return result[0]
