# The fix of https://github.com/pytorch/pytorch/issues/36608 (unbind_inplace_36608.py):
# the out-of-place form on a rebinding of the row.
import torch

root = torch.arange(9.).reshape(3, 3).requires_grad_()
x = root.clone()
v1 = list(x.unbind())
v1[0] = v1[0].mul(2)
torch.stack(v1).sum().backward()
