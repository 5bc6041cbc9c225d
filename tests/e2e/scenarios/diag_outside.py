"""A forward that ran before recording started (gradtrace.record() opened
between forward and backward), then a change during the recording and the
backward: diagnose must say the graph is outside the recording, and still
find what the recording saw.
Usage: diag_outside.py TRACE [CASE]

inplace (default): an in-place change PyTorch catches at backward.
swap: `u.data = ...` on a tensor the forward saved: no error, wrong
gradients (found: the assignment is recorded, the node's saved tensors are
read when backward reaches it).
numpy: a write through a NumPy view of a saved tensor: no error, wrong
gradients, and nothing the recording can check (noted).
clean: nothing changes: correct, and noted."""
import sys

import torch

import gradtrace

case = sys.argv[2] if len(sys.argv) > 2 else "inplace"
torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
u = torch.randn(3)
h = x * 2
loss = (h * h).sum() + (x * u).sum()  # @outside-fwd
with gradtrace.record(sys.argv[1]):
    if case == "inplace":
        h.mul_(3)  # @outside-mut
    elif case == "swap":
        u.data = torch.ones(3)  # @outside-swap
    elif case == "numpy":
        u.numpy()[:] = 1.0  # @outside-numpy
    try:
        loss.backward()  # @outside-bw
        print("grad", x.grad)
    except RuntimeError as e:
        print("error:", str(e).split(" Hint:")[0])
