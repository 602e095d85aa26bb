"""Optional contenders: PyTorch's CPU autograd for the same loss and gradient.

Returned callables compute exactly what ``fastsoftmax.loss_and_grad(X, y, W,
b)`` computes -- the mean cross-entropy, its gradient in W (n, k) and in b
(k,) -- from tensors built once outside the timed call (``torch.from_numpy``
shares the arrays' memory, so no copy is timed). None when torch is absent.
"""

from __future__ import annotations


def torch_loss_and_grad(X, y, W, b, n_threads=2):
    """A callable running PyTorch's forward and backward pass, or None."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(n_threads)
    Xt = torch.from_numpy(X)
    yt = torch.from_numpy(y.astype("int64"))
    Wt = torch.from_numpy(W.copy()).requires_grad_(True)
    bt = torch.from_numpy(b.copy()).requires_grad_(True)

    def run():
        Wt.grad = None
        bt.grad = None
        loss = torch.nn.functional.cross_entropy(torch.addmm(bt, Xt, Wt), yt)
        loss.backward()
        return float(loss.detach()), Wt.grad, bt.grad

    return run
