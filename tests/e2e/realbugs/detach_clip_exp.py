# Report: https://androidkt.com/one-of-the-variables-needed-for-gradient-computation-has-been-modified-by-an-inplace-operation/
# (the "detach() shares storage" case of that write-up)
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [6]], which
# is output 0 of Exp, is at version 1; expected version 0 instead. ...
# Cause: detach() gives a tensor sharing storage (and version counter) with exp()'s
# output, which exp saved for its backward; capping the detached copy in place for
# logging changes the saved output. The write-up's fix: detach().clone().
import torch

torch.manual_seed(0)
x = torch.randn(6, requires_grad=True)
y = x.exp()
shown = y.detach()
shown[shown > 2] = 2
print(shown)
loss = (y * torch.arange(6.0)).sum()
loss.backward()
