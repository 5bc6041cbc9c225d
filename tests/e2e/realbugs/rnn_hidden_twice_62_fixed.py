# The fix of https://github.com/mlech26l/ncps/issues/62 (rnn_hidden_twice_62.py):
# the state carried to the next batch is detached (truncated backpropagation).
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
    hx = hx.detach()
    loss = (head(out[:, -1]) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
