# Report: https://github.com/heykeetae/Self-Attention-GAN/issues/62
# PyTorch raises at the second backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [1]] is
# at version 1; expected version 0 instead.
# Cause (trimmed): out = self.gamma*out + x saves gamma; the optimizer steps
# between the discriminator's two backward calls over the same forward.
import torch
import torch.nn as nn


class SelfAttn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.query = nn.Conv2d(c, c, 1)
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        b, c, h, w = x.shape
        q = self.query(x).view(b, c, h * w)
        attn = torch.softmax(torch.bmm(q.transpose(1, 2), q), dim=-1)
        out = torch.bmm(q, attn).view(b, c, h, w)
        out = self.gamma * out + x
        return out


torch.manual_seed(0)
D = SelfAttn(4)
opt = torch.optim.Adam(D.parameters(), lr=1e-3)
out = D(torch.randn(2, 4, 3, 3))
d_loss_real = -out.mean()
d_loss_fake = out.pow(2).mean()
opt.zero_grad()
d_loss_real.backward(retain_graph=True)
opt.step()
d_loss_fake.backward()
