"""A saved tensor made before recording started and changed while
recording: SigmoidBackward0 saves h before `gradtrace.record()` opens; h is
changed in place inside the recording, and backward fails. argv: the trace."""
import sys

import torch

import gradtrace

x = torch.ones(4, requires_grad=True)
h = torch.sigmoid(x)  # @made
with gradtrace.record(sys.argv[1]):
    h.mul_(2)  # @changed
    h.sum().backward()  # @backward
