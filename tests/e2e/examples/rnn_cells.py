"""The recurrent layers that run in-place gate arithmetic on pieces of one
buffer on CPU (unsafe_chunk / unsafe_split views with their own version
counters): nn.GRU, nn.GRUCell, nn.LSTM with proj_size, nn.LSTM on packed
sequences and float64 nn.LSTM, each trained two steps with SGD, the way
pytorch/examples' RNN scripts use them. A correct run: gradtrace diagnose
must find nothing."""
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)


def train(model, run, steps=2):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        loss = run(model)
        loss.backward()
        opt.step()
    print(type(model).__name__, float(loss))


x = torch.randn(5, 3, 4)  # (seq, batch, feature)
train(nn.GRU(4, 6, 2), lambda m: m(x)[0].pow(2).mean())


def gru_cell(m):
    h = torch.zeros(3, 6)
    for t in range(x.size(0)):
        h = m(x[t], h)
    return h.pow(2).mean()


train(nn.GRUCell(4, 6), gru_cell)
train(nn.LSTM(4, 6, 1, proj_size=3), lambda m: m(x)[0].pow(2).mean())
lengths = torch.tensor([5, 3, 2])


def packed(m):
    out, _ = m(pack_padded_sequence(x, lengths))
    padded, _ = pad_packed_sequence(out)
    return padded.pow(2).mean()


train(nn.LSTM(4, 6, 2), packed)
xd = x.double()
train(nn.LSTM(4, 6, 2).double(), lambda m: m(xd)[0].pow(2).mean())


def lstm_cell(m):
    h, c = torch.zeros(3, 6), torch.zeros(3, 6)
    for t in range(x.size(0)):
        h, c = m(x[t], (h, c))
    return h.pow(2).mean()


train(nn.LSTMCell(4, 6), lstm_cell)
