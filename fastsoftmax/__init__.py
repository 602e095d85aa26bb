"""fastsoftmax: softmax regression on multicore CPUs with fused Numba kernels.

Public functions
----------------
softmax, log_softmax, logsumexp
    Stable row-wise softmax family.
loss_and_grad
    Cross-entropy loss and gradient of softmax regression in one fused,
    multithreaded pass over the data.
hessp
    The objective's Hessian applied to a direction, in one fused pass.

Estimator
---------
SoftmaxRegression
    scikit-learn-compatible classifier trained with truncated Newton (the
    default), L-BFGS, batch gradient descent or mini-batch SGD (with
    ``partial_fit``) on the fused kernels.

``fastsoftmax.reference`` holds the same functions in plain NumPy.

show_config
    What fastsoftmax runs on this machine and why: versions, threads, BLAS
    libraries, this host's calibration, and for a given shape the kernel
    strategy, variant and blocks.

Modules imported on demand
--------------------------
fastsoftmax.datasets
    The lecture notes' toy blobs, scikit-learn's digits, and an MNIST reader
    for the IDX files in a folder you have (nothing is downloaded).
fastsoftmax.plot
    Loss curve, decision regions, confusion matrix and per-class weight
    images of a fitted model (needs ``pip install fastsoftmax[plot]``).
fastsoftmax.cli
    The ``fastsoftmax`` command (``demo``, ``train``, ``predict``, ``bench``),
    also ``python -m fastsoftmax``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._estimator import SoftmaxRegression
    from ._functions import hessp, log_softmax, logsumexp, loss_and_grad, softmax
    from ._report import show_config
    from .exceptions import DivergenceWarning

__version__ = "0.1.0"

# Every public name is imported on first use. The estimator and the warning
# class are built on scikit-learn, whose import takes about a second (it
# loads SciPy's statistics and pandas); the functions load Numba (about
# 0.2 s). So ``import fastsoftmax``, ``fastsoftmax --version`` or ``--help``,
# and the command line's ``predict`` of dense data pay for neither.
_LAZY = {"SoftmaxRegression": "._estimator", "DivergenceWarning": ".exceptions",
         "show_config": "._report",
         **{name: "._functions" for name in ("softmax", "log_softmax", "logsumexp",
                                             "loss_and_grad", "hessp")}}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fastsoftmax' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "softmax",
    "log_softmax",
    "logsumexp",
    "loss_and_grad",
    "hessp",
    "SoftmaxRegression",
    "DivergenceWarning",
    "show_config",
    "__version__",
]
