# The fix of https://github.com/pytorch/examples/pull/779 (manual_sgd_779.py):
# the update runs under torch.no_grad().
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 2)
lr = 0.1
loss = model(torch.randn(3, 4)).pow(2).sum()
model.zero_grad()
loss.backward()
for p in model.parameters():
    with torch.no_grad():
        p.add_(p.grad, alpha=-lr)
