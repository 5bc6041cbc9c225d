"""Correct recurrent models whose cells write the neighbours of what they
saved: nn.GRU, nn.GRUCell and nn.LSTMCell on the CPU save a gate as a
[batch, hidden] chunk of a [batch, 3 * hidden] (or 4 *) buffer, then write
the next chunk in place. The chunk's own elements never change: there is
no bug here.

    cap_rnn_cells.py MODEL [STEPS]

MODEL: gru (the word language model of pytorch/examples, trimmed: an
embedding, nn.GRU, a decoder, truncated backpropagation through time),
grucell, lstmcell, or all. Prints the loss of the last step."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class RNNModel(nn.Module):
    """pytorch/examples word_language_model/model.py's RNNModel, GRU/LSTM
    only: encoder, recurrent module, decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(map(repackage_hidden, h))


def word_model(steps):
    ntokens, bptt, bsz = 50, 5, 4
    model = RNNModel("GRU", ntokens, 16, 16, 2)
    model.train()
    data = torch.randint(0, ntokens, (bptt * steps + 1, bsz))
    hidden = model.init_hidden(bsz)
    for i in range(0, bptt * steps, bptt):
        x, y = data[i:i + bptt], data[i + 1:i + 1 + bptt].reshape(-1)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(x, hidden)
        loss = F.nll_loss(output, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.1)
    return loss


def cell_model(cell, steps):
    rnn = cell(8, 16)
    x = torch.randn(6, 4, 8)
    for _ in range(steps):
        h = torch.zeros(4, 16)
        state = (h, torch.zeros(4, 16)) if cell is nn.LSTMCell else h
        for t in range(x.size(0)):
            state = rnn(x[t], state)
        out = state[0] if cell is nn.LSTMCell else state
        loss = out.pow(2).mean()
        rnn.zero_grad()
        loss.backward()
    return loss


torch.manual_seed(0)
which = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
loss = None
if which in ("gru", "all"):
    loss = word_model(steps)
if which in ("grucell", "all"):
    loss = cell_model(nn.GRUCell, steps)
if which in ("lstmcell", "all"):
    loss = cell_model(nn.LSTMCell, steps)
print("loss %.6f" % loss.item())
