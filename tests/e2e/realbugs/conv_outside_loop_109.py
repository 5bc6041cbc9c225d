# Report: https://github.com/lucidrains/denoising-diffusion-pytorch/issues/109
# PyTorch raises at loss.backward() in the second iteration: Trying to backward
# through the graph a second time (or directly access saved tensors after they have
# already been freed). ...
# Cause (the reporter's own finding, trimmed): a Conv1d that reshapes the data to the
# network's input ran once, outside the training loop, with grad mode on; each
# iteration's loss reaches its ConvolutionBackward0 node, freed by the first backward().
# The fix: convert the data without a graph (under torch.no_grad(), or detach()).
import torch
import torch.nn as nn

torch.manual_seed(0)
to_input = nn.Conv1d(1, 4, kernel_size=3, padding=1)
model = nn.Sequential(nn.Conv1d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv1d(8, 4, 3, padding=1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
raw = torch.randn(2, 1, 16)
data = to_input(raw)
for step in range(3):
    noise = torch.randn_like(data)
    loss = (model(data + noise) - noise).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
