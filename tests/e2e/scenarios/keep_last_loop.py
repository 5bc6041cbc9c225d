"""A long training loop that breaks at its last step: the flight recorder's
case (tests/e2e/test_keep_last.py).

    keep_last_loop.py STEPS [MODE]

A small MLP trained for STEPS steps with torch.optim.SGD. At the last step
an in-place update of the hidden activation (tagged @culprit) modifies a
tensor the next layer saved, and backward raises. MODE "wait" instead
prints "looping" after 50 steps and trains on without end (for the signal
tests, which stop it). Prints the final loss of each 1000th step so that a
recorded run can be compared with a plain one.
"""
import sys

import torch

steps = int(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "fail"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 4)
y = torch.randn(16, 1)
step = 0
while mode == "wait" or step < steps:
    step += 1
    opt.zero_grad()
    hidden = model[1](model[0](x))
    if mode == "fail" and step == steps:
        hidden.mul_(0.5)  # @culprit: tanh saved its output
    loss = ((model[2](hidden) - y) ** 2).mean()
    loss.backward()
    opt.step()
    if step % 1000 == 0:
        print("step", step, "loss %.6f" % loss.item(), flush=True)
    if mode == "wait" and step == 50:
        print("looping", flush=True)
