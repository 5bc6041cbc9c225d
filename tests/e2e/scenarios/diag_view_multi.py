"""A view returned by a function that returns several views (chunk, split,
unbind) changed in place: PyTorch raises at the in-place op ("Output 1 of
Split is a view and is being modified inplace. This view is the output of a
function that returns multiple views...")."""
import sys

import torch

how = sys.argv[1] if len(sys.argv) > 1 else "chunk"
w = torch.randn(4, 6, requires_grad=True)
h = w * 2
if how == "chunk":
    left, right = h.chunk(2, dim=1)  # @view_chunk
elif how == "split":
    left, right = torch.split(h, 3, dim=1)  # @view_split
else:
    left, right = h[:2].unbind(0)[:2]  # @view_unbind
if how == "fixed":
    right = right.clamp(min=0)
else:
    right.clamp_(min=0)  # @inplace
loss = (left * right).sum()
loss.backward()
print("ok")
