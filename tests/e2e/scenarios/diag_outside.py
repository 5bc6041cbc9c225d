"""A forward that ran before recording started (gradtrace.record() opened
between forward and backward), then an in-place change and the backward
PyTorch fails: diagnose must say the graph is outside the recording.
Usage: diag_outside.py TRACE"""
import sys

import torch

import gradtrace

x = torch.randn(3, requires_grad=True)
h = x * 2
loss = (h * h).sum()  # @outside-fwd
with gradtrace.record(sys.argv[1]):
    h.mul_(3)  # @outside-mut
    try:
        loss.backward()  # @outside-bw
        print("no error")
    except RuntimeError as e:
        print("error:", str(e).split(" Hint:")[0])
