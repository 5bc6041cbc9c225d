"""In-place ops PyTorch refuses for what the written tensor is (not for
what autograd saved), one case per argument: an expanded tensor written in
place (by an operator, a method, an in-place module), an input overlapping
the written tensor, an inference tensor changed outside inference mode, an
integer or bool tensor given a float result, a tensor smaller than the
broadcast result, detach_() of a view, resize_() of a tensor that requires
grad. The raising line ends with `# @<case>`, the line that made the
tensor with `# @<case>_made`. Prints "ok" when it runs through.
"""
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
case = sys.argv[1]


class IterNorm(nn.Module):
    # huangleiBuaa/IterNorm-pytorch#2: a running buffer registered as an
    # expanded eye, updated in place in forward
    def __init__(self, C=4, G=2):
        super().__init__()
        self.register_buffer("running_wm", torch.eye(C).expand(G, C, C))  # @buffer_made

    def forward(self, h):
        self.running_wm.mul_(0.9)  # @buffer
        return h


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU(inplace=True)

    def forward(self, h):
        pos = torch.randn(1, 4).expand(3, 4)  # @relu_module_made
        return self.act(pos) + h  # @relu_module


if case == "expand_op":
    bias = torch.zeros(1, 4).expand(8, 4)  # @expand_op_made
    h = torch.randn(8, 4)
    bias += h  # @expand_op
    print(bias.sum().item())
elif case == "broadcast_method":
    scale = torch.broadcast_to(torch.ones(3), (5, 3))  # @broadcast_method_made
    scale.mul_(2)  # @broadcast_method
elif case == "relu_module":
    Block()(torch.randn(3, 4))
elif case == "input_overlap":
    x = torch.arange(6.0)
    shifted = x[:-1]  # @input_overlap_made
    x[1:] += shifted  # @input_overlap
    print(x.tolist())
elif case == "buffer":
    IterNorm()(torch.randn(3, 4))
elif case == "mask_self_index":
    # khorrams/IGOS_pp#2: a bool mask indexing the tensor it is written into
    losses, base = torch.rand(5), torch.rand(5)
    indices = torch.ones(5, dtype=torch.bool)  # @mask_self_index_made
    indices[indices] = losses > base[indices]  # @mask_self_index
elif case == "inference":
    lin = nn.Linear(4, 4)
    with torch.inference_mode():
        cache = lin(torch.randn(2, 4))  # @inference_made
    cache.mul_(0.5)  # @inference
    loss = (lin(torch.randn(2, 4)) * cache).sum()
    loss.backward()
elif case == "dtype_long":
    labels = torch.tensor([1, 0, 2])  # @dtype_long_made
    labels *= 0.9  # @dtype_long
elif case == "dtype_bool":
    mask = torch.rand(5) > 0.5  # @dtype_bool_made
    mask *= 2.5  # @dtype_bool
elif case == "shape":
    acc = torch.zeros(3)  # @shape_made
    delta = torch.randn(2, 3)
    acc += delta  # @shape
elif case == "shape_method":
    total = torch.zeros(1)  # @shape_method_made
    losses = torch.rand(4)
    total.add_(losses)  # @shape_method
elif case == "detach_view":
    w = torch.randn(4, 3, requires_grad=True)
    v = w[0]  # @detach_view_made
    v.detach_()  # @detach_view
    (v * 2).sum()
elif case == "resize":
    w = torch.randn(4, requires_grad=True)  # @resize_made
    w.resize_(2, 2)  # @resize
    w.sum().backward()
print("ok")
