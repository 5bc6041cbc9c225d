# Report: https://github.com/lyongo/NWPU-MOC/issues/4 -- the fix: add out of place.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
lateral_convs = nn.ModuleList(
    [nn.Sequential(nn.Conv2d(c, 4, 1), nn.ReLU()) for c in (3, 5, 7)])
inputs = [torch.randn(1, 3, 16, 16), torch.randn(1, 5, 8, 8), torch.randn(1, 7, 4, 4)]
laterals = [conv(inputs[i]) for i, conv in enumerate(lateral_convs)]
for i in range(len(laterals) - 1, 0, -1):
    prev_shape = laterals[i - 1].shape[2:]
    laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=prev_shape, mode='nearest')
loss = sum(l.sum() for l in laterals)
loss.backward()
