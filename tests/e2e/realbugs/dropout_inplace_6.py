# Report: https://github.com/BierOne/bottom-up-attention-vqa/issues/6
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [4, 16]],
# which is output 0 of Relu, is at version 1; expected version 0 instead. ...
# Cause (trimmed from model/classifier.py, SimpleClassifier): nn.Dropout(inplace=True)
# right after nn.ReLU() overwrites the ReLU's output, which ReLU saved for its backward.
# The fix given in the thread: nn.Dropout(dropout, inplace=False).
import torch
import torch.nn as nn
from torch.nn.utils import weight_norm


class SimpleClassifier(nn.Module):
    def __init__(self, in_dim, hid_dim, out_dim, dropout):
        super().__init__()
        layers = [
            weight_norm(nn.Linear(in_dim, hid_dim), dim=None),
            nn.ReLU(),
            nn.Dropout(dropout, inplace=True),
            weight_norm(nn.Linear(hid_dim, out_dim), dim=None),
        ]
        self.main = nn.Sequential(*layers)

    def forward(self, x):
        return self.main(x)


torch.manual_seed(0)
classifier = SimpleClassifier(8, 16, 3, 0.5)
logits = classifier(torch.randn(4, 8))
loss = nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0]))
loss.backward()
