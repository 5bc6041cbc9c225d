# Report: https://github.com/pytorch/pytorch/issues/22095
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [1, 32]]
# is at version 2; expected version 1 instead.
# Cause (trimmed: a single process, no DistributedDataParallel): each forward writes
# the module's buffer in place (DDP broadcasts buffers with copy_ before every forward;
# here forward does the copy_ itself); the product in the first call saved the buffer,
# the second call's copy_ overwrites it before the one backward().
import torch
import torch.nn as nn


class Mod(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 32)
        self.register_buffer("buf", torch.zeros(1, 32))
        self.register_buffer("synced", torch.ones(1, 32))

    def forward(self, z):
        self.buf.copy_(self.synced)
        return (self.lin(z) * self.buf).sum()


torch.manual_seed(0)
mod = Mod()
a = mod(torch.randn(4, 16))
b = mod(torch.randn(4, 16))
loss = a + b
loss.backward()
