"""Trace content longer than any fixed array (issue 14, item 5).

name N: a tensor sigmoid saved, bound to a global variable whose name is
N characters long (`globals()`), is written in place through that name (the
line tagged @mutation), and backward raises.

error N: a custom autograd.Function's backward raises a RuntimeError whose
message is N characters (text(N) below, two-byte characters among them);
the run ends with it.

errtype N: after a backward that runs, an exception of a class whose name
is N characters ends the run, with a message of N characters.

oddtext: a backward that raises a RuntimeError whose message holds a NUL,
run from code whose file name holds a lone surrogate (what surrogateescape
lets through from undecodable bytes); the error is caught and a ValueError
with a NUL and a lone surrogate in its message ends the run.

usage: long_texts.py name|error|errtype N, long_texts.py oddtext
"""
import sys

import torch


def text(n):
    """n characters of numbered pieces (each a different number), some
    characters of two bytes."""
    piece = "%07d \u00e9\u00e8 piece|"
    return "".join(piece % i for i in range(n // len(piece % 0) + 1))[:n]


def long_name(n):
    return ("v" + text(n).replace(" ", "_").replace("|", "_"))[:n]


NUL_MESSAGE = "nul\x00inside"
ODD_MESSAGE = "before\x00after \udc80 end"
ODD_FILE = "odd\udc80name.py"


class Fails(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        if sys.argv[1] == "oddtext":
            raise RuntimeError(NUL_MESSAGE)
        raise RuntimeError(text(int(sys.argv[2])))


case = sys.argv[1] if len(sys.argv) > 2 or sys.argv[1:] == ["oddtext"] else ""
if case == "name":
    name = long_name(int(sys.argv[2]))
    x = torch.randn(4, requires_grad=True)
    globals()[name] = x.sigmoid()  # saves its result
    globals()[name].mul_(2)  # @mutation
    globals()[name].sum().backward()
elif case == "error":
    x = torch.randn(4, requires_grad=True)
    Fails.apply(x).sum().backward()
elif case == "errtype":
    n = int(sys.argv[2])
    x = torch.randn(4, requires_grad=True)
    x.sigmoid().sum().backward()
    raise type(text(n).replace(" ", "_").replace("|", "_"), (Exception,), {})(text(n))
elif case == "oddtext":
    x = torch.randn(4, requires_grad=True)
    exec(compile("y = Fails.apply(x.sigmoid())\n", ODD_FILE, "exec"))
    try:
        y.sum().backward()  # noqa: F821 (bound by the exec)
    except RuntimeError:
        pass
    raise ValueError(ODD_MESSAGE)
else:
    sys.exit("usage: long_texts.py name|error|errtype N")
