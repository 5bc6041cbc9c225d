"""A custom autograd Function returns a view of its input (here as-is);
changing its output in place is refused: "Output 0 of Identity is a view and
is being modified inplace. This view was created inside a custom Function
..."."""
import torch


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)  # @view_inner

    @staticmethod
    def backward(ctx, g):
        return g


w = torch.randn(5, requires_grad=True)
h = w * 3
out = Identity.apply(h)  # @view
out.add_(1)  # @inplace
loss = (out * out).sum()
loss.backward()
print("ok")
