"""Compiled kernels: ``@njit`` functions only.

Kernels do no validation and allocate nothing the caller could have
allocated; they write their results into ``out`` arrays. Inputs are checked
and coerced once, in :mod:`fastsoftmax._validation`, before a kernel runs.

* :mod:`._checks` -- parallel NaN/inf and probability-row validation scans.
* :mod:`._config` -- the compilation options (fast-math, caching) shared by every kernel.
* :mod:`._fused` -- the fused loss-and-gradient pass over X (small-k and GEMM strategies).
* :mod:`._predict` -- arg-max prediction in row blocks, without the (m, k) logits.
* :mod:`._sgd` -- one whole mini-batch SGD epoch per call, with momentum.
* :mod:`._softmax` -- row-wise softmax, log-softmax and logsumexp.
"""
