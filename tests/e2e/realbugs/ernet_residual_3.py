# Report: https://github.com/iMED-Lab/ER-Net/pull/3
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation:
# [torch.FloatTensor [1, 2, 4, 4, 4]], which is output 0 of ReluBackward0, is at
# version 1; expected version 0 instead.
# Cause: out += residual after a (non in-place) ReLU saved out.
import torch
import torch.nn as nn


class ResEncoder(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv3d(cin, cout, 3, padding=1)
        self.relu = nn.ReLU()
        self.conv1x1 = nn.Conv3d(cin, cout, 1)

    def forward(self, x):
        residual = self.conv1x1(x)
        out = self.relu(self.conv1(x))
        out += residual
        return out


torch.manual_seed(0)
enc = ResEncoder(1, 2)
loss = enc(torch.randn(1, 1, 4, 4, 4)).mean()
loss.backward()
