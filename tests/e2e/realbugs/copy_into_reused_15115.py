# Report: https://github.com/pytorch/pytorch/issues/15115
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [1]],
# which is output 0 of torch::autograd::CopyBackwards, is at version 3; expected
# version 2 instead.
# Cause: one tensor x is reused by every iteration: detach_() then copy_() write a
# new value into it, while the product of an earlier iteration saved it for the
# loss summed over all of them. (The report's products were x * 2 and
# x * torch.tensor([2.]); PyTorch 2 saves no x for those, so here x * x.)
import torch

mu = torch.ones(1, requires_grad=True)
x = torch.randn(1)
loss = 0
for _ in range(3):
    x.detach_()
    new_calc = torch.exp(mu)
    x.copy_(new_calc)
    loss += (x * x).sum()
loss.backward()
