# Report: https://github.com/pytorch/pytorch/issues/11742
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [1, 10]]
# is at version 2; expected version 1 instead.
# Cause (trimmed: no DataParallel; the layer is called twice before one backward()):
# forward redraws its noise buffers in place (self.eps_weight.normal_()); the product
# noise1 * eps_weight of the first call saved the buffer, the second call's normal_()
# writes it again.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MyLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
        self.noise1 = nn.Parameter(torch.Tensor(out_features, in_features))
        self.register_buffer("eps_weight", torch.Tensor(out_features, in_features))
        self.bias = nn.Parameter(torch.Tensor(out_features))
        self.noise2 = nn.Parameter(torch.Tensor(out_features))
        self.register_buffer("eps_bias", torch.Tensor(out_features))
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1. / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-stdv, stdv)
        self.bias.data.uniform_(-stdv, stdv)
        self.noise1.data.zero_()
        self.noise2.data.zero_()

    def forward(self, input):
        weight = self.weight + self.noise1 * self.eps_weight.normal_()
        bias = self.bias + self.noise2 * self.eps_bias.normal_()
        return F.linear(input, weight, bias)


torch.manual_seed(0)
layer = MyLinear(10, 1)
out_a = layer(torch.randn(4, 10))
out_b = layer(torch.randn(4, 10))
loss = (out_a - out_b).pow(2).mean()
loss.backward()
