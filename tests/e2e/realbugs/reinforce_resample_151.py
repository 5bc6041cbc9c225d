# Report: https://github.com/pytorch/examples/issues/151 (reinforcement_learning/reinforce.py)
# PyTorch raises at policy_loss.backward() in the second finish_episode() call:
# Trying to backward through the graph a second time (or directly access saved
# tensors after they have already been freed). ...
# Cause (trimmed): to reuse experience, finish_episode() is called more than once on
# random samples of the episode's saved log-probabilities; the second sample holds
# log-probabilities whose graph the first call's backward() freed.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 16)
        self.affine2 = nn.Linear(16, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        return F.softmax(self.affine2(F.relu(self.affine1(x))), dim=-1)


torch.manual_seed(0)
policy = Policy()
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)


def select_action(state):
    m = torch.distributions.Categorical(policy(state))
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode(sample):
    returns = torch.tensor(policy.rewards)
    returns = (returns - returns.mean()) / (returns.std() + 1e-8)
    policy_loss = torch.stack([-policy.saved_log_probs[i] * returns[i] for i in sample]).sum()
    optimizer.zero_grad()
    policy_loss.backward()
    optimizer.step()


for t in range(6):
    select_action(torch.randn(4))
    policy.rewards.append(float(t % 3))
for sample in ([0, 2, 4], [2, 4]):
    finish_episode(sample)
