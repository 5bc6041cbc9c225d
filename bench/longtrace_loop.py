"""A plain training loop of many small steps: what bench_longtrace.py records.

    python bench/longtrace_loop.py [STEPS] [--kill | --pause FILE]

A linear layer (16-4, batch 8) trained with SGD for STEPS steps (default
50,000): forward, loss, backward, optimizer step, zero_grad. Each step is
about 22 ops, so a whole recording holds about 1.1 M ops. Deterministic
(seeded); prints the final loss. --kill ends the process with SIGKILL
after the loop (a recording killed before it could close its trace);
--pause FILE waits after the loop until FILE exists (a recording still
live while its trace is read).
"""
import os
import signal
import sys
import time

import torch


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
    after = sys.argv[2:]
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)
    y = torch.randn(8, 4)
    loss = None
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    print("loss %.6f" % loss.item(), flush=True)
    if after[:1] == ["--kill"]:
        os.kill(os.getpid(), signal.SIGKILL)
    if after[:1] == ["--pause"]:
        while not os.path.exists(after[1]):
            time.sleep(0.05)


if __name__ == "__main__":
    main()
