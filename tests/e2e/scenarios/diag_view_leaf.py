"""A view of a leaf that requires grad changed in place, in a plain
function (no module): "a view of a leaf Variable that requires grad is being
used in an in-place operation"."""
import torch

w = torch.zeros(4, 2, requires_grad=True)
row = w[1]  # @view
row.fill_(1.0)  # @inplace
loss = (w * 2).sum()
loss.backward()
print("ok")
