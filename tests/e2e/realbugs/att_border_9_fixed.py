# Report: https://github.com/AggMan96/RK-Net/issues/9: the fix in the thread, att =
# att.clone() before the border is zeroed (att_border_9.py otherwise).
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
            att = att.clone()
            att[:, :, :, 0] = 0
            att[:, :, :, -1] = 0
            att[:, :, 0, :] = 0
            att[:, :, -1, :] = 0
        return x * att


torch.manual_seed(0)
model = Attention()
loss = model(torch.randn(2, 4, 8, 8)).pow(2).sum()
loss.backward()
