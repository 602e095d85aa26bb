"""Compiled kernels: ``@njit`` functions only.

Kernels do no validation and allocate nothing the caller could have
allocated; they write their results into ``out`` arrays. Inputs are checked
and coerced once, in :mod:`fastsoftmax._validation`, before a kernel runs.

* :mod:`._softmax` -- row-wise softmax, log-softmax and logsumexp.
* :mod:`._fused` -- the fused loss-and-gradient pass over X.
* :mod:`._blas` -- BLAS GEMM callable from compiled code, for the
  large-k strategy of the fused pass.
"""
