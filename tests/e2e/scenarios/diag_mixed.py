"""Many in-place mistakes in one recorded run, each in its own backward call
(a caught exception lets the next scenario run). Lines the tests look for end
in `# @tag`. Run one scenario with `--only NAME`.

Every scenario is the small real shape of a bug people hit: ReLU(inplace)
after sigmoid, a residual `+=`, an optimizer step between forward and
backward, slice assignment, writes through a view, through detach(), through
.data (silent), backward twice, two saved tensors broken at once, a mutation
inside a helper module in another file; and one control (an in-place op on a
tensor nobody saved) that must report nothing.
"""
import sys

import torch

import diag_helper

torch.manual_seed(0)
only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None


def run(name, fn):
    if only and name != only:
        return
    try:
        fn()
        print(name, "ok")
    except RuntimeError as e:
        print(name, "raised:", str(e).split("\n")[0][:100])


def relu_inplace():
    x = torch.randn(4, 3, requires_grad=True)
    act = torch.nn.ReLU(inplace=True)
    s = torch.sigmoid(x)  # @relu_save
    r = act(s)  # @relu_mutate
    r.sum().backward()  # @relu_backward


def residual():
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3)
    h = torch.tanh(lin(x))  # @residual_save
    h += x  # @residual_mutate
    h.sum().backward()  # @residual_backward


def optimizer_step():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    x = torch.randn(5, 3, requires_grad=True)
    loss = model(x).pow(2).sum()  # @opt_save
    opt.step()  # @opt_mutate
    loss.backward()  # @opt_backward


def slice_assign():
    x = torch.randn(2, 4, requires_grad=True)
    h = torch.sigmoid(x)  # @slice_save
    h[:, 0] = 0  # @slice_mutate
    h.sum().backward()  # @slice_backward


def view_write():
    x = torch.randn(3, requires_grad=True)
    e = torch.exp(x)  # @view_save
    first = e[0]
    first.mul_(2)  # @view_mutate
    e.sum().backward()  # @view_backward


def detach_write():
    x = torch.randn(3, requires_grad=True)
    e = torch.exp(x)  # @detach_save
    d = e.detach()
    d.zero_()  # @detach_mutate
    e.sum().backward()  # @detach_backward


def data_write():
    x = torch.randn(3, requires_grad=True)
    e = torch.exp(x)  # @data_save
    e.data.mul_(2)  # @data_mutate
    e.sum().backward()  # @data_backward


def backward_twice():
    x = torch.randn(3, requires_grad=True)
    y = torch.exp(x)  # @twice_save
    z = y.sum()
    z.backward()  # @twice_first
    z.backward()  # @twice_second


def two_saved():
    x = torch.randn(3, requires_grad=True)
    a = x * 1.5
    b = torch.sin(a)  # @two_save_a
    c = torch.cos(b)  # @two_save_b
    a.add_(1)  # @two_mutate_a
    b.mul_(2)  # @two_mutate_b
    c.sum().backward()  # @two_backward


def helper_module():
    x = torch.randn(3, requires_grad=True)
    e = torch.exp(x)  # @helper_save
    diag_helper.normalize_(e)  # @helper_call
    e.sum().backward()  # @helper_backward


def clean_training():
    # A control: a normal training loop with the in-place ops that are safe
    # (ReLU(inplace) after Linear, BatchNorm's running statistics, Adam's
    # state, a manual decay after backward) must report nothing.
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(inplace=True), torch.nn.Linear(8, 8),
        torch.nn.BatchNorm1d(8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        x = torch.randn(16, 4)
        loss = torch.nn.functional.cross_entropy(model(x), torch.randint(0, 3, (16,)))
        opt.zero_grad()
        loss.backward()  # @clean_backward
        opt.step()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.999)


def control_unsaved():
    x = torch.randn(3, requires_grad=True)
    h = x + 1
    h.mul_(3)  # @control_mutate
    h.sum().backward()  # @control_backward


run("relu_inplace", relu_inplace)
run("residual", residual)
run("optimizer_step", optimizer_step)
run("slice_assign", slice_assign)
run("view_write", view_write)
run("detach_write", detach_write)
run("data_write", data_write)
run("backward_twice", backward_twice)
run("two_saved", two_saved)
run("helper_module", helper_module)
run("clean_training", clean_training)
run("control_unsaved", control_unsaved)
