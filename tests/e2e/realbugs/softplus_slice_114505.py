# Report: https://github.com/pytorch/pytorch/issues/114505
# PyTorch raises in jacobian's backward: one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [3]],
# which is output 0 of AsStrided, is at version 2; expected version 1
# instead. ...
# Cause: Softplus saves its input b[:, 0], a view of b; the assignment of its result
# into b[:, 1] writes into the same tensor b.
import torch


def func(a):
    b = torch.zeros_like(a)
    b[:, 0] = a[:, 0]
    b[:, 1] = torch.nn.Softplus()(b[:, 0])
    return b


torch.manual_seed(0)
print(torch.autograd.functional.jacobian(func, torch.randn(3, 2)))
