"""
The lecture notes' toy problem: three Gaussian classes
=======================================================

The first example of the lecture notes: three classes in 2-D, 500 points
each, drawn from Gaussians with means (2, 2), (8, 3) and (3, 6) and identity
covariance. Softmax regression separates them with three linear decision
regions.

We fit it twice: first by hand, with plain gradient descent on
:func:`fastsoftmax.loss_and_grad` (the fused loss and gradient: one pass over
X, no m × k matrix), then with :class:`fastsoftmax.SoftmaxRegression`, and
draw the regions with :func:`fastsoftmax.plot.decision_regions`.
"""

import matplotlib.pyplot as plt
import numpy as np

import fastsoftmax
from fastsoftmax import SoftmaxRegression, plot
from fastsoftmax.datasets import make_blobs

X, y = make_blobs(random_state=0)         # (1500, 2) and labels 0, 1, 2
print(X.shape, np.bincount(y))

# %%
# Gradient descent by hand
# ------------------------
#
# Standardise the features, start from W = 0 (every class has probability
# 1/3, so the loss is log 3) and take 300 steps of size 1 along the negative
# gradient: the lecture notes' batch gradient descent, W ← W − η ∇J.

Xs = (X - X.mean(axis=0)) / X.std(axis=0)
W = np.zeros((2, 3))
b = np.zeros(3)
losses = []
for _ in range(300):
    loss, grad_W, grad_b = fastsoftmax.loss_and_grad(Xs, y, W, b)
    losses.append(loss)
    W -= 1.0 * grad_W
    b -= 1.0 * grad_b
accuracy = np.mean(np.argmax(Xs @ W + b, axis=1) == y)
print(f"loss {losses[0]:.4f} (log 3 = {np.log(3):.4f}) -> {losses[-1]:.4f}, "
      f"training accuracy {accuracy:.4f}")

fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
ax.plot(losses)
ax.set_xlabel("iteration")
ax.set_ylabel("mean cross-entropy")
ax.set_yscale("log")
ax.set_title("gradient descent by hand on fastsoftmax.loss_and_grad")
ax.grid(True, alpha=0.3)

# %%
# The estimator
# -------------
#
# :class:`~fastsoftmax.SoftmaxRegression` does the same with L-BFGS by
# default, on the raw features, and stops at the optimum. Its decision
# regions are the picture of the lecture notes.

model = SoftmaxRegression().fit(X, y)
print(f"lbfgs: {model.n_iter_} iterations, training accuracy {model.score(X, y):.4f}")

fig, ax = plt.subplots(figsize=(6.4, 4.8), layout="constrained")
plot.decision_regions(model, X, y, ax=ax)

# %%
# The probabilities behind the regions
# ------------------------------------
#
# A region is where its class has the largest probability; near the
# boundaries the model is unsure. :meth:`~fastsoftmax.SoftmaxRegression.predict_proba`
# gives them: here the probability of each class along a path that goes
# from one class mean to the next and back to the first.

means = np.array([[2.0, 2.0], [8.0, 3.0], [3.0, 6.0], [2.0, 2.0]])
t = np.linspace(0, 1, 200)
path = np.concatenate([(1 - t)[:, None] * a + t[:, None] * c
                       for a, c in zip(means[:-1], means[1:], strict=True)])
proba = model.predict_proba(path)

fig, ax = plt.subplots(figsize=(6.4, 3.5), layout="constrained")
for j in range(3):
    ax.plot(proba[:, j], label=f"class {j}")
ax.set_xticks([0, 200, 400, 600], ["mean 0", "mean 1", "mean 2", "mean 0"])
ax.set_ylabel("probability")
ax.set_title("predict_proba along the triangle of the class means")
ax.legend()
ax.grid(True, alpha=0.3)
