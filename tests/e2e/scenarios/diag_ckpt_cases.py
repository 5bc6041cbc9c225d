"""In-place mistakes around torch.utils.checkpoint (use_reentrant=False and
True) and custom autograd.Functions, for test_diagnose_checkpoint.py. Each
case runs its own backward call, which PyTorch fails; the script prints
each error. Lines marked `# @tag` are what the test expects diagnose to
name: the call (-call), the write (-mut), the line inside the called
function (-inner) and the backward call (-bw)."""
import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
w1 = torch.randn(4, 4, requires_grad=True)
w2 = torch.randn(4, 4, requires_grad=True)


def mlp(h):
    a = torch.relu(h @ w1)  # @mlp-inner
    b = torch.tanh(a @ w2)
    return b * h


def scale_in_place(h):
    h.mul_(2)  # @scale-mut
    z = torch.exp(h)  # @scale-inner
    return z * w1.sum()


class SaveOut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.sigmoid()  # @saveout-inner
        ctx.save_for_backward(out)  # @saveout-save
        return out

    @staticmethod
    def backward(ctx, g):
        out, = ctx.saved_tensors
        return g * out * (1 - out)


class SaveIn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x, k)  # @savein-save
        return x * k  # @savein-inner

    @staticmethod
    def backward(ctx, g):
        x, k = ctx.saved_tensors
        return g * k, g * x


class Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(3)  # @dirty-inner
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)  # @dirty-save
        return x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 3


def attempt(fn):
    try:
        fn()
        print("no error")
    except RuntimeError as e:
        print("error:", str(e).split(" Hint:")[0])


def nr_after():
    x = torch.randn(3, 4, requires_grad=True)
    hid = x + 1
    out = checkpoint(mlp, hid, use_reentrant=False)  # @nr_after-call
    hid.add_(1)  # @nr_after-mut
    out.sum().backward()  # @nr_after-bw


def r_after():
    x = torch.randn(3, 4, requires_grad=True)
    hid = x + 1
    out = checkpoint(mlp, hid, use_reentrant=True)  # @r_after-call
    hid.add_(1)  # @r_after-mut
    out.sum().backward()  # @r_after-bw


def nr_inside():
    x = torch.randn(3, 4, requires_grad=True)
    hid = x * 1
    out = checkpoint(scale_in_place, hid, use_reentrant=False)  # @nr_inside-call
    out.sum().backward()  # @nr_inside-bw


def r_inside():
    x = torch.randn(3, 4, requires_grad=True)
    hid = x * 1
    out = checkpoint(scale_in_place, hid, use_reentrant=True)  # @r_inside-call
    out.sum().backward()  # @r_inside-bw


def nr_two():
    # two checkpointed calls on one input: one finding per call, the
    # later call's nodes run first in backward
    x = torch.randn(3, 4, requires_grad=True)
    hid = x + 1
    a = checkpoint(mlp, hid, use_reentrant=False)  # @nr_two-call
    b = checkpoint(mlp, hid, use_reentrant=False)  # @nr_two-call2
    hid.sub_(1)  # @nr_two-mut
    (a + b).sum().backward()  # @nr_two-bw


def fn_out():
    x = torch.randn(5, requires_grad=True)
    act = SaveOut.apply(x + 0)  # @fn_out-call
    act.mul_(2)  # @fn_out-mut
    act.sum().backward()  # @fn_out-bw


def fn_in():
    x = torch.randn(5, requires_grad=True)
    k = torch.randn(5, requires_grad=True) + 1
    y = SaveIn.apply(x + 0, k)  # @fn_in-call
    k.div_(2)  # @fn_in-mut
    y.sum().backward()  # @fn_in-bw


def fn_dirty():
    x = torch.randn(5, requires_grad=True)
    v = x * 1
    y = Dirty.apply(v)  # @fn_dirty-call
    v.add_(1)  # @fn_dirty-mut
    y.sum().backward()  # @fn_dirty-bw


for case in (nr_after, r_after, nr_inside, r_inside, nr_two, fn_out, fn_in, fn_dirty):
    attempt(case)
