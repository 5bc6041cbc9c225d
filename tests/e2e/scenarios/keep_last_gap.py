"""A tensor used at the first step and again at the last one only: the
flight recorder's window must still define it (tests/e2e/test_keep_last.py).

    keep_last_gap.py STEPS

`fixed` is a view of `buf` made before the loop and fed to the model at the
first step; the steps between use another input, so no event of the window
names `fixed` until the last step feeds it again, views `buf` once more and
modifies `fixed` in place after the linear layer saved it (tagged @culprit):
backward raises.
"""
import sys

import torch

steps = int(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
buf = torch.randn(8, 4)
fixed = buf[2:6]
x = torch.randn(4, 4)
for step in range(1, steps + 1):
    opt.zero_grad()
    inp = fixed if step in (1, steps) else x
    out = model(inp)
    if step == steps:
        head = buf[0:2]
        head.add_(1)
        fixed.mul_(2)  # @culprit: the linear layer saved it
    loss = out.sum()
    loss.backward()
    opt.step()
