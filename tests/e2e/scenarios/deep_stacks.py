"""Python stacks deeper than any fixed array (issue 14, item 5).

deep: a 600-deep recursion (`down`, each call on a source line of over 300
characters, so the stack's description is several times the size a
capture record holds) writes in place at depth 450 (the line tagged
@mutation) a tensor sigmoid saved, and calls backward at the bottom (the
line tagged @backward), which raises.

twin: the same op at the bottom of 300 identical frames of `inner`,
reached once through `via_a` and once through `via_b`: two stacks equal in
their inner 300 frames, different beyond them.

wide: an op on a source line of 140,000 bytes (70,000 two-byte characters
in a comment), in function `scale` of a module written to the directory
given (WIDE_NAME), called from the line tagged @wide.

usage: deep_stacks.py deep|twin|wide DIR
"""
import os
import sys

import torch

DEPTH = 600
MUTATE_AT = 450
TWIN_DEPTH = 300
WIDE_NAME = "wide_line_module.py"
WIDE_CHARS = 70000


def down(d, y):
    if d == MUTATE_AT:
        y.mul_(2)  # @mutation
    if d == DEPTH:
        y.sum().backward()  # @backward
        return
    return down(d + 1, y)  # padding that makes each recursive call's source line longer than three hundred characters, so that six hundred of them do not fit in one capture record of the engine adapter and the stack goes through several; nothing may be lost on the way, not the outermost frame, not the innermost one, not one in between: END


def inner(d, t):
    if d == TWIN_DEPTH:
        t.mul_(2)  # @twin
        return
    inner(d + 1, t)


def via_a(t):
    inner(1, t)  # @via_a


def via_b(t):
    inner(1, t)  # @via_b


case = sys.argv[1] if len(sys.argv) > 1 else ""
if case == "deep":
    sys.setrecursionlimit(5000)
    x = torch.randn(4, requires_grad=True)
    y = x.sigmoid()  # saves its result
    down(1, y)  # @top
elif case == "twin":
    sys.setrecursionlimit(5000)
    t = torch.ones(3)
    via_a(t)
    via_b(t)
elif case == "wide" and len(sys.argv) > 2:
    with open(os.path.join(sys.argv[2], WIDE_NAME), "w", encoding="utf-8") as f:
        f.write("def scale(t):\n    t.mul_(2)  # %s\n" % ("\u00e9" * WIDE_CHARS))
    sys.path.insert(0, sys.argv[2])
    import wide_line_module

    wide_line_module.scale(torch.ones(3))  # @wide
else:
    sys.exit("usage: deep_stacks.py deep|twin|wide DIR")
