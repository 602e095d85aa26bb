"""
The L2 penalty, and scikit-learn's ``C``
========================================

:class:`fastsoftmax.SoftmaxRegression` minimises the mean cross-entropy plus
``alpha/2 ‖W‖²``. A larger ``alpha`` shrinks the weights: less fitting of
the training images' noise, more bias. This example sweeps ``alpha`` on the
digits and draws the training and held-out accuracy and the size of the
weights; then checks that ``alpha = 1 / (C m)`` gives scikit-learn's
``LogisticRegression(C=C)`` optimum.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from fastsoftmax import SoftmaxRegression
from fastsoftmax.datasets import load_digits

X, y = load_digits()
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0,
                                                    stratify=y)
mean, scale = X_train.mean(axis=0), X_train.std(axis=0) + 1e-6
X_train, X_test = (X_train - mean) / scale, (X_test - mean) / scale

# %%
# A warm start from the previous ``alpha``'s solution makes the sweep cheap.

alphas = np.logspace(-5, 0, 11)
model = SoftmaxRegression(warm_start=True, max_iter=500)
train_acc, test_acc, norms = [], [], []
for alpha in alphas:
    model.set_params(alpha=alpha).fit(X_train, y_train)
    train_acc.append(model.score(X_train, y_train))
    test_acc.append(model.score(X_test, y_test))
    norms.append(np.linalg.norm(model.coef_))

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
ax1.semilogx(alphas, train_acc, marker="o", label="training")
ax1.semilogx(alphas, test_acc, marker="o", label="held out")
ax1.set_xlabel("alpha")
ax1.set_ylabel("accuracy")
ax1.legend()
ax1.grid(True, alpha=0.3)
ax2.loglog(alphas, norms, marker="o")
ax2.set_xlabel("alpha")
ax2.set_ylabel("‖W‖ (Frobenius)")
ax2.grid(True, alpha=0.3)
fig.suptitle("digits: the L2 penalty")

# %%
# Same optimum as scikit-learn
# ----------------------------
#
# scikit-learn's ``LogisticRegression`` minimises ``C Σ CE_i + ½‖W‖²``;
# divided by ``C m`` that is our objective with ``alpha = 1 / (C m)``, so
# both reach the same weights (to the solvers' tolerances).

C = 0.1
m = len(y_train)
ours = SoftmaxRegression(alpha=1 / (C * m), tol=1e-8, max_iter=1000).fit(X_train, y_train)
theirs = LogisticRegression(C=C, tol=1e-10, max_iter=5000).fit(X_train, y_train)
print(f"alpha = 1 / (C m) = {1 / (C * m):.3e}")
print(f"largest weight difference: {np.abs(ours.coef_ - theirs.coef_).max():.1e} "
      f"(weights up to {np.abs(theirs.coef_).max():.2f})")
print(f"held-out accuracy: fastsoftmax {ours.score(X_test, y_test):.4f}, "
      f"scikit-learn {theirs.score(X_test, y_test):.4f}")
