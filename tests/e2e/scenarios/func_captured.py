"""torch.func refuses an in-place op on a tensor the transformed function
captured from outside (a closure): "... attempted to call in-place operation
(aten::add_.Tensor) that would mutate a captured Tensor". With argument
`fixed`, the tensor is passed in and its new value returned, as the
suggestion says, and the run is clean."""
import sys

import torch

try:
    from torch.func import grad
except ImportError:  # PyTorch 1.13: the separate functorch package
    from functorch import grad

torch.manual_seed(0)
x = torch.randn(3)
w = torch.ones(3)

if len(sys.argv) > 1 and sys.argv[1] == "fixed":
    def f(x, w):
        w = w + x  # @fixed
        return (w * x).sum()

    print(grad(f)(x, w))
else:
    def f(x):
        w.add_(x)  # @captured
        return (w * x).sum()

    print(grad(f)(x))
