"""A write through .data: it does not share the version counter, so
autograd does not notice and backward succeeds with a stale gradient."""
import torch

w = torch.ones(3, requires_grad=True)
x = torch.tensor([1.0, 2.0, 3.0])
y = (w * x).sum()
wd = w.data
wd.mul_(2)
y.backward()
print("grad", w.grad.tolist())
