# Report: https://github.com/mlech26l/ncps/issues/62
# (same pattern: vikrant7/mobile-vod-bottleneck-lstm#25, OpenNMT/OpenNMT-py#403)
# PyTorch raises at loss.backward() in the second iteration: Trying to backward
# through the graph a second time (or directly access saved tensors after they have
# already been freed). ...
# Cause: the recurrent state hx is fed back into the next batch without detach(),
# so the second backward() goes on into the first batch's graph, already freed.
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
    loss.backward()
    opt.step()
