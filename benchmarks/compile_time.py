"""Cold compile time of the kernels behind each entry point, in this process.

Numba's cache is pointed at a new empty folder before fastsoftmax is
imported (or at ``$COMPILE_TIME_CACHE``, an empty folder the caller
shares between processes started together), so every kernel the calls
need is compiled here; each line is the
seconds of the first call (compilation included) on a small problem.

    python benchmarks/compile_time.py [float32|float64] [grad softmax proba auto lbfgs sgd bgd
                                                         calibrate mnist large large-narrow
                                                         large-wide large-lbfgs rows:N
                                                         sparse ... kernels]

prints one line per entry point, in order (a later line does not pay again
for a kernel an earlier one compiled), then the total with the import.
"proba" is a model's first ``predict_proba`` (weights set by hand, as a
loaded model has them: no fit). "calibrate" is the kernel strategy's
calibration of every grid cell of that dtype (``fastsoftmax bench
--calibrate``; nothing is written), its compiling and its timing together.
"large", "large-narrow" and "large-wide" are a first fit (``max_iter=2``)
of a problem large enough (m n k >= 2**30) to calibrate what it uses:
60,000 x 784, 25 classes (its strategy cell), 300,000 x 20, 200 classes
(the GEMM blocks of narrow rows), and 20,000 x 784, 100 classes (its
strategy cells, above 48 classes), with the default solver (Newton);
"large-lbfgs" the first of them with ``solver="lbfgs"``. The wisdom goes
to a new empty folder too, unless FASTSOFTMAX_CACHE_DIR says otherwise.
"mnist" is the same first fit at 60,000 x 784, 10 classes, the MNIST
shape (m n k below 2**30: nothing calibrated). "rows:N" is
``loss_and_grad`` and then ``hessp`` on 203 rows of N features, 5
classes, with the rows strategy forced
(``FASTSOFTMAX_STRATEGY=rows``): "rows:127 rows:128" shows whether float64
rows on both sides of the 512-bit width's threshold share their kernels.
"sparse" is a first default fit (``max_iter=2``) of a 5,000 x 2,000 CSR
matrix, 1 % of it stored, 3 classes.
``kernels`` (anywhere after the dtype) also prints, after each entry
point, the kernels it compiled and the seconds of each (Numba's compile
events; a kernel's line includes the functions compiled for it).
"""

import os
import sys
import tempfile
import time
import warnings

# COMPILE_TIME_CACHE: an empty folder that processes started together share
# (benchmarks/numba_passes.py --processes).
os.environ["NUMBA_CACHE_DIR"] = (os.environ.get("COMPILE_TIME_CACHE")
                                 or tempfile.mkdtemp(prefix="fastsoftmax-cold-cache-"))

import numpy as np  # noqa: E402

t0 = time.perf_counter()
import fastsoftmax as fs  # noqa: E402

print(f"import {time.perf_counter() - t0:.1f} s", flush=True)


T_START = t0  # the import started here
# First fits that calibrate (m n k >= 2**30): a strategy cell; narrow blocks.
LARGE = {"large": (60_000, 784, 25), "large-narrow": (300_000, 20, 200),
         "large-wide": (20_000, 784, 100), "mnist": (60_000, 784, 10),
         "large-lbfgs": (60_000, 784, 25)}
# The solver of a LARGE case: "auto" (Newton) where not named here.
LARGE_SOLVER = {"large-lbfgs": "lbfgs"}


def compile_events() -> list[tuple[str, float]]:
    """Start recording (kernel, seconds) of every outermost compile Numba runs from now on."""
    from numba.core import event

    done: list[tuple[str, float]] = []
    started: list[float] = []

    class Listener(event.Listener):
        def on_start(self, ev):
            started.append(time.perf_counter())

        def on_end(self, ev):
            t0 = started.pop()
            if not started:
                done.append((ev.data["dispatcher"].py_func.__qualname__,
                             time.perf_counter() - t0))

    event.register("numba:compile", Listener())
    return done


