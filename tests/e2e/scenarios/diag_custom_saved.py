"""A custom autograd Function saves its output (ctx.save_for_backward of
the result); the caller then changes that output in place. PyTorch raises
"... which is output 0 of MyExpBackward, is at version 1; expected version
0". "saved at" must name the line that called the Function, not the op
inside its forward."""
import torch


class MyExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.exp()  # @inner
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, g):
        (result,) = ctx.saved_tensors
        return g * result


x = torch.randn(3, requires_grad=True)
y = MyExp.apply(x)  # @call
y.add_(1)  # @inplace
y.sum().backward()  # @backward
print("ok")
