# The fix of https://github.com/zylo117/Yet-Another-EfficientDet-Pytorch/issues/503
# (param_relu_503.py): the fusion weights go through an out-of-place ReLU.
import torch
import torch.nn as nn


class FuseFeature(nn.Module):
    def __init__(self, e=1e-4):
        super().__init__()
        self.e = e
        self.weight = nn.Parameter(torch.ones(2, dtype=torch.float32), requires_grad=True)
        self.weight_relu = nn.ReLU(inplace=False)

    def forward(self, x):
        weight = self.weight_relu(self.weight)
        weight = weight / (torch.sum(weight, dim=0) + self.e)
        return weight[0] * x[0] + weight[1] * x[1]


fuse = FuseFeature()
x = torch.randn(2, 3, 4)
fuse(x).sum().backward()
