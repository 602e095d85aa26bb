"""
Handwritten digits: what each class's weights look like
========================================================

The second example of the lecture notes classifies handwritten digits. With
scikit-learn's 8 × 8 digits (1797 images, shipped with scikit-learn) the
weight vector of each class is itself an 8 × 8 image:
:func:`fastsoftmax.plot.class_weights` draws them side by side, red where a
dark pixel pushes towards the class and blue where it pushes away. The
confusion matrix on held-out images shows which digits are mistaken for
which.

The same code draws 28 × 28 images for MNIST, read from the IDX files in a
folder you have with :func:`fastsoftmax.datasets.load_mnist`.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import train_test_split

from fastsoftmax import SoftmaxRegression, plot
from fastsoftmax.datasets import load_digits

X, y = load_digits(dtype=np.float32)      # grey levels 0..16, float32 trains in float32
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0,
                                                    stratify=y)
# Scale with the training images' statistics only.
mean, scale = X_train.mean(axis=0), X_train.std(axis=0) + 1e-6
X_train, X_test = (X_train - mean) / scale, (X_test - mean) / scale

# %%
# A little more L2 penalty than the default gives smoother weight images.

model = SoftmaxRegression(alpha=1e-2).fit(X_train, y_train)
print(f"{model.n_iter_} L-BFGS iterations; test accuracy {model.score(X_test, y_test):.3f}; "
      f"weights {model.coef_.dtype}, shape {model.coef_.shape}")

fig, ax = plt.subplots(figsize=(11, 5), layout="constrained")
plot.class_weights(model, ax=ax)

# %%
# Confusion matrix
# ----------------
#
# Rows are the true digits, columns the predicted ones; the diagonal holds
# the correct answers.

fig, ax = plt.subplots(figsize=(7, 6), layout="constrained")
plot.confusion_matrix(model, X_test, y_test, ax=ax)
