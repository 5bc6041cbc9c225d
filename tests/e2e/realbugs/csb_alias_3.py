# Report: https://github.com/Jee-King/TSAN/issues/3 (model/tsan.py, class CSB)
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [1, 4, 8, 8]],
# which is output 0 of torch::autograd::CopySlices, is at version 5; expected version 1
# instead. ...
# Cause (trimmed): `out = x` binds a second name to the block's input, not a copy; the
# four quadrant assignments into out write x, which the ReLU before and the convolution
# of the other branch saved. The reporter's fix: out = x.clone().
import torch
import torch.nn as nn


class CSB(nn.Module):
    def __init__(self, n_feats):
        super().__init__()
        self.conv1 = nn.Conv2d(n_feats * 4, n_feats * 4, kernel_size=1, bias=False)

    def forward(self, x):
        h, w = x.size(2) // 2, x.size(3) // 2
        f_all = self.conv1(torch.cat([x[:, :, :h, :w], x[:, :, h:, :w],
                                      x[:, :, :h, w:], x[:, :, h:, w:]], 1))
        c = f_all.size(1) // 4
        out = x
        out[:, :, :h, :w] = f_all[:, :c]
        out[:, :, h:, :w] = f_all[:, c:2 * c]
        out[:, :, :h, w:] = f_all[:, 2 * c:3 * c]
        out[:, :, h:, w:] = f_all[:, 3 * c:]
        return out


torch.manual_seed(0)
first_conv = nn.Conv2d(3, 4, 1)
relu = nn.ReLU(inplace=True)
drb = nn.Conv2d(4, 4, 3, padding=1)
csb = CSB(4)
x = relu(first_conv(torch.randn(1, 3, 8, 8)))
down_b = drb(x)
top_b = torch.sigmoid(csb(x))
loss = (down_b * top_b).sum()
loss.backward()
