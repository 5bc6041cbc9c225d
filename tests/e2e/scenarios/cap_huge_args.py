"""Ops past every size a record of the engine adapter holds: 20,000 tensors
into one cat (a CatBackward0 node with 20,000 edges), a foreach add over
20,000 buffers twice (20,000 mutated arguments and version bumps each; the
versions after an op once fitted 16,384 inputs, the fold kept 4,096
inputs, a node 4,096 edges). The second foreach add changes the buffer a
multiply saved: PyTorch raises about it."""
import torch

N = 20000
xs = [torch.ones(2, requires_grad=True) * 1.0 for _ in range(N)]
cat = torch.cat(xs)  # @cat
bufs = [torch.zeros(2) for _ in range(N)]
torch._foreach_add_(bufs, 1.0)  # @foreach
w = torch.ones(2, requires_grad=True)
last = bufs[-1]
y = (w * last).sum()  # @save
torch._foreach_add_(bufs, 1.0)  # @mutation
(cat.sum() + y).backward()  # @backward
