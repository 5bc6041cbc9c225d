# Report: https://github.com/pytorch/examples/pull/779 (word_language_model)
# PyTorch raises at p.add_(...): a leaf Variable that requires grad is being used
# in an in-place operation.
# Cause: a hand-written SGD step updates the parameters in place with grad mode on.
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 2)
lr = 0.1
loss = model(torch.randn(3, 4)).pow(2).sum()
model.zero_grad()
loss.backward()
for p in model.parameters():
    p.add_(p.grad, alpha=-lr)
