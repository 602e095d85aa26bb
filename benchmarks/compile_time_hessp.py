"""Cold compile time of the Hessian kernels (fastsoftmax._kernels._hessp).

Numba's cache is pointed at a new empty folder before fastsoftmax is
imported. The fused gradient kernels are compiled first (they exist
without this work; the P argument adds no specialisation), then each
Hessian entry point is timed on its first call, per dtype:

    python benchmarks/compile_time_hessp.py [float32 float64]

The serial variants are the chunk functions themselves, so the parallel
kernel's line is only its prange wrapper when the serial line came first.
"""

import os
import sys
import tempfile
import time

os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastsoftmax-cold-hessp-")

import numpy as np  # noqa: E402

from fastsoftmax import _hessian  # noqa: E402
from fastsoftmax._hessian import HessianProduct  # noqa: E402


def main(argv):
    total = 0.0
    for dtype in argv or ["float32", "float64"]:
        rng = np.random.default_rng(0)
        X = rng.standard_normal((200, 50)).astype(dtype)
        y = (np.arange(200) % 3).astype(np.int64)
        coef = np.zeros((3, 50), X.dtype)
        b = np.zeros(3, X.dtype)
        V = np.ones((3, 50), X.dtype)
        for strategy in ("rows", "gemm"):
            for launch in ("serial", "parallel"):
                _hessian.SERIAL_FLOPS = 1 << 40 if launch == "serial" else 0
                t = time.perf_counter()
                H = HessianProduct(X, y, None, None, 200.0, 3, coef, b, 0.1,
                                   n_threads=2, strategy=strategy, mode="cached")
                t_grad = time.perf_counter() - t
                t = time.perf_counter()
                H.matvec(V, b)
                t_hv = time.perf_counter() - t
                t = time.perf_counter()
                H.diagonal()
                t_d = time.perf_counter() - t
                total += t_hv + t_d
                print(f"{dtype} {strategy} {launch}: gradient pass {t_grad:.1f} s (not counted), "
                      f"matvec {t_hv:.1f} s, diagonal {t_d:.1f} s", flush=True)
    print(f"Hessian kernels, total {total:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
