# Report: https://github.com/ccarliu/m3ae/issues/15
# PyTorch raises at the in-place change: ... is a view and is being modified inplace.
# This view was created inside a custom Function (or because an input was returned
# as-is) and the autograd logic to handle view+inplace would override the custom
# backward associated with the custom Function, leading to incorrect gradients. ...
# Cause (trimmed): a custom Function returns a view of its input, whose output
# the model then updates in place.
import torch


class Crop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x[:, :2]

    @staticmethod
    def backward(ctx, g):
        out = g.new_zeros(g.shape[0], 4)
        out[:, :2] = g
        return out


torch.manual_seed(0)
w = torch.randn(3, 4, requires_grad=True)
h = w * 1.0
c = Crop.apply(h)
c.mul_(0.5)
c.sum().backward()
