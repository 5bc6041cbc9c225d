"""Kernel writes: ops that write a tensor a node saved without moving its
version, so backward reads the new values with no error.

    kernel_writes.py CASE [correct]

bn_eval_train: a BatchNorm module's eval-mode forward saves its running
statistics; a training-mode forward of the same module updates them in
place (aten::native_batch_norm) before the backward of the first.
fused_adam: a fused Adam step (aten::_fused_adam_) writes a parameter a
forward saved (x @ w.t() saves w for x's gradient), before that forward's
backward.
update_stats: torch.batch_norm_update_stats writes running statistics that
an eval-mode F.batch_norm saved.
bn_train: correct training code: train-mode BatchNorm steps (running
statistics updated every forward, never read by backward), an evaluation
pass under no_grad, an eval-mode forward whose backward runs before the
next training forward, a small residual network.

With `correct`, the case runs in the order that gives the right gradients
(backward first): the script prints the gradient; a test compares the two.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

case = sys.argv[1]
correct = len(sys.argv) > 2 and sys.argv[2] == "correct"
torch.manual_seed(0)


def show(t):
    print(" ".join("%.6f" % v for v in t.flatten().tolist()))


if case == "bn_eval_train":
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    x, x2 = torch.randn(8, 4), torch.randn(8, 4) * 5 + 3
    model.eval()
    y = model(x)  # @bn_eval_train-save
    if correct:
        y.pow(2).sum().backward()
    model.train()
    model(x2)  # @bn_eval_train-write
    model.eval()
    if not correct:
        y.pow(2).sum().backward()  # @bn_eval_train-backward
    show(model[0].weight.grad)

elif case == "fused_adam":
    w = torch.randn(3, 4, requires_grad=True)
    opt = torch.optim.Adam([w], lr=0.5, fused=True)
    x = torch.randn(8, 4, requires_grad=True)
    y = x @ w.t()  # @fused_adam-save
    if correct:
        y.pow(2).sum().backward()
    w.grad = torch.ones_like(w)
    opt.step()  # @fused_adam-write
    if not correct:
        y.pow(2).sum().backward()  # @fused_adam-backward
    show(x.grad)

elif case == "update_stats":
    x, x2 = torch.randn(8, 3, requires_grad=True), torch.randn(8, 3) * 4 + 2
    rm, rv = torch.zeros(3), torch.ones(3)
    y = F.batch_norm(x, rm, rv, training=False)  # @update_stats-save
    if correct:
        y.pow(2).sum().backward()
    torch.batch_norm_update_stats(x2, rm, rv, 0.5)  # @update_stats-write
    if not correct:
        y.pow(2).sum().backward()  # @update_stats-backward
    show(x.grad)

elif case == "bn_train":
    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(c)

        def forward(self, x):
            return F.relu(x + self.bn(self.conv(x)))

    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          Block(4), Block(4), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 2), nn.BatchNorm1d(2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        model.train()
        loss = model(torch.randn(4, 3, 8, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            model(torch.randn(4, 3, 8, 8))
    # an eval-mode forward with a graph, its backward before training goes on
    model.eval()
    model(torch.randn(4, 3, 8, 8)).sum().backward()
    model.train()
    model(torch.randn(4, 3, 8, 8)).sum().backward()
    # two training forwards, one backward (gradient accumulation): the
    # first forward's saved running statistics are rewritten, unread
    model(torch.randn(4, 3, 8, 8)).sum().add(model(torch.randn(4, 3, 8, 8)).sum()).backward()
    show(model[-1].running_mean)

else:
    sys.exit("unknown case " + case)
