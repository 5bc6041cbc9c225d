# The fix of https://github.com/toshikwa/gail-airl-ppo.pytorch/issues/13 (chunk_clamp_13.py):
# the out-of-place clamp, log_stds = log_stds.clamp(-20, 2), as the reporter did.
import torch
import torch.nn as nn


class StateDependentPolicy(nn.Module):
    def __init__(self, state_dim, action_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, 16), nn.Tanh(),
                                 nn.Linear(16, 2 * action_dim))

    def sample(self, states):
        means, log_stds = self.net(states).chunk(2, dim=-1)
        log_stds = log_stds.clamp(-20, 2)
        noises = torch.randn_like(means)
        return torch.tanh(means + noises * log_stds.exp())


torch.manual_seed(0)
actor = StateDependentPolicy(3, 2)
actions = actor.sample(torch.randn(5, 3))
actions.pow(2).sum().backward()
