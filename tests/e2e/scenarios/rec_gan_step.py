"""GAN-style mistake: the discriminator's optimizer steps between the
generator's forward through D and the generator's backward, so D's weight
(saved by the generator's forward) is modified in place before backward."""
import torch

torch.manual_seed(0)
G = torch.nn.Linear(4, 6)
D = torch.nn.Linear(6, 1)
opt_d = torch.optim.SGD(D.parameters(), lr=0.1)

z = torch.randn(8, 4)
fake = G(z)
d_fake = D(fake)
loss_d = d_fake.mean()
opt_d.zero_grad()
loss_d.backward(retain_graph=True)
opt_d.step()
loss_g = -d_fake.mean()
loss_g.backward()
