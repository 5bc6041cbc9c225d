# Report: https://github.com/karpathy/nn-zero-to-hero/issues/31
# PyTorch raises at loss.backward() in the second iteration: Trying to backward
# through the graph a second time (or directly access saved tensors after they
# have already been freed). ...
# Cause: the forward pass is outside the training loop, so every iteration
# calls backward() on the same, already freed graph.
import torch
import torch.nn.functional as F

g = torch.Generator().manual_seed(2147483647)
xs = torch.tensor([0, 5, 13, 13, 1])
ys = torch.tensor([5, 13, 13, 1, 0])
W = torch.randn((27, 27), generator=g, requires_grad=True)
xenc = F.one_hot(xs, num_classes=27).float()

logits = xenc @ W
counts = logits.exp()
prob = counts / counts.sum(1, keepdim=True)
loss = -prob[torch.arange(5), ys].log().mean()

for k in range(3):
    W.grad = None
    loss.backward()
    W.data += -0.1 * W.grad
