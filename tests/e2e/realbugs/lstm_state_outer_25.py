# Report: https://github.com/vikrant7/mobile-vod-bottleneck-lstm/issues/25
# (hebangwen's comment: the hidden state is detached in the outer loop only)
# PyTorch raises at loss.backward() on the second batch: Trying to backward
# through the graph a second time (or directly access saved tensors after they have
# already been freed). ...
# Cause (trimmed): the LSTM state (h, c) is detached once per epoch, in the outer
# loop, so the second batch's loss reaches the first batch's freed graph through it.
import torch
import torch.nn as nn

torch.manual_seed(0)
cell = nn.LSTMCell(4, 6)
head = nn.Linear(6, 3)
opt = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.01)
h, c = torch.zeros(2, 6), torch.zeros(2, 6)
for epoch in range(2):
    h, c = h.detach(), c.detach()
    for frame in range(3):
        x, y = torch.randn(2, 4), torch.randint(0, 3, (2,))
        h, c = cell(x, (h, c))
        loss = nn.functional.cross_entropy(head(h), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
