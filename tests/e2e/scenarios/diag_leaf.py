"""An in-place update of a leaf that requires grad, outside torch.no_grad():
PyTorch raises at the op itself."""
import torch

w = torch.ones(3, requires_grad=True)
lr = 0.1
w -= lr * torch.ones(3)  # @leaf_mutate
print("unreachable")
