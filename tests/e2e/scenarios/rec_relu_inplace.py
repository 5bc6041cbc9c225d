"""ReLU(inplace=True) right after a sigmoid: relu_ overwrites the sigmoid's
output, which SigmoidBackward0 saved, so backward() raises."""
import torch

torch.manual_seed(0)
x = torch.randn(4, requires_grad=True)
act = torch.nn.ReLU(inplace=True)
h = torch.sigmoid(x)
out = act(h)
out.sum().backward()
