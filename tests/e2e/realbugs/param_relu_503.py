# Report: https://github.com/zylo117/Yet-Another-EfficientDet-Pytorch/issues/503
# (same error: https://github.com/pytorch/pytorch/issues/42525)
# PyTorch raises in F.relu: a leaf Variable that requires grad is being used in an
# in-place operation.
# Cause: BiFPN fusion weights (an nn.Parameter) passed straight through an
# in-place ReLU.
import torch
import torch.nn as nn


class FuseFeature(nn.Module):
    def __init__(self, e=1e-4):
        super().__init__()
        self.e = e
        self.weight = nn.Parameter(torch.ones(2, dtype=torch.float32), requires_grad=True)
        self.weight_relu = nn.ReLU(inplace=True)

    def forward(self, x):
        weight = self.weight_relu(self.weight)
        weight = weight / (torch.sum(weight, dim=0) + self.e)
        return weight[0] * x[0] + weight[1] * x[1]


fuse = FuseFeature()
x = torch.randn(2, 3, 4)
fuse(x).sum().backward()
