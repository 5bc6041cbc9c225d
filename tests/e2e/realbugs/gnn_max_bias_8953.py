# Report: https://github.com/pyg-team/pytorch_geometric/issues/8953 (the in-place
# `out += self.bias` of the message-passing tutorial "makes torch fail in some cases";
# https://github.com/pyg-team/pytorch_geometric/pull/5353: the scatter_reduce that
# aggregates messages does not allow an in-place operation on its output in training)
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [5, 4]],
# which is output 0 of ScatterReduce, is at version 1; expected version 0 instead.
# Cause (trimmed from the tutorial's GCNConv, with max aggregation): scatter_reduce
# with reduce="amax" saves its result; `out += self.bias` then writes that result.
import torch
import torch.nn as nn


class MaxConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x, edge_index):
        x = self.lin(x)
        row, col = edge_index
        msg = x[row]
        out = torch.zeros(x.size(0), x.size(1))
        out = out.scatter_reduce(0, col.unsqueeze(-1).expand_as(msg), msg, reduce="amax",
                                 include_self=False)
        out += self.bias
        return out


torch.manual_seed(0)
conv = MaxConv(3, 4)
x = torch.randn(5, 3)
edge_index = torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]])
loss = conv(x, edge_index).relu().sum()
loss.backward()
