"""A DCGAN-like discriminator (six conv + batchnorm + leaky ReLU blocks)
with one in-place mistake in its middle: the third block's convolution
output, saved by its batch norm, is shifted in place after the batch norm
ran. backward raises; the graph must draw the mutation and the failing
batch norm whatever its size."""
import torch
import torch.nn as nn

torch.manual_seed(0)
blocks = []
c = 3
for w in [16, 32, 64, 128, 128, 256]:
    blocks.append((nn.Conv2d(c, w, 3, padding=1), nn.BatchNorm2d(w), nn.LeakyReLU(0.2)))
    c = w
head = nn.Linear(c * 8 * 8, 1)
h = torch.randn(2, 3, 8, 8)
for i, (conv, bn, act) in enumerate(blocks):
    y = conv(h)
    h = act(bn(y))
    if i == 2:
        y.add_(1.0)  # the mistake: bn saved y
head(h.flatten(1)).sum().backward()
