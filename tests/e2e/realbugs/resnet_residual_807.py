# Report: https://github.com/pytorch/vision/issues/807 (fmassa's comment)
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [2, 4, 6, 6]],
# which is output 0 of ReluBackward0, is at version 1; expected version 0 instead.
# Cause: a pre-activation block does out = self.relu(out) then out += identity;
# the in-place ReLU saved its result, which += then changes.
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out += identity
        return out


torch.manual_seed(0)
block = Block(4)
x = torch.randn(2, 4, 6, 6)
loss = block(x).sum()
loss.backward()
