# The fix of https://github.com/pytorch/pytorch/issues/39141 (gan_step_39141.py):
# opt_D.step() moved after the last backward() that goes through D.
import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(5, 128), nn.ReLU(), nn.Linear(128, 15))
D = nn.Sequential(nn.Linear(15, 128), nn.ReLU(), nn.Linear(128, 1), nn.Sigmoid())
opt_D = torch.optim.Adam(D.parameters(), lr=1e-4)
opt_G = torch.optim.Adam(G.parameters(), lr=1e-4)

for step in range(2):
    artist_paintings = torch.randn(64, 15)
    G_ideas = torch.randn(64, 5)
    G_paintings = G(G_ideas)
    prob_artist0 = D(artist_paintings)
    prob_artist1 = D(G_paintings)
    D_loss = -torch.mean(torch.log(prob_artist0) + torch.log(1. - prob_artist1))
    G_loss = torch.mean(torch.log(1. - prob_artist1))
    opt_D.zero_grad()
    D_loss.backward(retain_graph=True)
    opt_G.zero_grad()
    G_loss.backward()
    opt_D.step()
    opt_G.step()
