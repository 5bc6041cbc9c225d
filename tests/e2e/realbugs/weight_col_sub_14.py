# Report: https://github.com/Hunter-DDM/knowledge-neurons/issues/14
# PyTorch raises at the first -=: a view of a leaf Variable that requires grad is
# being used in an in-place operation.
# Cause (trimmed): knowledge editing subtracts and adds word embeddings to one column
# of a dense layer's weight, weight[:, pos] -= ..., with grad mode on.
import torch
import torch.nn as nn

torch.manual_seed(0)
dense = nn.Linear(8, 6)
word_emb = nn.Embedding(10, 6)
pos = 3
ori_pred_emb = word_emb.weight[2]
tgt_emb = word_emb.weight[7]
dense.weight[:, pos] -= ori_pred_emb * 1.0
dense.weight[:, pos] += tgt_emb * 8.0
print(dense(torch.randn(2, 8)).sum())
