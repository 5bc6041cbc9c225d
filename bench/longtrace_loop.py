"""A plain training loop of many small steps: what bench_longtrace.py records.

    python bench/longtrace_loop.py [STEPS]

A linear layer (16-4, batch 8) trained with SGD for STEPS steps (default
50,000): forward, loss, backward, optimizer step, zero_grad. Each step is
about 22 ops, so a whole recording holds about 1.1 M ops. Deterministic
(seeded); prints the final loss.
"""
import sys

import torch


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
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
    print("loss %.6f" % loss.item())


if __name__ == "__main__":
    main()
