"""Ops of any size: a custom op (torch.library) taking two lists of 250
tensors, whose autograd formula saves all 500; a foreach multiply of the same
500 tensors; an op with 500 outputs (unbind). Then the last of the 500 inputs
is modified in place before the backward: PyTorch raises about it."""
import torch


@torch.library.custom_op("gtcap::mul_all", mutates_args=())
def mul_all(xs: list[torch.Tensor], ys: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([x * y for x, y in zip(xs, ys)]).sum(0)


@mul_all.register_fake
def _(xs, ys):
    return torch.empty_like(xs[0])


def setup_context(ctx, inputs, output):
    xs, ys = inputs
    ctx.n = len(xs)
    ctx.save_for_backward(*xs, *ys)


def backward(ctx, grad):
    saved = ctx.saved_tensors
    xs, ys = saved[:ctx.n], saved[ctx.n:]
    return [grad * y for y in ys], [grad * x for x in xs]


mul_all.register_autograd(backward, setup_context=setup_context)

torch.manual_seed(0)
xs = [torch.randn(3, requires_grad=True) * 1.0 for _ in range(250)]
ys = [torch.randn(3, requires_grad=True) * 1.0 for _ in range(250)]
prods = torch._foreach_mul(xs, ys)  # @foreach
rows = torch.randn(500, 2, requires_grad=True).unbind(0)  # @unbind
out = mul_all(xs, ys)  # @custom
total = out.sum() + sum(r.sum() for r in rows)
last = ys[-1]
last.mul_(2)  # @mutation
total.backward()  # @backward
