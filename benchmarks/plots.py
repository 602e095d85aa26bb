"""The two figures referenced from BENCHMARKS.md, measured on this machine.

    python benchmarks/plots.py [--out benchmarks] [--rounds 5]

1. ``time_vs_k.png``: loss_and_grad time against the number of classes k at
   m = 10000, n = 784 (float32 and float64), fastsoftmax and the NumPy
   reference, timed interleaved, with the strategy the rule picks marked.
2. ``thread_scaling.png``: fastsoftmax.loss_and_grad at (60000, 784, 10) on
   1 and 2 Numba threads, against perfect scaling.

The measured numbers are also written next to the figures as JSON.
"""

import argparse
import json
import os
from pathlib import Path

import matplotlib
from _common import at_least_one  # benchmarks/ is on the path of a script run from it

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from ratios import _problem, interleaved  # noqa: E402

import fastsoftmax as fs  # noqa: E402
from fastsoftmax import reference  # noqa: E402
from fastsoftmax._calibration import strategy  # noqa: E402

KS = [2, 3, 5, 10, 20, 33, 48, 64, 100, 200, 500, 1000]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent))
    ap.add_argument("--rounds", type=at_least_one, default=5)
    a = ap.parse_args()
    out = Path(a.out)
    rng = np.random.default_rng(0)
    data = {"load": os.getloadavg(), "k": KS, "m": 10000, "n": 784}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for dtype, style in (("float32", "-"), ("float64", "--")):
        t_fs, t_ref = [], []
        for k in KS:
            X, y, W, b = _problem(10000, 784, k, dtype, rng)
            f, r = interleaved([lambda: fs.loss_and_grad(X, y, W, b),  # noqa: B023
                                lambda: reference.loss_and_grad(X, y, W, b)],  # noqa: B023
                               a.rounds)
            t_fs.append(f * 1e3)
            t_ref.append(r * 1e3)
            print(dtype, k, strategy(784, k, dtype, work=10000 * 784 * k),
                  f"{f * 1e3:.2f} ms vs {r * 1e3:.2f} ms", flush=True)
        data[dtype] = {"fastsoftmax_ms": t_fs, "reference_ms": t_ref}
        ax.loglog(KS, t_fs, "o" + style, color="C0", label=f"fastsoftmax {dtype}")
        ax.loglog(KS, t_ref, "s" + style, color="C1", label=f"NumPy reference {dtype}")
    ax.axvspan(min(KS) * 0.8, 48.5, color="0.9", zorder=0)
    ax.text(3, ax.get_ylim()[1] * 0.6, '"rows" strategy', fontsize=9)
    ax.text(70, ax.get_ylim()[1] * 0.6, '"gemm" strategy', fontsize=9)
    ax.set_xlabel("classes k")
    ax.set_ylabel("ms per loss_and_grad (median)")
    ax.set_title("loss_and_grad, m = 10000, n = 784, 2 threads")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "time_vs_k.png", dpi=110)

    fig, ax = plt.subplots(figsize=(5, 4))
    scaling = {}
    for i, dtype in enumerate(("float32", "float64")):
        X, y, W, b = _problem(60000, 784, 10, dtype, rng)
        t1, t2 = interleaved([lambda: fs.loss_and_grad(X, y, W, b, n_threads=1),  # noqa: B023
                              lambda: fs.loss_and_grad(X, y, W, b, n_threads=2)],  # noqa: B023
                             a.rounds)
        scaling[dtype] = [t1 * 1e3, t2 * 1e3]
        ax.plot([1, 2], [1, t1 / t2], "o-", color=f"C{i}", label=f"{dtype} ({t1 / t2:.2f}x)")
        print(dtype, f"1 thread {t1 * 1e3:.1f} ms, 2 threads {t2 * 1e3:.1f} ms", flush=True)
    ax.plot([1, 2], [1, 2], ":", color="0.5", label="perfect")
    ax.set_xticks([1, 2])
    ax.set_xlabel("Numba threads")
    ax.set_ylabel("speed-up over 1 thread")
    ax.set_title("loss_and_grad at (60000, 784, 10)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "thread_scaling.png", dpi=110)
    data["threads_ms"] = scaling
    data["load_after"] = os.getloadavg()
    (out / "plots.json").write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
