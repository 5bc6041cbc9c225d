# Report: https://github.com/davda54/sam/issues/10 (comment of 2021-01-27)
# PyTorch raises at the second loss.backward(): Trying to backward through the graph a
# second time (or directly access saved tensors after they have already been freed).
# Cause: SAM's two passes; the per-task losses are summed into `loss` with `+=`, and
# `loss` is not reset before the second pass, so the second sum still holds the first
# pass's graph, freed by the first backward().
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(6, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
image, target = torch.randn(4, 6), torch.randn(4, 3)
num_tasks = 3


def get_loss(output, target, t):
    return F.mse_loss(output[:, t], target[:, t])


output = model(image)
loss = 0
for t in range(num_tasks):
    loss_t = get_loss(output, target, t)
    loss += loss_t
optimizer.zero_grad()
loss.backward()
optimizer.step()
output = model(image)
for t in range(num_tasks):
    loss_t = get_loss(output, target, t)
    loss += loss_t
loss.backward()
optimizer.step()
