# Report: https://github.com/pytorch/pytorch/issues/36470 -- the fix: keep each step's
# value in a list and stack them, so no step writes a tensor an earlier step saved.
import torch

x = torch.ones(1)
x.requires_grad_()
a = 1
f = [torch.full((1,), float(a))]
for i in range(1, 10):
    g = f[i - 1] * x
    f.append(1 / (1.0 + torch.exp(-g)))
loss = torch.sum(torch.cat(f))
grad = torch.autograd.grad(loss, [x])[0]
