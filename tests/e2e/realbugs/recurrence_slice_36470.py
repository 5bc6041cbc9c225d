# Report: https://github.com/pytorch/pytorch/issues/36470
# PyTorch raises at torch.autograd.grad(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor []], which
# is output 0 of AsStrided, is at version 19; expected version 17 instead.
# Cause: f(n) = sigmoid(f(n-1) * x) is computed into rows of one preallocated tensor
# f; each step's product saves the previous row (a view of f), and the next writes
# into f bump its version.
import torch

x = torch.ones(1)
x.requires_grad_()
a = 1
f = torch.zeros(10)
f[0] = a
for i in range(1, 10):
    f[i] = f[i - 1] * x
    f[i] = 1 / (1.0 + torch.exp(-f[i]))
loss = torch.sum(f)
grad = torch.autograd.grad(loss, [x])[0]
