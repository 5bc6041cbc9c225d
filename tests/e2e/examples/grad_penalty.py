"""A WGAN-GP step and a MAML outer loop, the two common double-backward
idioms: the gradient penalty takes torch.autograd.grad(create_graph=True) of
the critic at interpolated points, with two Adam optimizers and the critic's
requires_grad switched off for the generator step; MAML takes one inner SGD
step with create_graph=True and calls the net on the fast weights through
torch.func.functional_call. A correct run: gradtrace diagnose must find
nothing."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
optG = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.9))
optD = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.9))
real_all = torch.randn(4, 10, 8) + 1.0


def gradient_penalty(D, real, fake):
    alpha = torch.rand(real.size(0), 1)
    interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d_interp = D(interp)
    grads = torch.autograd.grad(outputs=d_interp, inputs=interp,
                                grad_outputs=torch.ones_like(d_interp),
                                create_graph=True, retain_graph=True)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


for it in range(2):
    real = real_all[it]
    for _ in range(2):
        z = torch.randn(10, 4)
        fake = G(z).detach()
        lossD = D(fake).mean() - D(real).mean() + 10 * gradient_penalty(D, real, fake)
        optD.zero_grad()
        lossD.backward()
        optD.step()
    for p in D.parameters():
        p.requires_grad_(False)
    lossG = -D(G(torch.randn(10, 4))).mean()
    optG.zero_grad()
    lossG.backward()
    optG.step()
    for p in D.parameters():
        p.requires_grad_(True)
    print(it, repr(lossD.item()), repr(lossG.item()))

# MAML: one inner SGD step with create_graph, outer loss through it
net = nn.Sequential(nn.Linear(1, 20), nn.Tanh(), nn.Linear(20, 1))
meta = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(2):
    meta.zero_grad()
    total = 0.0
    for task in range(2):
        a, ph = 1.0 + task, 0.5 * step
        xs, xq = torch.rand(8, 1) * 6 - 3, torch.rand(8, 1) * 6 - 3
        ys, yq = a * torch.sin(xs + ph), a * torch.sin(xq + ph)
        params = dict(net.named_parameters())
        inner = F.mse_loss(functional_call(net, params, (xs,)), ys)
        grads = torch.autograd.grad(inner, list(params.values()), create_graph=True)
        fast = {n: p - 0.01 * g for (n, p), g in zip(params.items(), grads)}
        outer = F.mse_loss(functional_call(net, fast, (xq,)), yq)
        outer.backward()
        total += outer.item()
    meta.step()
    print("maml", step, repr(total))
