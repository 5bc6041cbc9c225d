"""Raises before any backward call, two frames deep."""
import sys

import torch


def build(n):
    w = torch.randn(n, requires_grad=True)
    print("built", n)
    sys.stdout.flush()
    raise ValueError("bad size %d for layer 'fc1'" % n)


x = torch.ones(3)
build(3)
