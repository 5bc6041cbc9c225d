# Report: https://github.com/lyongo/NWPU-MOC/issues/4
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [1, 4, 8, 8]],
# which is output 0 of Relu, is at version 1; expected version 0 instead.
# Cause (trimmed from models/FPN/FPN_Head.py): the FPN's top-down path adds the
# upsampled coarser level into the finer lateral with `+=`; the lateral is a ReLU's
# output, which the ReLU saved. The answer: `laterals[i - 1] = laterals[i - 1] + ...`.
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
    laterals[i - 1] += F.interpolate(laterals[i], size=prev_shape, mode='nearest')
loss = sum(l.sum() for l in laterals)
loss.backward()
