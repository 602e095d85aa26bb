"""
Early stopping on held-out data
===============================

With ``early_stopping=True``, :class:`fastsoftmax.SoftmaxRegression` holds
out ``validation_fraction`` of the training rows (stratified), watches the
loss on them instead of the training loss, stops when it has not improved
for ``n_iter_no_change`` epochs, and keeps the weights with the best
held-out loss. :func:`fastsoftmax.plot.loss_curve` draws both curves.

Many features and few rows make the training loss a poor guide: here, 300
digits with 64 pixels and no penalty, fitted by SGD.
"""

import matplotlib.pyplot as plt
import numpy as np

from fastsoftmax import SoftmaxRegression, plot
from fastsoftmax.datasets import load_digits

X, y = load_digits()
rng = np.random.default_rng(0)
rows = rng.permutation(len(y))
train, test = rows[:300], rows[300:]
X = X / 16

model = SoftmaxRegression("sgd", alpha=0.0, early_stopping=True, validation_fraction=0.2,
                          n_iter_no_change=10, max_iter=500, batch_size=8,
                          learning_rate="constant", eta0=0.05, random_state=0)
model.fit(X[train], y[train])
best = int(np.argmin(model.validation_loss_curve_)) + 1
print(f"stopped after {model.n_iter_} epochs; best held-out loss at epoch {best}; "
      f"accuracy on the other {len(test)} images {model.score(X[test], y[test]):.3f}")

fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
plot.loss_curve(model, ax=ax)
ax.axvline(best, color="grey", linestyle=":", label="weights kept")
ax.legend()
ax.set_title("sgd with early_stopping=True")
