# Report: https://github.com/pytorch/pytorch/issues/39141
# (also MorvanZhou/PyTorch-Tutorial#89, cy-xu/simple_CycleGAN#3)
# PyTorch raises at G_loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [128, 1]],
# which is output 0 of TBackward0, is at version 2; expected version 1 instead.
# Cause: opt_D.step() updates D's weights in place between D's forward (which
# G_loss also goes through) and G_loss.backward().
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
    opt_D.step()
    opt_G.zero_grad()
    G_loss.backward()
    opt_G.step()
