"""A DCGAN-like discriminator: six conv + batchnorm + leaky ReLU blocks, each
with its parameters (leaves beside the chain); no finding."""
import torch
import torch.nn as nn
torch.manual_seed(0)
# a DCGAN-like discriminator: many layers, each with parameters (leaves)
layers = []
c = 3
for i, w in enumerate([16, 32, 64, 128, 128, 256]):
    layers += [nn.Conv2d(c, w, 3, padding=1, bias=True), nn.BatchNorm2d(w), nn.LeakyReLU(0.2)]
    c = w
net = nn.Sequential(*layers, nn.Flatten(), nn.Linear(c * 8 * 8, 1))
x = torch.randn(2, 3, 8, 8)
net(x).sum().backward()
