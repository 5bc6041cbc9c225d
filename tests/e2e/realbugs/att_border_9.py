# Report: https://github.com/AggMan96/RK-Net/issues/9
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [2, 1, 8, 8]],
# which is output 0 of Relu, is at version 4; expected version 0 instead. ...
# Cause (trimmed): the attention map, a ReLU's output (which ReLU saved), has its
# border zeroed in place by four slice assignments. The fix in the thread: att =
# att.clone() before them.
import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, polish=True):
        super().__init__()
        self.conv = nn.Conv2d(4, 1, 3, padding=1)
        self.polish = polish

    def forward(self, x):
        att = torch.relu(self.conv(x))
        if self.polish:
            att[:, :, :, 0] = 0
            att[:, :, :, -1] = 0
            att[:, :, 0, :] = 0
            att[:, :, -1, :] = 0
        return x * att


torch.manual_seed(0)
model = Attention()
loss = model(torch.randn(2, 4, 8, 8)).pow(2).sum()
loss.backward()
