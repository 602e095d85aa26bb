"""Compiled kernels: ``@njit`` functions only.

Kernels do no validation and allocate nothing the caller could have
allocated; they write their results into arguments marked OUT in their
docstrings. Inputs are checked and coerced once, at the edge
(:mod:`fastsoftmax._validation`), before a kernel runs.

* :mod:`._config` -- the compilation options (fast-math, caching) shared by every kernel.
* :mod:`._cache` -- Numba's on-disk cache of the kernels, made stale by a change to any
  kernel file (installed here, before any kernel is defined).
* :mod:`._inline` -- Numba's inliner deriving each of the kernels' helpers once per function
  and copying it with one scope per copy (installed here: it cuts the kernels' compile time).
* :mod:`._ssa` -- Numba's SSA reconstruction of the kernels visiting only the blocks that
  name each variable (installed here, for the same reason).
* :mod:`._copies` -- Numba's copy propagation comparing its rounds without deep copies
  (installed here, for the same reason).
* :mod:`._wrappers` -- the libraries of the kernels' parallel loops compiling a chunk's code
  once instead of five times (installed here, for the same reason).
* :mod:`._locks` -- one process at a time compiling a kernel signature, the others loading
  it from the cache (installed here).
* :mod:`._common` -- row chunks, the vector exp, row softmax, row status codes, serial
  zeroing.
* :mod:`._checks` -- parallel NaN/inf and probability-row validation scans.
* :mod:`._rowwise` -- row-wise softmax, log-softmax and logsumexp.
* :mod:`._micro` -- register-blocked logits and gradient-accumulation tiles.
* :mod:`._ahead` -- forward tiles written in LLVM IR that prefetch the rows ahead,
  and software prefetches for Numba code.
* :mod:`._backward` -- gradient-accumulation tiles written in LLVM IR.
* :mod:`._fused` -- the fused loss-and-gradient pass over X (small-k and GEMM strategies).
* :mod:`._hessp` -- Hessian-vector products, fused over X (dense and CSR).
* :mod:`._sgd` -- one whole mini-batch SGD epoch per call, with momentum.
* :mod:`._predict` -- logits, probabilities and log-probabilities in row blocks.
* :mod:`._sparse` -- the same for CSR data: loss/gradient, SGD epoch, logits and
  prediction, validation scan, and the CSR row helpers the CSR Hessian product uses.
"""

from . import _copies, _inline, _locks, _ssa, _wrappers
from ._cache import install_locator

install_locator()
_inline.install()
_ssa.install()
_copies.install()
_wrappers.install()
_locks.install()
