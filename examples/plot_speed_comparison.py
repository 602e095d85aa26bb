"""
Speed: the fused kernel against plain NumPy
===========================================

:func:`fastsoftmax.loss_and_grad` computes the loss and gradient in one
multithreaded pass over X, without the m × k matrices that the plain NumPy
version in :mod:`fastsoftmax.reference` builds. This example times both on a
few small problems, **on the machine that built these pages, when it built
them**: the ratios below are measured, not copied. The problems are small so
that the whole example takes a few seconds; the measured tables at full
size, with the machine described, are in the benchmarks page.

Each pair is timed alternately (A, B, A, B, ...) after a warm-up call, with
a short pause before each call, by :func:`fastsoftmax.bench.interleaved`;
medians are reported. On a busy or small machine the ratios are lower.
"""

import os
import platform

import matplotlib.pyplot as plt
import numba
import numpy as np

import fastsoftmax as fs
from fastsoftmax import reference
from fastsoftmax.bench import interleaved

print(f"{platform.machine()}, {os.cpu_count()} CPUs, {numba.get_num_threads()} Numba threads")

# %%
# The loss and gradient at a few shapes (m rows, n features, k classes), in
# both dtypes.

rng = np.random.default_rng(0)
shapes = [(20_000, 50, 10), (20_000, 200, 10), (5_000, 200, 50)]
rows = []
for m, n, k in shapes:
    for dtype in (np.float32, np.float64):
        X = rng.standard_normal((m, n)).astype(dtype)
        y = rng.integers(0, k, m)
        W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
        b = np.zeros(k, dtype)
        args = (X, y, W, b)
        t_ref, t_fs = interleaved([lambda a=args: reference.loss_and_grad(*a),
                                   lambda a=args: fs.loss_and_grad(*a)],
                                  rounds=5, settle=0.05)
        rows.append((f"({m}, {n}, {k})\n{np.dtype(dtype).name}", t_ref, t_fs))

print(f"{'shape, dtype':<28} {'NumPy ms':>9} {'fastsoftmax ms':>15} {'speed-up':>9}")
for label, t_ref, t_fs in rows:
    print(f"{label.replace(chr(10), ' '):<28} {t_ref * 1e3:9.2f} {t_fs * 1e3:15.2f} "
          f"{t_ref / t_fs:8.1f}x")

# %%
# Times and speed-ups
# -------------------

labels = [r[0] for r in rows]
x = np.arange(len(rows))
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 7), layout="constrained", sharex=True)
ax1.bar(x - 0.2, [r[1] * 1e3 for r in rows], width=0.4, label="NumPy reference")
ax1.bar(x + 0.2, [r[2] * 1e3 for r in rows], width=0.4, label="fastsoftmax")
ax1.set_ylabel("ms per loss and gradient")
ax1.legend()
ax1.set_title("loss_and_grad, medians measured at build time")
ratios = [r[1] / r[2] for r in rows]
ax2.bar(x, ratios, color="tab:green")
ax2.axhline(1, color="black", linewidth=0.8)
for xi, r in zip(x, ratios, strict=True):
    ax2.text(xi, r, f"{r:.1f}x", ha="center", va="bottom")
ax2.set_ylabel("speed-up over NumPy")
ax2.set_xticks(x, labels)
ax2.set_ylim(0, max(ratios) * 1.2)

# %%
# Row-wise softmax
# ----------------
#
# :func:`fastsoftmax.softmax` against ``reference.softmax`` (and
# ``scipy.special.softmax``, which computes the same thing) on 100,000 rows
# of 20 logits.

from scipy.special import softmax as scipy_softmax  # noqa: E402

Z = 3 * rng.standard_normal((100_000, 20))
times = interleaved([lambda: reference.softmax(Z), lambda: scipy_softmax(Z, axis=1),
                     lambda: fs.softmax(Z)], rounds=5, settle=0.05)
names = ["NumPy reference", "scipy.special", "fastsoftmax"]
for name, t in zip(names, times, strict=True):
    print(f"{name:>16}: {t * 1e3:6.2f} ms")

fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
ax.barh(names, [t * 1e3 for t in times], color=["tab:blue", "tab:orange", "tab:green"])
ax.set_xlabel("ms, softmax of (100000, 20) float64")
