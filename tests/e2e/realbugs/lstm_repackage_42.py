# Report: https://github.com/chickenbestlover/RNN-Time-series-Anomaly-Detection/issues/42
# (what repackage_hidden is for; the maintainer points to
# https://discuss.pytorch.org/t/help-clarifying-repackage-hidden-in-word-language-model/226)
# Without hidden = repackage_hidden(hidden), PyTorch raises at loss.backward() on the
# second batch: Trying to backward through the graph a second time (or directly
# access saved tensors after they have already been freed). ...
# Cause (trimmed from its train loop): the LSTM's (h, c) tuple is fed into the next
# batch as it is, so the second loss reaches the first batch's freed graph.
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


torch.manual_seed(0)
model = RNNPredictor(3, 8)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
series = torch.randn(13, 2, 3)
for i in range(0, 12, 4):
    inputSeq, targetSeq = series[i:i + 4], series[i + 1:i + 5]
    optimizer.zero_grad()
    outSeq, hidden = model(inputSeq, hidden)
    loss = nn.functional.mse_loss(outSeq, targetSeq)
    loss.backward()
    optimizer.step()
