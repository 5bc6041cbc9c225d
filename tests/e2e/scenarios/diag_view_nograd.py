"""A view made where autograd does not track it (torch.no_grad() or
torch.inference_mode()), then changed in place with grad mode on: PyTorch
raises at the in-place op ("A view was created in no_grad mode and is being
modified inplace with grad mode enabled...")."""
import sys

import torch

how = sys.argv[1] if len(sys.argv) > 1 else "no_grad"
w = torch.randn(4, 3, requires_grad=True)
h = w * 2
if how == "no_grad":
    with torch.no_grad():
        top = h[:2]  # @view_no_grad
elif how == "inference":
    with torch.inference_mode():
        top = h.view(12)  # @view_inference
else:  # fixed: the view made outside the block, as the fix says
    top = h[:2]
top.mul_(0.5)  # @inplace
loss = h.sum()
loss.backward()
print("ok")
