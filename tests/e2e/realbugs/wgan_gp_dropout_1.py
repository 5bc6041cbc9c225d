# Report: https://github.com/Randl/improved-improved-wgan-pytorch/issues/1
# PyTorch raises at torch.autograd.grad(...) in gradient_penalty: one of the variables
# needed for gradient computation has been modified by an inplace operation:
# [torch.FloatTensor [2, 8, 8, 8]], which is output 0 of LeakyReluBackward1, is at
# version 1; expected version 0 instead.
# Cause (trimmed from models.py WGANDiscriminator and loss_functions.py): each block of
# the critic is Conv2d, LeakyReLU(inplace=True), Dropout(inplace=True); the in-place
# LeakyReLU saves its output, which the in-place dropout then scales. The gradient
# penalty's autograd.grad(create_graph=True) is the first backward through the critic.
import torch
import torch.autograd as autograd
import torch.nn as nn


class Discriminator(nn.Module):
    def __init__(self, in_channels=3, num_filters=8):
        super().__init__()
        self.first_conv = nn.Sequential(
            nn.Conv2d(in_channels, num_filters, kernel_size=5, stride=2, padding=2),
            nn.LeakyReLU(inplace=True),
            nn.Dropout(p=0.5, inplace=True))
        self.final_fc = nn.Linear(num_filters * 8 * 8, 1)

    def forward(self, x):
        x = self.first_conv(x)
        pre_last = x.view(x.shape[0], -1)
        return self.final_fc(pre_last), pre_last


def gradient_penalty(fake_data, real_data, discriminator):
    alpha = torch.rand(fake_data.shape[0], 1, 1, 1).expand(fake_data.shape)
    interpolates = alpha * fake_data + (1 - alpha) * real_data
    interpolates.requires_grad_(True)
    disc_interpolates, _ = discriminator(interpolates)
    gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                              grad_outputs=torch.ones(disc_interpolates.size()),
                              create_graph=True, retain_graph=True, only_inputs=True)[0]
    gradients = gradients.view(gradients.size(0), -1)
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


torch.manual_seed(0)
netD = Discriminator()
real = torch.randn(2, 3, 16, 16)
fake = torch.randn(2, 3, 16, 16)
d_loss = netD(fake)[0].mean() - netD(real)[0].mean() + 10 * gradient_penalty(fake, real, netD)
d_loss.backward()
