"""Trimmed from pytorch/examples mnist (its Net, random images instead of
MNIST), trained as torch.jit.trace and torch.jit.script modules and through
a scripted function. Tracing under the dispatch adapter's TorchDispatchMode
left the Conv2d's input out of the traced graph: its output was a constant,
the parameters got no gradient and training went another way. A correct
run: the same stdout as python3 gives, and gradtrace diagnose finds
nothing."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc1 = nn.Linear(8 * 5 * 5, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


@torch.jit.script
def scaled(x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.tanh(x) * s + x.sigmoid()


torch.manual_seed(0)
data = torch.randn(8, 1, 14, 14)
target = torch.randint(0, 10, (8,))
for kind in ("trace", "script"):
    torch.manual_seed(1)
    net = Net()
    model = torch.jit.trace(net, data) if kind == "trace" else torch.jit.script(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        opt.zero_grad()
        out = model(data)
        loss = F.nll_loss(out, target) + scaled(out, 0.1).mean()
        loss.backward()
        print(kind, step, "%.4f" % loss.item(),
              [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in net.parameters()])
        opt.step()
