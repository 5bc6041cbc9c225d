# Report: https://github.com/lucidrains/denoising-diffusion-pytorch/issues/109: the data
# converted under torch.no_grad() (conv_outside_loop_109.py otherwise).
import torch
import torch.nn as nn

torch.manual_seed(0)
to_input = nn.Conv1d(1, 4, kernel_size=3, padding=1)
model = nn.Sequential(nn.Conv1d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv1d(8, 4, 3, padding=1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
raw = torch.randn(2, 1, 16)
with torch.no_grad():
    data = to_input(raw)
for step in range(3):
    noise = torch.randn_like(data)
    loss = (model(data + noise) - noise).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
