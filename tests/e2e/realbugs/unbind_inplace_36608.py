# Report: https://github.com/pytorch/pytorch/issues/36608
# PyTorch raises at v1[0].mul_(2): Output 0 of UnbindBackward0 is a view and is being
# modified inplace. This view is the output of a function that returns multiple
# views. Such functions do not allow the output views to be modified inplace. ...
import torch

root = torch.arange(9.).reshape(3, 3).requires_grad_()
x = root.clone()
v1 = x.unbind()
v1[0].mul_(2)
x.sum().backward()
