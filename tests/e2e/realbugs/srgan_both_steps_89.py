# Report: https://github.com/leftthomas/SRGAN/issues/89 (and knazeri/edge-connect#188)
# PyTorch raises at g_loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [1, 16, 1, 1]]
# is at version 2; expected version 1 instead.
# Cause: optimizerD.step() runs between d_loss.backward(retain_graph=True) and
# g_loss.backward(), and g_loss goes through netD's forward of fake_img.
import torch
import torch.nn as nn

torch.manual_seed(0)
netG = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.PReLU(), nn.Conv2d(8, 3, 3, padding=1))
netD = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.LeakyReLU(0.2),
                     nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 1, 1))
optimizerG = torch.optim.Adam(netG.parameters())
optimizerD = torch.optim.Adam(netD.parameters())

real_img = torch.randn(2, 3, 8, 8)
z = torch.randn(2, 3, 8, 8)
fake_img = netG(z)
netD.zero_grad()
real_out = torch.sigmoid(netD(real_img)).mean()
fake_out = torch.sigmoid(netD(fake_img)).mean()
d_loss = 1 - real_out + fake_out
d_loss.backward(retain_graph=True)
optimizerD.step()
netG.zero_grad()
g_loss = (1 - fake_out) + ((fake_img - real_img) ** 2).mean()
g_loss.backward()
optimizerG.step()
