"""A 12-layer nn.TransformerEncoder (BERT-base's depth, narrow widths) on a
small batch, one training step: its backward graph repeats one layer's
nodes twelve times. No finding."""
import torch
import torch.nn as nn

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0)
encoder = nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False)
head = nn.Linear(16, 4)
x = torch.randn(5, 3, 16)
target = torch.randint(0, 4, (5 * 3,))
out = head(encoder(x)).reshape(-1, 4)
loss = nn.functional.cross_entropy(out, target)
loss.backward()
