# Report: https://github.com/dasguptar/treelstm.pytorch/pull/26
# PyTorch raises at self.emb.weight.copy_(init_emb): a leaf Variable that requires
# grad is being used in an in-place operation.
# Cause: loading pretrained embeddings into an nn.Embedding with grad mode on.
import torch
import torch.nn as nn


class SimilarityTreeLSTM(nn.Module):
    def __init__(self, vocab_size, in_dim, init_emb):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, in_dim)
        self.emb.weight.copy_(init_emb)

    def forward(self, idx):
        return self.emb(idx).sum()


emb = torch.randn(10, 4)
model = SimilarityTreeLSTM(10, 4, emb)
model(torch.tensor([1, 2])).backward()
