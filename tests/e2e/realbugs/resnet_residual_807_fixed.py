# The fix of https://github.com/pytorch/vision/issues/807 (resnet_residual_807.py):
# the out-of-place residual add, out = out + identity.
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
        out = out + identity
        return out


torch.manual_seed(0)
block = Block(4)
x = torch.randn(2, 4, 6, 6)
loss = block(x).sum()
loss.backward()
