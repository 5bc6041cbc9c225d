"""A jagged nested tensor (two sequences of different lengths, as a
variable-length batch) through nn.Linear, and a masked tensor's gradient.
Making the nested leaf's AccumulateGrad asks its sizes through Python
dispatch with its autograd lock held; the dispatch adapter read that
tensor's grad_fn there and the run hung. A correct run: the same stdout as
python3 gives, and gradtrace diagnose finds nothing."""
import warnings

import torch

warnings.filterwarnings("ignore")
torch.manual_seed(0)
lin = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
for step in range(2):
    a, b = torch.randn(2, 4), torch.randn(5, 4)
    nt = torch.nested.nested_tensor([a, b], layout=torch.jagged, requires_grad=True)
    out = lin(nt)
    loss = out.values().relu().sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, "%.4f" % loss.item(), "%.4f" % nt.grad.values().sum().item())

from torch.masked import masked_tensor  # noqa: E402

data = torch.randn(3, 4)
mask = torch.rand(3, 4) > 0.3
mt = masked_tensor(data, mask, requires_grad=True)
(mt * 2).sum().backward()
print("masked", "%.4f" % mt.grad.get_data().masked_fill(~mask, 0).sum().item())
