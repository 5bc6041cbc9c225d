# Report: https://github.com/pytorch/examples/issues/151: each update recomputes the
# log-probabilities of the sampled (state, action) pairs (reinforce_resample_151.py
# otherwise).
import torch
import torch.nn as nn
import torch.nn.functional as F


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 16)
        self.affine2 = nn.Linear(16, 2)
        self.saved = []  # (state, action)
        self.rewards = []

    def forward(self, x):
        return F.softmax(self.affine2(F.relu(self.affine1(x))), dim=-1)


torch.manual_seed(0)
policy = Policy()
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)


def select_action(state):
    m = torch.distributions.Categorical(policy(state))
    action = m.sample()
    policy.saved.append((state, action))
    return action.item()


def finish_episode(sample):
    returns = torch.tensor(policy.rewards)
    returns = (returns - returns.mean()) / (returns.std() + 1e-8)
    log_probs = [torch.distributions.Categorical(policy(policy.saved[i][0])).log_prob(
        policy.saved[i][1]) for i in sample]
    policy_loss = torch.stack([-lp * returns[i] for lp, i in zip(log_probs, sample)]).sum()
    optimizer.zero_grad()
    policy_loss.backward()
    optimizer.step()


for t in range(6):
    select_action(torch.randn(4))
    policy.rewards.append(float(t % 3))
for sample in ([0, 2, 4], [2, 4]):
    finish_episode(sample)
