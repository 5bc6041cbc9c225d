# The fix of https://github.com/pytorch/pytorch/issues/15115 (copy_into_reused_15115.py):
# each pass writes a new copy of x (x = x.clone() before the detach_() and the copy_()),
# so the x an earlier pass's product saved is never written again.
import torch

mu = torch.ones(1, requires_grad=True)
x = torch.randn(1)
loss = 0
for _ in range(3):
    x = x.clone()
    x.detach_()
    new_calc = torch.exp(mu)
    x.copy_(new_calc)
    loss += (x * x).sum()
loss.backward()
