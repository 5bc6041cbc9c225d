# The fix of https://github.com/chickenbestlover/RNN-Time-series-Anomaly-Detection/issues/42
# (lstm_repackage_42.py): hidden = repackage_hidden(hidden) before each batch.
import torch
import torch.nn as nn


class RNNPredictor(nn.Module):
    def __init__(self, enc_inp_size, rnn_hid_size):
        super().__init__()
        self.encoder = nn.Linear(enc_inp_size, rnn_hid_size)
        self.rnn = nn.LSTM(rnn_hid_size, rnn_hid_size)
        self.decoder = nn.Linear(rnn_hid_size, enc_inp_size)

    def forward(self, input, hidden):
        emb = self.encoder(input)
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(output), hidden


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, tuple):
        return tuple(repackage_hidden(v) for v in h)
    return h.detach()


torch.manual_seed(0)
model = RNNPredictor(3, 8)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
series = torch.randn(13, 2, 3)
for i in range(0, 12, 4):
    inputSeq, targetSeq = series[i:i + 4], series[i + 1:i + 5]
    hidden = repackage_hidden(hidden)
    optimizer.zero_grad()
    outSeq, hidden = model(inputSeq, hidden)
    loss = nn.functional.mse_loss(outSeq, targetSeq)
    loss.backward()
    optimizer.step()
