# Report: https://github.com/starry-sky6688/MADDPG/issues/27 (same pattern:
# rail-berkeley/rlkit#109, "Optimize actor before the critic")
# PyTorch raises at actor_loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [16, 1]],
# which is output 0 of AsStrided, is at version 2; expected version 1 instead. ...
# Cause (trimmed from maddpg/maddpg.py, train()): both losses are computed first; the
# reporter moved the critic's update before the actor's, so critic_optim.step()
# changes the critic's weights in place, which the actor loss's graph (it runs the
# critic on the actor's action) saved. The maintainer's fix: update the actor first.
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

critic_optim.zero_grad()
critic_loss.backward()
critic_optim.step()

actor_optim.zero_grad()
actor_loss.backward()
actor_optim.step()
