"""A deep chain: 320 rounds of tanh, mul, add (962 autograd nodes), the
shape of an unrolled RNN; no finding. With --bug, the output of the fifth
tanh (saved by its node) is changed in place after the chain was built, far
from the root: backward raises."""
import sys

import torch
x = torch.randn(8, requires_grad=True)
h = x
early = None
for i in range(320):
    h = torch.tanh(h)
    if i == 4:
        early = h
    h = h * 1.01 + 0.1
if "--bug" in sys.argv:
    early.mul_(2.0)
h.sum().backward()
