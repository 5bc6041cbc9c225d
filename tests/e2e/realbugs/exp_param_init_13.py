# Report: https://github.com/IceLab-X/MiniGP/issues/13 (stgp_demo.py line 15)
# PyTorch raises at loss.backward() in the second iteration: Trying to backward
# through the graph a second time (or directly access saved tensors after they have
# already been freed). ...
# Cause (trimmed): the model takes exp() of its log-parameter once, in __init__, and
# keeps the result: every iteration's loss reaches the same ExpBackward0 node, whose
# saved result the first backward() freed (and the optimizer never changes the value
# the model uses). The fix: keep the parameter, take its exp() in forward().
import torch
import torch.nn as nn


class STGP(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_length_scale = nn.Parameter(torch.zeros(3))
        self.length_scale = torch.exp(self.log_length_scale)

    def forward(self, x, y):
        k = torch.exp(-((x / self.length_scale) ** 2).sum(-1))
        return ((k - y) ** 2).mean()


torch.manual_seed(0)
model = STGP()
opt = torch.optim.Adam(model.parameters(), lr=0.1)
x, y = torch.randn(16, 3), torch.rand(16)
for it in range(3):
    opt.zero_grad()
    loss = model(x, y)
    loss.backward()
    opt.step()
