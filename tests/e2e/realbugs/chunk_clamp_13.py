# Report: https://github.com/toshikwa/gail-airl-ppo.pytorch/issues/13
# (same error: https://github.com/pytorch/pytorch/issues/46820)
# PyTorch raises at log_stds.clamp_(-20, 2): Output 1 of Split is a view and
# is being modified inplace. This view is the output of a function that returns
# multiple views. Such functions do not allow the output views to be modified
# inplace. You should replace the inplace operation by an out-of-place one.
# Cause: a Gaussian policy splits its head's output with chunk(2, dim=-1) and clamps
# the log-std half in place.
import torch
import torch.nn as nn


class StateDependentPolicy(nn.Module):
    def __init__(self, state_dim, action_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, 16), nn.Tanh(),
                                 nn.Linear(16, 2 * action_dim))

    def sample(self, states):
        means, log_stds = self.net(states).chunk(2, dim=-1)
        log_stds.clamp_(-20, 2)
        noises = torch.randn_like(means)
        return torch.tanh(means + noises * log_stds.exp())


torch.manual_seed(0)
actor = StateDependentPolicy(3, 2)
actions = actor.sample(torch.randn(5, 3))
actions.pow(2).sum().backward()
