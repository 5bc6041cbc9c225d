# Report: https://github.com/pytorch/pytorch/issues/9391
# PyTorch raises at b.sum().backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [3]],
# which is output 0 of SigmoidBackward0, is at version 1; expected version 0 instead.
# Cause: sigmoid saves its result b; b[1] = 2 writes into it.
import torch

a = torch.tensor([1, 2, 3.], requires_grad=True)
b = a.sigmoid()
b[1] = 2
b.sum().backward()
print(a.grad)
