# The fix of https://github.com/pytorch/pytorch/issues/11192 (bernoulli_twice_11192.py):
# retain_graph=True on the first backward().
import torch
from torch.distributions import Bernoulli

p = torch.tensor(0.2, requires_grad=True)
pi = Bernoulli(p)
l1 = 2 * pi.log_prob(torch.tensor(1.0))
l2 = 3 * pi.log_prob(torch.tensor(0.0))
l1.backward(retain_graph=True)
l2.backward()
print(p.grad)
