"""A deep chain: 320 rounds of tanh, mul, add (962 autograd nodes), the
shape of an unrolled RNN; no finding."""
import torch
x = torch.randn(8, requires_grad=True)
h = x
for i in range(320):
    h = torch.tanh(h) * 1.01 + 0.1
h.sum().backward()
