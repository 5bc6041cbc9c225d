# Report: https://github.com/PingoLH/FCHarDNet/issues/61
# PyTorch raises at the assignment: a (view of a) leaf Variable that requires grad
# is being used in an in-place operation.
# Cause: copying fused weights into a conv's weight through a slice.
import torch
import torch.nn as nn

torch.manual_seed(0)
cconv = nn.Conv2d(3, 4, 3)
W = torch.randn(4, 3, 3, 3)
cconv.weight[:, :, :, :] = W[:, :, :, :]
print(cconv(torch.randn(1, 3, 5, 5)).sum())
