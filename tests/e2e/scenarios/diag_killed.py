"""The seed's mistake, then the process is killed with SIGKILL after the
recorder committed what it had: the trace is partial (run.status running)."""
import os
import signal
import time

import torch

weights = torch.tensor([1.0, 2.0, 0.5])
logits = torch.randn(4, 3, requires_grad=True)
target = torch.tensor([0, 1, 2, 1])
loss = torch.nn.functional.cross_entropy(logits, target, weight=weights)  # @killed_save
weights.mul_(2)  # @killed_mutate
try:
    loss.backward()  # @killed_backward
except RuntimeError as e:
    print("raised:", str(e)[:80])
time.sleep(0.6)  # let the recorder's time-based batch commit on the next event
(torch.ones(2) + 1).sum()
time.sleep(0.6)
(torch.ones(2) + 1).sum()
os.kill(os.getpid(), signal.SIGKILL)
