# The fix of https://github.com/pytorch/pytorch/issues/55980 (slice_times_view_55980.py),
# the one given there: the product reads a copy of the slice it writes.
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(12, 12, 3)

    def forward(self, x, y):
        x = self.conv(x)
        y = self.conv(y)
        var = y.flatten()
        x[0, :, 0, 0] = x[0, :, 0, 0].clone() * var
        return torch.mean(x)


model = Model()
x = torch.ones([1, 12, 3, 3]).float()
y = torch.ones([1, 12, 3, 3]).float()
loss = model(x, y)
loss.backward()
