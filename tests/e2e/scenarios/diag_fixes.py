"""One in-place mistake per mode, each raising PyTorch's version error (or
"backward through the graph a second time"); test_diagnose_fixes.py applies
the fix diagnose suggests to a copy of this script and runs it again."""
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
mode = sys.argv[1]
x = torch.randn(4, 3, requires_grad=True)

if mode == "relu":
    act = nn.ReLU(inplace=True)
    h = torch.sigmoid(x)
    y = act(h)  # @mutate
    loss = y.sum()
    loss.backward()  # @backward
elif mode == "step":
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).sum().backward()  # gradients to step with
    loss = model(x).pow(2).sum()
    opt.step()  # @mutate
    loss.backward()  # @backward
elif mode == "clip":
    model = nn.Linear(3, 2)
    loss = model(x).pow(2).sum()
    with torch.no_grad(): model.weight.clamp_(-0.1, 0.1)  # @mutate
    loss.backward()  # @backward
elif mode == "adam":
    model = nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1, foreach=True)
    model(x).sum().backward()  # gradients to step with
    loss = model(x).pow(2).sum()
    opt.step()  # @mutate
    loss.backward()  # @backward
elif mode == "ema":
    model = nn.Linear(3, 2)
    ema = nn.Linear(3, 2).requires_grad_(False)
    loss = model(x).pow(2).sum()
    with torch.no_grad(): torch._foreach_lerp_(list(model.parameters()), list(ema.parameters()), 0.5)  # @mutate
    loss.backward()  # @backward
elif mode == "twice":
    y = x.exp()
    loss = y.sum()
    loss.backward()  # @first
    loss.backward()  # @backward
elif mode == "constant":
    scale = torch.ones(3)
    y = x * scale
    for i in range(3):
        scale[i] *= 2.0  # @mutate
    y.sum().backward()  # @backward
elif mode == "assign":
    y = x.exp()
    y[0] = 0.0  # @mutate
    y.sum().backward()  # @backward
elif mode == "method":
    y = torch.tanh(x)
    y.add_(1)  # @mutate
    y.sum().backward()  # @backward
elif mode == "masked":
    y = torch.softmax(x, dim=1)
    y.masked_fill_(y > 0.4, 0.0)  # @mutate
    y.sum().backward()  # @backward
elif mode == "copy":
    y = x.exp()
    y.copy_(torch.zeros(4, 3))  # @mutate
    y.sum().backward()  # @backward
elif mode == "augmented":
    y = torch.sigmoid(x)
    y *= 2  # @mutate
    y.sum().backward()  # @backward
print("ok")
