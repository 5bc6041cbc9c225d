"""An in-place write through a view of a tensor that exp() saved."""
import torch

x = torch.randn(4, requires_grad=True)
y = x.exp()
v = y[1:3]
v.add_(1)
y.sum().backward()
