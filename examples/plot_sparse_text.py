"""
A sparse text-like problem
==========================

Text classification is the classic sparse problem: a document is a bag of
words, so a row of X has a few dozen nonzeros among tens of thousands of
vocabulary terms. :func:`fastsoftmax.datasets.make_text_like` makes such a
problem -- TF-IDF rows of unit norm, Zipf-distributed background terms, a
vocabulary of its own for each class, 5 % label noise -- and
:class:`fastsoftmax.SoftmaxRegression` trains on the ``scipy.sparse`` CSR
matrix directly, without ever densifying it.

We compare each solver's fit time and held-out accuracy on the sparse matrix
and look at the terms that weigh most for a class.
"""

import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split

from fastsoftmax import SoftmaxRegression
from fastsoftmax._params import SOLVERS  # the estimator's list of solver names
from fastsoftmax.datasets import make_text_like

X, y = make_text_like(n_samples=4000, n_features=8000, n_classes=5, nnz_per_row=40,
                      random_state=0, dtype=np.float32)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0,
                                                    stratify=y)
density = X.nnz / (X.shape[0] * X.shape[1])
print(f"X: {X.shape[0]} x {X.shape[1]} CSR, {X.nnz} nonzeros ({density:.2%} dense); "
      f"as a dense float32 array it would take {X.shape[0] * X.shape[1] * 4 / 2**20:.0f} MiB, "
      f"as CSR {(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / 2**20:.1f} MiB")

fig, ax = plt.subplots(figsize=(7, 3), layout="constrained")
ax.spy(X[:100, :1000], markersize=1)
ax.set_title("the first 100 documents x 1000 terms")

# %%
# Every solver on the sparse matrix
# ---------------------------------

solvers = [s for s in SOLVERS if s != "auto"]
results = {}
for solver in solvers:
    model = SoftmaxRegression(solver, alpha=1e-4, max_iter=100, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        model.fit(X_train, y_train)
        seconds = time.perf_counter() - t0
    results[solver] = (seconds, model.score(X_test, y_test), model)
    print(f"{solver:>6}: {seconds * 1e3:7.1f} ms, held-out accuracy {results[solver][1]:.3f}")

fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
names = list(results)
ax.bar(names, [results[s][0] * 1e3 for s in names])
for i, s in enumerate(names):
    ax.text(i, results[s][0] * 1e3, f"acc {results[s][1]:.3f}", ha="center", va="bottom")
ax.set_ylabel("fit time, ms")
ax.set_title("sparse fit, 3000 documents x 8000 terms")

# %%
# The heaviest terms of each class
# --------------------------------
#
# Each class was given its own small vocabulary; the largest weights of a
# class should pick those terms out.

model = results["lbfgs"][2]
fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
for j in range(len(model.classes_)):
    top = np.argsort(model.coef_[j])[::-1][:10]
    ax.scatter(top, np.full(len(top), j), s=12)
ax.set_xlabel("term index")
ax.set_ylabel("class")
ax.set_title("the 10 largest weights of each class")
