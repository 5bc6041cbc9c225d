"""What recording costs: small training loops on CPU, five ways, in one process.

    python bench/bench_overhead.py [--rounds 7] [--steps 40]

Models: an MLP (64-128-128-10, batch 32) and a small CNN (two 3x3 convs,
batch 8, 16x16 inputs), each trained with SGD (forward, loss, backward,
optimizer step) on one thread. Modes:
  plain     no instrumentation
  floor     a do-nothing TorchDispatchMode: the cost any recorder built on
            __torch_dispatch__ pays before doing any work
  gradtrace gradtrace.record(...) with every op recorded into a fresh trace
  gt_idle   gradtrace.record(...) with its window closed (backward_calls far
            ahead): the floor of gradtrace's own entry point (its
            __torch_dispatch__ is a C method: no Python frame per op; the
            rest of the floor is PyTorch boxing each op for Python)
  anomaly   torch.autograd.set_detect_anomaly(True)
The gradtrace figure includes creating and closing the trace (schema, WAL
checkpoint): a fixed cost per trace, not per op. `gradtrace_loop` is the
same run's training loop alone, with the trace open, and `gt_open_close`
that fixed cost in ms per trace.
The modes are interleaved in each round (the machine is shared; wall time
drifts) and timed in process CPU seconds; each figure is the median of the
rounds. Prints `name: value unit` lines and ratios; never fails.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import gradtrace


class Floor(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def mlp():
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    return model, x, y


def cnn():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 10))
    x = torch.randn(8, 3, 16, 16)
    y = torch.randint(0, 10, (8,))
    return model, x, y


def train(model, opt, x, y, steps):
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def measure(build, mode, steps, tmp, counter):
    torch.manual_seed(0)
    model, x, y = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train(model, opt, x, y, 2)  # warm up outside the measurement
    events = 0
    loop = None
    t0 = time.process_time()
    if mode == "plain":
        train(model, opt, x, y, steps)
    elif mode == "floor":
        with Floor():
            train(model, opt, x, y, steps)
    elif mode == "anomaly":
        with torch.autograd.set_detect_anomaly(True):
            train(model, opt, x, y, steps)
    elif mode in ("gradtrace", "gt_idle"):
        counter[0] += 1
        path = os.path.join(tmp, "bench%d.db" % counter[0])
        window = (10 ** 6, 10 ** 6) if mode == "gt_idle" else None
        rec = gradtrace.record(path, backward_calls=window)
        rec.start()
        try:
            t1 = time.process_time()
            train(model, opt, x, y, steps)
            loop = time.process_time() - t1
        finally:
            rec.stop()
        total = time.process_time() - t0
        events = os.path.getsize(path)
        os.unlink(path)
        return total, events, loop
    return time.process_time() - t0, events, loop


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    modes = ["plain", "floor", "gradtrace", "gt_idle", "anomaly"]
    print("torch: %s" % torch.__version__)
    print("python: %s" % sys.version.split()[0])
    with tempfile.TemporaryDirectory(prefix="gtbench-") as tmp:
        counter = [0]
        for name, build in (("mlp", mlp), ("cnn", cnn)):
            times = {m: [] for m in modes}
            loops = []
            fixed = []
            size = 0
            for r in range(args.rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for m in order:
                    dt, nbytes, loop = measure(build, m, args.steps, tmp, counter)
                    times[m].append(dt)
                    if m == "gradtrace":
                        loops.append(loop)
                        fixed.append(dt - loop)
                    size = max(size, nbytes)
            med = {m: statistics.median(times[m]) for m in modes}
            for m in modes:
                print("%s_%s: %.2f ms/step" % (name, m, 1000 * med[m] / args.steps))
            for m in modes[1:]:
                print("%s_%s_vs_plain: %.2f x" % (name, m, med[m] / med["plain"]))
            print("%s_gradtrace_vs_floor: %.2f x" % (name, med["gradtrace"] / med["floor"]))
            print("%s_gradtrace_vs_gt_idle: %.2f x" % (name, med["gradtrace"] / med["gt_idle"]))
            loop = statistics.median(loops)
            print("%s_gradtrace_loop: %.2f ms/step" % (name, 1000 * loop / args.steps))
            print("%s_gradtrace_loop_vs_floor: %.2f x" % (name, loop / med["floor"]))
            print("%s_gt_open_close: %.1f ms/trace" % (name, 1000 * statistics.median(fixed)))
            print("%s_trace_size: %.1f KiB/step" % (name, size / 1024 / args.steps))


if __name__ == "__main__":
    main()
