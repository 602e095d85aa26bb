"""Small calls after an idle pause and back to back ("cold" and "hot" threads).

Target 2's slowest cells are small calls that open a parallel region. How
much of their time is the wake-up of idle worker threads shows in the same
call timed twice: after a 0.2 s pause (what ratios.py does before every
timed call, so that one contender's spinning threads do not slow the next)
and back to back, as in a solver's loop. Both fastsoftmax and the NumPy
reference (whose BLAS has threads of its own) are timed both ways.

    python benchmarks/hot_cold.py [--rounds 9]

prints a Markdown table.
"""

import argparse

import numpy as np
from _common import at_least_one  # benchmarks/ is on the path of a script run from it
from ratios import _problem, interleaved

import fastsoftmax as fs
from fastsoftmax import reference

CELLS = [(1000, 3000, 10, "float32"), (1000, 784, 100, "float32"),
         (1000, 3000, 100, "float32"), (1000, 3000, 10, "float64")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=at_least_one, default=9)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print("| m | n | k | dtype | reference ms, after 0.2 s | fastsoftmax ms, after 0.2 s | "
          "ratio | reference ms, back to back | fastsoftmax ms, back to back | ratio |\n"
          "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for m, n, k, dtype in CELLS:
        X, y, W, b = _problem(m, n, k, dtype, rng)
        fns = [lambda: reference.loss_and_grad(X, y, W, b),  # noqa: B023
               lambda: fs.loss_and_grad(X, y, W, b)]  # noqa: B023
        cold = interleaved(fns, a.rounds, settle=0.2)
        # Back to back: ten calls of one contender in a row, the median of
        # the last nine (the first pays the wake-up).
        hot = []
        for f in fns:
            times = interleaved([f] * 10, a.rounds, settle=0.0)
            hot.append(float(np.median(times[1:])))
        print(f"| {m} | {n} | {k} | {dtype} | {cold[0] * 1e3:.2f} | {cold[1] * 1e3:.2f} | "
              f"**{cold[0] / cold[1]:.2f}** | {hot[0] * 1e3:.2f} | {hot[1] * 1e3:.2f} | "
              f"**{hot[0] / hot[1]:.2f}** |", flush=True)


if __name__ == "__main__":
    main()
