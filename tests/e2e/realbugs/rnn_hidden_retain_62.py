# Report: https://github.com/mlech26l/ncps/issues/62 (the reporter's second error,
# after adding retain_graph=True)
# PyTorch raises at loss.backward(retain_graph=True) in the second iteration: one of
# the variables needed for gradient computation has been modified by an inplace
# operation: [torch.FloatTensor [8, 24]], which is output 0 of AsStrided, is
# at version 2; expected version 1 instead. ...
# Cause: the recurrent state hx is fed back without detach(); retain_graph=True keeps
# the first batch's graph, whose saved weights opt.step() has since changed in place.
import torch
import torch.nn as nn

torch.manual_seed(0)
rnn = nn.GRU(4, 8, batch_first=True)
head = nn.Linear(8, 1)
opt = torch.optim.Adam(list(rnn.parameters()) + list(head.parameters()), lr=1e-3)
hx = None
for step in range(3):
    x, y = torch.randn(2, 5, 4), torch.randn(2, 1)
    out, hx = rnn(x, hx)
    loss = (head(out[:, -1]) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
