# Report: https://github.com/pytorch/pytorch/issues/11192
# PyTorch raises at l2.backward(): Trying to backward through the graph a second time
# (or directly access saved tensors after they have already been freed). ...
# Cause: both log_probs go through the distribution's cached logits (computed
# once from probs); l1.backward() frees that shared part of the graph.
import torch
from torch.distributions import Bernoulli

p = torch.tensor(0.2, requires_grad=True)
pi = Bernoulli(p)
l1 = 2 * pi.log_prob(torch.tensor(1.0))
l2 = 3 * pi.log_prob(torch.tensor(0.0))
l1.backward()
l2.backward()
print(p.grad)
