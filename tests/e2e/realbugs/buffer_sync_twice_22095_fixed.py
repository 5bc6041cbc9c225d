# The fix of https://github.com/pytorch/pytorch/issues/22095 (buffer_sync_twice_22095.py),
# the one the report gives: the product reads a copy of the buffer (self.buf.clone()).
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
        return (self.lin(z) * self.buf.clone()).sum()


torch.manual_seed(0)
mod = Mod()
a = mod(torch.randn(4, 16))
b = mod(torch.randn(4, 16))
loss = a + b
loss.backward()
