"""Warnings raised by fastsoftmax."""

from sklearn.exceptions import ConvergenceWarning

__all__ = ["ConvergenceWarning", "DivergenceWarning"]


class DivergenceWarning(ConvergenceWarning):
    """Training stopped because the loss, the logits or the weights became non-finite."""
