"""A module's parameter changed in place in __init__, outside
torch.no_grad() (zeroing the padding row of an embedding): PyTorch raises
"a view of a leaf Variable that requires grad is being used in an in-place
operation". The fix must keep the attribute a Parameter."""
import sys

import torch
import torch.nn as nn

PAD = 0


class Tagger(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.embedding.weight[PAD] = 0.0  # @inplace
        self.out = nn.Linear(dim, 3)

    def forward(self, tokens):
        return self.out(self.embedding(tokens)).sum()


model = Tagger(10, 4)
loss = model(torch.tensor([[0, 3, 4]]))
loss.backward()
assert isinstance(model.embedding.weight, nn.Parameter)
print("ok")
