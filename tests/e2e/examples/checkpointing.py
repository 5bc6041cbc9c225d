"""Gradient checkpointing as training code uses it: torch.utils.checkpoint
around each residual block (LayerNorm, MLP, dropout) with use_reentrant=False
and True (the reentrant form with an input that requires grad, as its
backward needs), and checkpoint_sequential over four blocks; Adam. The
recomputation runs the blocks' forward again inside backward. A correct run:
gradtrace diagnose must find nothing."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.drop(self.fc2(torch.relu(self.fc1(self.ln(x)))))


class Net(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.blocks = nn.ModuleList(Block(16) for _ in range(3))
        self.head = nn.Linear(16, 1)
        self.reentrant = reentrant

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=self.reentrant)
        return self.head(x)


x = torch.randn(5, 8, 16)
y = torch.randn(5, 8, 1)
for reentrant in (False, True):
    torch.manual_seed(1)
    net = Net(reentrant)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for i in range(3):
        inp = x[i].requires_grad_(reentrant) if reentrant else x[i]
        loss = ((net(inp) - y[i]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(reentrant, i, repr(loss.item()))
seq = nn.Sequential(*[Block(16) for _ in range(4)])
out = checkpoint_sequential(seq, 2, x[3], use_reentrant=False)
out.sum().backward()
print(repr(out.sum().item()), repr(seq[0].fc1.weight.grad.sum().item()))
