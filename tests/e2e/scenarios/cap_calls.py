"""In-place mistakes around the calls the engine makes into user code:
torch.utils.checkpoint (both implementations), custom autograd.Functions
(saving inputs, saving outputs, mark_dirty) and torch.autograd.functional's
jacobian and hessian. Each case runs its own backward call, which PyTorch
fails; the script catches each error and prints it."""
import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
w = torch.randn(4, 4, requires_grad=True)


def block(h):
    a = h @ w  # @block-inner
    return torch.tanh(a)


def block_mutating(h):
    h.mul_(2)  # @mutating-mut
    return torch.sin(h)  # @mutating-inner


class MyExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad):
        result, = ctx.saved_tensors
        return grad * result


class MyMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, grad * x


class AddOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * x


def attempt(fn):
    try:
        fn()
        print("no error")
    except RuntimeError as e:
        print("error:", str(e).split(" Hint:")[0])


def ckpt_false():
    x = torch.randn(2, 4, requires_grad=True)
    h = x * 2
    out = checkpoint(block, h, use_reentrant=False)  # @ckpt0-call
    h.mul_(3)  # @ckpt0-mut
    out.sum().backward()  # @ckpt0-bw


def ckpt_true():
    x = torch.randn(2, 4, requires_grad=True)
    h = x * 2
    out = checkpoint(block, h, use_reentrant=True)  # @ckpt1-call
    h.mul_(3)  # @ckpt1-mut
    out.sum().backward()  # @ckpt1-bw


def ckpt_mutating():
    x = torch.randn(2, 4, requires_grad=True)
    h = x * 2
    out = checkpoint(block_mutating, h, use_reentrant=False)  # @mutating-call
    out.sum().backward()  # @mutating-bw


def fn_out():
    a = torch.randn(3, requires_grad=True)
    result = MyExp.apply(a * 1)  # @fnout-call
    result.add_(1)  # @fnout-mut
    result.sum().backward()  # @fnout-bw


def fn_in():
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True) * 2
    y = MyMul.apply(a * 1, b)  # @fnin-call
    b.mul_(3)  # @fnin-mut
    y.sum().backward()  # @fnin-bw


def fn_dirty():
    a = torch.randn(3, requires_grad=True)
    x = a * 1
    y = AddOne.apply(x)  # @fndirty-call
    x.mul_(2)  # @fndirty-mut
    y.sum().backward()  # @fndirty-bw


def exp_then_add(x):
    h = x.exp()  # @jac-save
    out = h * 2
    h.add_(1)  # @jac-mut
    return out


def jac():
    x = torch.randn(3, requires_grad=True)
    torch.autograd.functional.jacobian(exp_then_add, x)  # @jac-bw


def square_then_scale(x):
    h = x.exp()
    s = (h * h).sum()  # @hess-save
    h.mul_(2)  # @hess-mut
    return s


def hess():
    x = torch.randn(3, requires_grad=True)
    torch.autograd.functional.hessian(square_then_scale, x)  # @hess-bw


for case in (ckpt_false, ckpt_true, ckpt_mutating, fn_out, fn_in, fn_dirty, jac, hess):
    attempt(case)
