"""A loop that takes a while: `python rec_slow.py STEPS [EVERY]` runs STEPS
backward calls 20 ms apart, printing "step N" every EVERY steps (default
10) and "done" at the end."""
import sys
import time

import torch

steps = int(sys.argv[1])
every = int(sys.argv[2]) if len(sys.argv) > 2 else 10
x = torch.ones(4, requires_grad=True)
for i in range(steps):
    (x * x).sum().backward()
    if i % every == 0:
        print("step", i, flush=True)
    time.sleep(0.02)
print("done")