ENTRY_POINTS = ("grad", "softmax", "proba", "calibrate", "sparse")


def _bad_argument(dtype: str, what: list[str]) -> str | None:
    """Return what is wrong with the command line (None: nothing)."""
    from fastsoftmax._params import SOLVERS

    if dtype not in ("float32", "float64"):
        return f"the first argument is the dtype, float32 or float64, not {dtype!r}"
    for name in what:
        if name.startswith("rows:"):
            if not name[len("rows:"):].isdigit() or int(name[len("rows:"):]) < 1:
                return f"{name!r}: rows:N takes a whole number of features N >= 1"
        elif name not in (*ENTRY_POINTS, *LARGE, *SOLVERS):
            return f"unknown entry point {name!r}"
    return None


def main(argv):
    dtype = argv[0] if argv else "float32"
    by_kernel = "kernels" in argv[1:]
    what = [a for a in argv[1:] if a != "kernels"] or ["grad", "softmax", "lbfgs", "sgd"]
    bad = _bad_argument(dtype, what)
    if bad is not None:
        raise SystemExit(f"compile_time.py: {bad}\n\n{__doc__}")
    events = compile_events() if by_kernel else []
    rng = np.random.default_rng(0)
    # Large enough (m n k = 1.5e6) for the solvers' parallel kernels, as a
    # user's first real fit needs them.
    X = rng.standard_normal((5000, 100)).astype(dtype)
    y = np.arange(5000) % 3
    for name in what:
        t = time.perf_counter()
        if name == "grad":
            fs.loss_and_grad(X, y, np.zeros((100, 3), X.dtype), np.zeros(3, X.dtype))
        elif name == "softmax":
            fs.softmax(X)
        elif name == "proba":
            # A model's first predict_proba, its weights set by hand (as a
            # model loaded from a file has them): no fit's kernels compiled.
            model = fs.SoftmaxRegression()
            model.coef_ = np.zeros((3, X.shape[1]), X.dtype)
            model.intercept_ = np.zeros(3, X.dtype)
            model.classes_ = np.arange(3)
            model.n_features_in_ = X.shape[1]
            model.predict_proba(X)
        elif name == "calibrate":
            from fastsoftmax import _calibration

            _calibration.calibrate((dtype,), write=False)
        elif name.startswith("rows:"):
            n = int(name[len("rows:"):])
            Xr = rng.standard_normal((203, n)).astype(dtype)
            Wr, br = np.zeros((n, 5), dtype), np.zeros(5, dtype)
            before = os.environ.get("FASTSOFTMAX_STRATEGY")
            os.environ["FASTSOFTMAX_STRATEGY"] = "rows"
            try:
                fs.loss_and_grad(Xr, np.arange(203) % 5, Wr, br, alpha=0.1)
                fs.hessp(Xr, np.arange(203) % 5, Wr, br, np.ones_like(Wr), alpha=0.1)
            finally:
                os.environ.pop("FASTSOFTMAX_STRATEGY")
                if before is not None:
                    os.environ["FASTSOFTMAX_STRATEGY"] = before
        elif name == "sparse":
            import scipy.sparse as sp

            Xs = sp.random(5000, 2000, density=0.01, format="csr", random_state=0,
                           dtype=np.dtype(dtype))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fs.SoftmaxRegression(max_iter=2).fit(Xs, y)
        elif name in LARGE:
            m, n, k = LARGE[name]
            Xl = rng.standard_normal((m, n)).astype(dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fs.SoftmaxRegression(LARGE_SOLVER.get(name, "auto"),
                                     max_iter=2).fit(Xl, np.arange(m) % k)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fs.SoftmaxRegression(name, max_iter=2).fit(X, y)
        print(f"{name} {time.perf_counter() - t:.1f} s", flush=True)
        for kernel, seconds in events:
            print(f"    {kernel} {seconds:.1f} s")
        events.clear()
    print(f"total (import included) {time.perf_counter() - T_START:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
