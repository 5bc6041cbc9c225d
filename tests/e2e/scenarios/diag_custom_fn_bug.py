"""A custom autograd.Function (a straight-through clamp) saves its input; the caller normalises that input
in place afterwards (realcode4's custom_fn_bug). diagnose's "saved by" is the ctx.save_for_backward
line, which is no op (not in the trace): read from this file."""
import torch


class ClampST(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)  # @save
        ctx.lo, ctx.hi = lo, hi
        return x.clamp(lo, hi)  # @use

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ((x > ctx.lo - 1) & (x < ctx.hi + 1)).float(), None, None


torch.manual_seed(0)
w = torch.randn(5, 3, requires_grad=True)
feats = torch.randn(4, 5) @ w
out = ClampST.apply(feats, -1.0, 1.0)  # @call
feats -= feats.mean(0)  # @mut
loss = out.pow(2).sum()
loss.backward()
