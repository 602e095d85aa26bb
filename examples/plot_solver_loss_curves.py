"""
Every solver on the same problem
================================

:class:`fastsoftmax.SoftmaxRegression` has several solvers (see "Which
solver to pick" in the user guide). This example fits each of them to the
same standardised digits and draws their loss curves: the training loss per
iteration (per epoch for ``"sgd"``) against the optimum, which a long
L-BFGS run finds.

The list of solvers is the estimator's own, so a solver added to the
package appears here without a change to this example.
"""

import time
import warnings

import matplotlib.pyplot as plt
from sklearn.exceptions import ConvergenceWarning

from fastsoftmax import SoftmaxRegression, plot
from fastsoftmax._params import SOLVERS  # the estimator's list of solver names
from fastsoftmax.datasets import load_digits

X, y = load_digits()
X = (X - X.mean(axis=0)) / (X.std(axis=0) + 1e-6)
alpha = 1e-3

# "auto" is not a method of its own: it picks one of the others.
solvers = [s for s in SOLVERS if s != "auto"]
print("solvers:", solvers)

# %%
# The optimum, for reference: L-BFGS run to a tight tolerance.

best = SoftmaxRegression(alpha=alpha, tol=1e-10, max_iter=2000).fit(X, y)
optimum = min(best.loss_curve_)
print(f"optimum loss {optimum:.6f} after {best.n_iter_} iterations")

# %%
# Each solver with its defaults, for at most 100 iterations or epochs. A
# ``ConvergenceWarning`` only says that a solver used up ``max_iter``.

fig, ax = plt.subplots(figsize=(7, 4.8), layout="constrained")
for solver in solvers:
    model = SoftmaxRegression(solver, alpha=alpha, max_iter=100, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - t0
    gap = model.loss_curve_[-1] - optimum
    print(f"{solver:>6}: {model.n_iter_:3d} iterations, {seconds * 1e3:6.1f} ms, "
          f"final loss {model.loss_curve_[-1]:.6f} ({gap:.1e} above the optimum), "
          f"training accuracy {model.score(X, y):.3f}")
    plot.loss_curve(model, ax=ax)

ax.axhline(optimum, color="black", linestyle=":", label="optimum")
ax.set_yscale("log")
ax.set_xlabel("iteration (epoch for sgd)")
ax.set_title(f"digits, alpha = {alpha:g}")
ax.legend()

# %%
# lbfgs reaches the optimum in the fewest passes over the data; sgd gets
# close after a few epochs (its curve is the mean loss over each epoch, with
# the weights in force when each row was seen) and then levels off where its
# step size lets it; bgd, the lecture notes' batch gradient descent, needs
# many more iterations for the same loss.
