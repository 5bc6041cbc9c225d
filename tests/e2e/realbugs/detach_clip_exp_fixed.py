# Report: see detach_clip_exp.py: the write-up's fix, y.detach().clone().
import torch

torch.manual_seed(0)
x = torch.randn(6, requires_grad=True)
y = x.exp()
shown = y.detach().clone()
shown[shown > 2] = 2
print(shown)
loss = (y * torch.arange(6.0)).sum()
loss.backward()
