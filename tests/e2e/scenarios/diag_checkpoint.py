"""torch.utils.checkpoint (use_reentrant=False) around a function that
changes its input in place: PyTorch raises "modified by an inplace operation
... is at version 1; expected version 0" in backward, through saved-tensor
hooks the replay does not see. Diagnose must not stay silent: an
`unexplained` finding with the error, the backward call and its line, and
the tensors matching the message."""
import torch
from torch.utils.checkpoint import checkpoint


def block(x, w):
    y = torch.sigmoid(x @ w)
    return y


w = torch.randn(6, 6, requires_grad=True)
x = torch.randn(3, 6, requires_grad=True)
h = x * 2
y = checkpoint(block, h, w, use_reentrant=False)  # @checkpoint
h.add_(1)  # @inplace
loss = y.sum()
loss.backward()  # @backward
print("ok")
