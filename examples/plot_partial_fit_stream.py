"""
Learning from a stream with ``partial_fit``
============================================

When data arrives in chunks -- read from disk piece by piece, or produced
while the model is in use -- :meth:`fastsoftmax.SoftmaxRegression.partial_fit`
updates the model with one epoch of mini-batch SGD per chunk, carrying the
momentum and the learning-rate schedule from call to call. This is true
multinomial online learning (scikit-learn's ``SGDClassifier`` is
one-vs-rest).

Here the digits' training images arrive in chunks of 50, three times over,
and we follow the accuracy on held-out images as the stream goes by, for
two learning-rate schedules, against the full-batch L-BFGS model as a
reference.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import train_test_split

from fastsoftmax import SoftmaxRegression
from fastsoftmax.datasets import load_digits

X, y = load_digits(dtype=np.float32)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0,
                                                    stratify=y)
X_train, X_test = X_train / 16, X_test / 16          # grey levels to [0, 1]
classes = np.unique(y)


def stream(X, y, chunk=50, passes=3, seed=0):
    """Yield (X_chunk, y_chunk): the rows in a new random order on each pass."""
    rng = np.random.default_rng(seed)
    for _ in range(passes):
        order = rng.permutation(len(y))
        for start in range(0, len(y), chunk):
            rows = order[start:start + chunk]
            yield X[rows], y[rows]


# %%
# One model per schedule. ``classes`` must be given on the first call: a
# chunk need not hold every class.

schedules = {
    "constant, eta0=0.05": dict(learning_rate="constant", eta0=0.05),
    "invscaling, eta0=0.2": dict(learning_rate="invscaling", eta0=0.2, power_t=0.5),
}
curves = {}
for name, params in schedules.items():
    model = SoftmaxRegression("sgd", batch_size=10, random_state=0, **params)
    seen, accuracy = [], []
    for X_chunk, y_chunk in stream(X_train, y_train):
        model.partial_fit(X_chunk, y_chunk, classes=classes)
        seen.append((seen[-1] if seen else 0) + len(y_chunk))
        accuracy.append(model.score(X_test, y_test))
    curves[name] = (seen, accuracy)
    print(f"{name}: {len(seen)} chunks, final held-out accuracy {accuracy[-1]:.3f}")

full = SoftmaxRegression().fit(X_train, y_train)
print(f"full-batch lbfgs: held-out accuracy {full.score(X_test, y_test):.3f}")

# %%
# After a single pass over the data (1257 images) the streamed models are
# within a few points of the full-batch one.

fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
for name, (seen, accuracy) in curves.items():
    ax.plot(seen, accuracy, label=f"partial_fit, {name}")
ax.axhline(full.score(X_test, y_test), color="black", linestyle=":",
           label="full-batch lbfgs")
for k in range(1, 3):
    ax.axvline(k * len(y_train), color="grey", linewidth=0.8)
ax.set_xlabel("training images seen")
ax.set_ylabel("held-out accuracy")
ax.set_ylim(0.5, 1.0)
ax.set_title("digits arriving in chunks of 50, three passes")
ax.legend(loc="lower right")
ax.grid(True, alpha=0.3)
