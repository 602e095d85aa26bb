"""Kernel launches for CSR X: the engine the objective uses on sparse data.

:class:`SparseEngine` has :class:`~fastsoftmax._dense.DenseEngine`'s
interface (``gradient``, ``hessp``, ``proba_buffer``, ``no_proba``) over
the launchers of :mod:`fastsoftmax._sparse`. Parameters come and go in
coef layout (k, n); the sparse kernels work in W layout (n, k). A coef
that is the transposed view of a C-contiguous W goes in without a copy
(else one O(n k) copy), and the gradient comes out as the transposed view
of the kernels' fresh (n, k) result (Fortran-ordered coef layout), no copy.
The gradient scheme ("panels", "scatter" or "transpose", see
:func:`fastsoftmax._sparse.gradient_scheme`) is chosen once per engine;
the copy of X it may need (transposed, or by panels) is built once and kept.

A small problem runs its passes on the calling thread, as the dense
engine's do (:func:`fastsoftmax._launch.serial_call`, the work counted by
:func:`fastsoftmax._launch.sparse_launch_work`): after an idle pause a
parallel pass first waits for the OpenMP workers to wake.

The L2 term is added inside the kernels' column pass (see ``gradient``).
Hessian products always read the probabilities P (m, k) stored by the
gradient pass: on sparse data P is small next to what the products cost
otherwise (a recompute is a second gather pass over the nonzeros), and
a Newton fit on 2 million features holds n k numbers per vector anyway.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _sparse
from ._launch import call_ended, serial_call, sparse_launch_work


class SparseEngine:
    """The sparse kernels on one data set whose X is a :class:`fastsoftmax._sparse.CSR`.

    ``warm``: the calls come in a solver's loop, as for
    :class:`fastsoftmax._dense.DenseEngine`.
    """

    strategy = "sparse"
    mode = "cached"
    uses_blas = False  # the sparse kernels make no BLAS calls

    def __init__(self, data, warm: bool = False):
        self.data = data
        self.k = data.n_classes
        self.dtype = data.dtype
        csr = data.X
        # One thread (no parallel region) for a small problem; None: the
        # count in force. The scheme is chosen for that count: on one thread
        # the scatter scheme needs no per-thread sums.
        work = sparse_launch_work(csr.shape[0], csr.nnz, self.k)
        self._threads = 1 if serial_call(work, warm) else None
        scheme = _sparse.gradient_scheme(csr, self.k, self._threads)
        self._XT = (_sparse.transpose(csr) if scheme == "transpose"
                    else _sparse.panels(csr, self.k, self._threads) if scheme == "panels"
                    else None)
        self.no_proba = np.empty((0, self.k), dtype=self.dtype)

    def _y(self):
        return self.data.targets if self.data.soft else self.data.labels

    def proba_buffer(self) -> np.ndarray:
        """Where a gradient pass stores P (m, k) for later products."""
        return np.empty((self.data.n_rows, self.k), dtype=self.dtype)

    def gradient(self, coef, bias, P=None, alpha=0.0):
        """(J, its coef gradient in coef layout, intercept gradient), storing P.

        J = Σ w_i CE_i / Σw + alpha/2 ||coef||². The L2 term goes into the
        column pass, which writes each row of the gradient anyway: on wide
        models (millions of weights) NumPy's separate passes over coef
        cost as much as the pass over X. Raises ValueError naming the first
        row whose logits are not finite.
        """
        data = self.data
        loss, G, gb = _sparse.loss_and_grad(
            data.X, self._y(), data.sample_weight, np.ascontiguousarray(coef.T), bias,
            alpha=alpha, n_threads=self._threads, P=P, XT=self._XT, total=data.total_weight)
        call_ended(self._threads is None)
        return loss, G.T, gb  # a fresh (n, k) array: its transpose is the coef layout

    def hessp_kernels(self) -> list[tuple[Any, tuple]]:
        """[(kernel, argument types)]: the row pass this engine's first Hessian product compiles.

        For :mod:`fastsoftmax._side_compile`, before the fit's first
        gradient: :func:`fastsoftmax._sparse.hessp_row_pass` on the data with
        a zero direction (P's type is :meth:`proba_buffer`'s). The column
        pass after it runs the kernels the gradient compiles.
        """
        n, k, dt = self.data.n_features, self.k, self.dtype
        kernel, args, _ = _sparse.hessp_row_pass(
            self.data.X, self.no_proba, self.data.sample_weight, np.zeros((n, k), dt),
            np.zeros(k, dt), XT=self._XT, total=self.data.total_weight)
        return [(kernel, tuple(kernel.typeof_pyval(a) for a in args))]

    def hessp(self, coef, bias, P, V, cv, alpha=0.0, scale=1.0, out=None):
        """Return H (scale V, scale cv): (HV in coef layout, Hc), HV with its L2 term.

        ``out`` (k, n), the coef layout: HV is written there (without a
        copy when out is the transpose of a C-contiguous (n, k)).
        """
        if P.shape[0] == 0:  # the one-pass public product: P from a gradient pass
            P = self.proba_buffer()
            self.gradient(coef, bias, P)
        target = out.T if out is not None and out.T.flags.c_contiguous else None
        HV, Hc = _sparse.hessp(self.data.X, P, self.data.sample_weight,
                               np.ascontiguousarray(V.T), cv, alpha=alpha,
                               n_threads=self._threads, XT=self._XT,
                               total=self.data.total_weight, scale=scale, out=target)
        call_ended(self._threads is None)
        if out is None:
            return HV.T, Hc
        if target is None:
            out[...] = HV.T
        return out, Hc
