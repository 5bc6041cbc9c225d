"""A 6-layer transformer whose blocks each write a saved tensor in place.

Six pre-norm transformer blocks written out by hand (attention, then an MLP).
Each block's MLP applies GELU and then scales the activation in place
(`h.mul_(self.scale)`), but the second linear layer saved that activation for
its backward: every block has the same bug, so backward() raises:

    RuntimeError: one of the variables needed for gradient computation has
    been modified by an inplace operation ...

Record it and ask gradtrace; the graph draws the six findings once, as ×6:

    gradtrace record -o transformer.db -- examples/transformer_inplace.py
    gradtrace diagnose transformer.db
    gradtrace graph transformer.db -o transformer.png

Pass --fixed to run the repaired version (an out-of-place multiply).
"""
import sys

import torch
import torch.nn as nn

fixed = "--fixed" in sys.argv
torch.manual_seed(0)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        y = att.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.scale = 0.5

    def forward(self, x):
        h = nn.functional.gelu(self.fc1(x))
        y = self.fc2(h)
        if not fixed:
            h.mul_(self.scale)  # fc2 saved h: backward needs it as it was
        return y


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, vocab=100, dim=32, heads=4, layers=6):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


model = Transformer()
idx = torch.randint(0, 100, (2, 16))
logits = model(idx)
loss = nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten())
loss.backward()
print("backward ok")
