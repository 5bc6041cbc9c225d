# Report: https://github.com/IceLab-X/MiniGP/issues/13: the fix, exp() of the parameter
# taken in forward() (exp_param_init_13.py otherwise).
import torch
import torch.nn as nn


class STGP(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_length_scale = nn.Parameter(torch.zeros(3))

    def forward(self, x, y):
        length_scale = torch.exp(self.log_length_scale)
        k = torch.exp(-((x / length_scale) ** 2).sum(-1))
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
