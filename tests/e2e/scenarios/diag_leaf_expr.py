"""A leaf that requires grad (or a view of one) changed in place through an
expression rather than a variable: an element of a list, a slice, a row of a
module's parameter, an indexed submodule, and the same through a functional
in-place call. The finding must name what the line writes as written.
Usage: diag_leaf_expr.py CASE"""
import sys

import torch
import torch.nn.functional as F

case = sys.argv[1]
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
x = torch.randn(2, 3, requires_grad=True)
lin = torch.nn.Linear(3, 3)
seq = torch.nn.Sequential(torch.nn.Linear(3, 3))
v1 = [w, x]
if case == "list":
    v1[0].add_(1)  # @inplace-list
elif case == "slice":
    x[:, 1].mul_(2)  # @inplace-slice
elif case == "param_row":
    lin.weight[0].zero_()  # @inplace-param_row
elif case == "submodule":
    seq[0].weight.add_(1)  # @inplace-submodule
elif case == "relu_list":
    F.relu(v1[0], inplace=True)  # @inplace-relu_list
elif case == "relu_slice":
    F.relu(x[:, 1], inplace=True)  # @inplace-relu_slice
loss = (v1[0] * 2).sum() + lin(x).sum() + seq(x).sum()
loss.backward()
print("ok")
