"""Writes autograd cannot see, through memory handed out of PyTorch.

    cap_numpy.py CASE

numpy: a custom Function saves its output; a "fused kernel" writes into the
same memory through a NumPy view (no version bump, no error, wrong
gradient). clean: the same without the write. Prints the gradient."""
import sys

import torch


class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad):
        result, = ctx.saved_tensors
        return grad * result


torch.manual_seed(0)
x = torch.randn(4, requires_grad=True)
y = Exp.apply(x)  # @save
if sys.argv[1] == "numpy":
    view = y.detach().numpy()  # @touch
    view[:] = 0.0  # @write
y.sum().backward()  # @backward
print("grad", x.grad.tolist())
