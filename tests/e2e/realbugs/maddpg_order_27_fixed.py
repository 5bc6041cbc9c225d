# Report: https://github.com/starry-sky6688/MADDPG/issues/27: the maintainer's fix, the
# actor updated before the critic (maddpg_order_27.py otherwise).
import torch
import torch.nn as nn

torch.manual_seed(0)
actor = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2), nn.Tanh())
critic = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
actor_optim = torch.optim.Adam(actor.parameters(), lr=1e-3)
critic_optim = torch.optim.Adam(critic.parameters(), lr=1e-3)
o, u, target_q = torch.randn(8, 4), torch.randn(8, 2), torch.randn(8, 1)

q_value = critic(torch.cat([o, u], dim=1))
critic_loss = (target_q - q_value).pow(2).mean()
actor_loss = -critic(torch.cat([o, actor(o)], dim=1)).mean()

actor_optim.zero_grad()
actor_loss.backward()
actor_optim.step()

critic_optim.zero_grad()
critic_loss.backward()
critic_optim.step()
