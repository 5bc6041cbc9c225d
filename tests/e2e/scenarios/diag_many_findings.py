"""Thousands of genuine silent writes in one backward call: each exp()
saves its result, then result.data is changed (its own version counter, the
same bytes: autograd cannot see it). Diagnose must report every one, and
quickly (the text and the JSON are built in one pass)."""
import sys

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
x = torch.randn(4, requires_grad=True)
ys = []
for i in range(n):
    y = (x * (i + 1) / n).exp()
    ys.append(y)
for y in ys:
    y.data.add_(1)  # @silent
loss = torch.stack(ys).sum()
loss.backward()  # @backward
print("done")
