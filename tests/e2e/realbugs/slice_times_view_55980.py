# Report: https://github.com/pytorch/pytorch/issues/55980 (ezyang's answer)
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [12]],
# which is output 0 of AsStrided, is at version 1; expected version 0 instead.
# Cause: `x[0, :, 0, 0] = x[0, :, 0, 0] * var`: the product saves the slice of x (for
# var's gradient), and the assignment writes that slice. The fix given:
# x[0, :, 0, 0] = x[0, :, 0, 0].clone() * var (the in-place *= works too).
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(12, 12, 3)

    def forward(self, x, y):
        x = self.conv(x)
        y = self.conv(y)
        var = y.flatten()
        x[0, :, 0, 0] = x[0, :, 0, 0] * var
        return torch.mean(x)


model = Model()
x = torch.ones([1, 12, 3, 3]).float()
y = torch.ones([1, 12, 3, 3]).float()
loss = model(x, y)
loss.backward()
