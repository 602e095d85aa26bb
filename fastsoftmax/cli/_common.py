"""What every part of the command line shares: its error, the progress switch, standardisation."""

from __future__ import annotations

import sys

import numpy as np

PROG = "fastsoftmax"
PARQUET_EXTRA = "pip install fastsoftmax[parquet]"

# The estimator's parameters that are options of `fastsoftmax train`, by
# parameter name; each option's default is the estimator's own.
PARAM_OPTIONS = {
    "solver": "--solver", "alpha": "--alpha", "max_iter": "--max-iter", "tol": "--tol",
    "n_iter_no_change": "--n-iter-no-change", "batch_size": "--batch-size",
    "learning_rate": "--learning-rate", "eta0": "--eta0", "momentum": "--momentum",
    "early_stopping": "--early-stopping", "validation_fraction": "--validation-fraction",
    "class_weight": "--class-weight", "random_state": "--random-state",
    "n_threads": "--n-threads",
}

# Rows per block when a whole file is read or an array is scanned: about
# 8 MiB of float64 per block, so the copies made per block stay small next
# to the data however many features there are.
BLOCK_VALUES = 1 << 20


class CLIError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


def one_line(text: str) -> str:
    """``text`` with every run of white space made one space."""
    return " ".join(text.split())


def block_rows(n_features: int) -> int:
    """Rows per block of :data:`BLOCK_VALUES` values (at least 1024)."""
    return max(1024, BLOCK_VALUES // max(1, n_features))


def progress_wanted(flag: bool | None) -> bool:
    """``--progress`` / ``--no-progress`` if given, else whether stderr is a terminal."""
    if flag is not None:
        return flag
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Moments:
    """Column means and standard deviations accumulated over blocks of rows.

    Each block contributes its count, mean and sum of squared deviations
    from its own mean (two passes over the block, in float64); blocks are
    merged with the pairwise update of Chan, Golub and LeVeque (1979). This
    is Welford's algorithm applied a block at a time: no running sum of
    squares, so no cancellation when the mean is large against the spread,
    and the result does not depend on how the rows were cut into blocks
    beyond rounding.
    """

    def __init__(self, n_features: int) -> None:
        self.count = 0
        self.mean = np.zeros(n_features)
        self.m2 = np.zeros(n_features)

    def add(self, X: np.ndarray) -> None:
        """Take the rows of one block into account."""
        b = X.shape[0]
        if b == 0:
            return
        block = np.asarray(X, dtype=np.float64)
        mean_b = block.mean(axis=0)
        m2_b = np.square(block - mean_b).sum(axis=0)
        total = self.count + b
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (b / total)
        self.m2 = self.m2 + m2_b + np.square(delta) * (self.count * b / total)
        self.count = total

    def scaler(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, scale) with scale the population standard deviation, 1 for constant columns."""
        scale = np.sqrt(self.m2 / max(self.count, 1))
        scale[~(scale > 0)] = 1.0  # constant columns: centre only, as StandardScaler does
        return self.mean.copy(), scale


def standardize(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, scale) of the columns of X, read a block of rows at a time."""
    moments = Moments(X.shape[1])
    step = block_rows(X.shape[1])
    for start in range(0, X.shape[0], step):
        moments.add(X[start:start + step])
    return moments.scaler()


def apply_scaler(X: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(X - mean) / scale`` in float64 (a new array)."""
    return (X.astype(np.float64) - mean) / scale


def scale_in_place(X: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> None:
    """``X = (X - mean) / scale`` for a float64 X the caller owns (no temporary array)."""
    X -= mean
    X /= scale
