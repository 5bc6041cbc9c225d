"""What recording costs: small training loops on CPU, several ways, in one process.

    python bench/bench_overhead.py [--rounds 5] [--steps 400] [--models mlp,cnn,block]
                                   [--modes plain,engine,keep2,...]

Models: an MLP (64-128-128-10, batch 32), a small CNN (two 3x3 convs, batch
8, 16x16 inputs) and a bigger one, a transformer encoder block (d_model 128,
4 heads, sequence 32, batch 8), each trained with SGD (forward, loss,
backward, optimizer step) on one thread. Modes:
  plain     no instrumentation
  floor     a do-nothing TorchDispatchMode: the cost any recorder built on
            __torch_dispatch__ pays before doing any work
  anomaly   torch.autograd.set_detect_anomaly(True)
  engine    gradtrace.record(...) through the engine adapter
            (at::RecordFunction capture, GRADTRACE_ADAPTER=engine); rows go
            to the row log during the run and into SQLite at close; saved
            tensors fingerprinted as by default (check_saved="sampled")
  engine_fp_off  the same with check_saved="off": no fingerprint
  engine_fp_full  the same with check_saved="full": every saved element
  engine_direct  the same with every row inserted into SQLite as it comes
            (GRADTRACE_ROW_LOG=0: the writer before the row log)
  dispatch  gradtrace.record(...) through the dispatch adapter
  dispatch_fp_off  the same with check_saved="off"
  gt_idle   the dispatch adapter with its window closed (backward_calls far
            ahead): the floor of that adapter's own entry point
  keep2     gradtrace.record(..., keep_last=2) through the engine adapter:
            the flight recorder (an in-memory window of the last 2 backward
            calls, written at stop); its trace's size is printed (`_trace`)
  keep2_dispatch  the same through the dispatch adapter
For the recording modes the figure is the training loop with the trace
open (`_loop`), and closing the trace (folding the row log or what is left,
indexes, WAL checkpoint) is printed on its own lines (`_close` wall,
`_close_cpu` process CPU), and the total process CPU of loop and close per
step beside plain's (`_with_close_vs_plain`). Figures: process CPU
(every thread, the engine's background fold included), training-thread CPU
and wall, per step; ns per recorded op (process CPU above plain, divided by
the ops the trace holds). With engine and engine_fp_off both run, what the
default fingerprints cost is printed as a share of recording without them
(`_fp_cost`: process CPU of loop and close, engine over engine_fp_off;
likewise dispatch). The modes are interleaved in each round (the
machine is shared; wall time drifts); each figure is the median of the
rounds. Prints `name: value unit` lines and ratios to plain; never fails.
"""
import argparse
import os
import statistics
import sys
import sqlite3
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


def block():
    model = torch.nn.Sequential(
        torch.nn.TransformerEncoderLayer(128, 4, dim_feedforward=256, dropout=0.0,
                                         batch_first=True),
        torch.nn.Flatten(), torch.nn.Linear(32 * 128, 10))
    x = torch.randn(8, 32, 128)
    y = torch.randint(0, 10, (8,))
    return model, x, y


MODELS = {"mlp": mlp, "cnn": cnn, "block": block}
RECORDING = ("engine", "engine_direct", "dispatch", "gt_idle", "keep2",
             "keep2_dispatch", "engine_fp_off", "engine_fp_full", "dispatch_fp_off")
# check_saved of each recording mode (the default, sampled, where not named)
CHECK_SAVED = {"engine_fp_off": "off", "engine_fp_full": "full", "dispatch_fp_off": "off"}


def train(model, opt, x, y, steps):
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def clocks():
    return time.process_time(), time.thread_time(), time.perf_counter()


def since(c0):
    c1 = clocks()
    return tuple(b - a for a, b in zip(c0, c1))


def measure(build, mode, steps, tmp, counter):
    """((process, thread, wall) of the loop, close seconds or None, ops)."""
    torch.manual_seed(0)
    model, x, y = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train(model, opt, x, y, 2)  # warm up outside the measurement
    if mode in RECORDING:
        counter[0] += 1
        path = os.path.join(tmp, "bench%d.db" % counter[0])
        window = (10 ** 6, 10 ** 6) if mode == "gt_idle" else None
        keep = 2 if mode.startswith("keep2") else None
        engine = mode in ("engine", "engine_direct", "keep2", "engine_fp_off",
                          "engine_fp_full")
        os.environ["GRADTRACE_ADAPTER"] = "engine" if engine else "dispatch"
        os.environ["GRADTRACE_ROW_LOG"] = "0" if mode == "engine_direct" else "1"
        rec = gradtrace.record(path, backward_calls=window, keep_last=keep,
                               check_saved=CHECK_SAVED.get(mode))
        rec.start()
        if engine and rec.adapter != "engine":
            rec.stop()
            return None, None, 0
        try:
            c0 = clocks()
            train(model, opt, x, y, steps)
            loop = since(c0)
        finally:
            t0 = time.perf_counter(), time.process_time()
            rec.stop()
            close = time.perf_counter() - t0[0], time.process_time() - t0[1]
        db = sqlite3.connect(path)
        ops = db.execute("SELECT count(*) FROM ops").fetchone()[0]
        db.close()
        if keep:
            ops = os.path.getsize(path)  # the window holds few ops: its size instead
        os.unlink(path)
        return loop, close, ops
    c0 = clocks()
    if mode == "plain":
        train(model, opt, x, y, steps)
    elif mode == "floor":
        with Floor():
            train(model, opt, x, y, steps)
    elif mode == "anomaly":
        with torch.autograd.set_detect_anomaly(True):
            train(model, opt, x, y, steps)
    return since(c0), None, 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    # a loop shorter than a few fold periods (50 ms) measures the training
    # thread alone: the fold thread's work then all lands in the close
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--models", default="mlp,cnn,block")
    ap.add_argument("--modes", default="plain,floor,anomaly,engine,engine_fp_off,"
                    "engine_direct,dispatch,dispatch_fp_off,gt_idle,keep2,keep2_dispatch",
                    help="modes to interleave (plain, the anchor, is always run)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    modes = ["plain"] + [m for m in args.modes.split(",") if m and m != "plain"]
    for m in modes:
        if m not in ("plain", "floor", "anomaly") + RECORDING:
            ap.error("unknown mode %r" % m)
    print("torch: %s" % torch.__version__)
    print("python: %s" % sys.version.split()[0])
    clock_names = ("cpu", "thread_cpu", "wall")
    with tempfile.TemporaryDirectory(prefix="gtbench-") as tmp:
        counter = [0]
        for name in args.models.split(","):
            build = MODELS[name]
            got = {m: [] for m in modes}
            closes = {m: [] for m in modes}
            ops = {m: 0 for m in modes}
            for r in range(args.rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for m in order:
                    loop, close, n = measure(build, m, args.steps, tmp, counter)
                    if loop is None:
                        continue
                    got[m].append(loop)
                    if close is not None:
                        closes[m].append(close)
                    ops[m] = max(ops[m], n)
            med = {m: [statistics.median(v[i] for v in got[m]) for i in range(3)]
                   for m in modes if got[m]}
            for m in med:
                for i, c in enumerate(clock_names):
                    print("%s_%s_%s: %.3f ms/step" % (name, m, c, 1000 * med[m][i] / args.steps))
            for m in med:
                if m == "plain":
                    continue
                for i, c in enumerate(clock_names):
                    print("%s_%s_%s_vs_plain: %.2f x" % (name, m, c,
                                                         med[m][i] / med["plain"][i]))
            for m, off in (("engine", "engine_fp_off"), ("dispatch", "dispatch_fp_off"),
                           ("engine_fp_full", "engine_fp_off")):
                if m in med and off in med and closes[m] and closes[off]:
                    with_fp = med[m][0] + statistics.median(c[1] for c in closes[m])
                    without = med[off][0] + statistics.median(c[1] for c in closes[off])
                    print("%s_%s_fp_cost: %.1f %% (of %s)" % (
                        name, m, 100 * (with_fp - without) / without, off))
            for m in ("engine", "engine_direct", "dispatch", "keep2", "keep2_dispatch",
                      "engine_fp_off", "engine_fp_full", "dispatch_fp_off"):
                if m in med and closes[m]:
                    wall = statistics.median(c[0] for c in closes[m])
                    cpu = statistics.median(c[1] for c in closes[m])
                    print("%s_%s_close: %.1f ms/trace" % (name, m, 1000 * wall))
                    print("%s_%s_close_cpu: %.1f ms/trace" % (name, m, 1000 * cpu))
                    print("%s_%s_cpu_with_close_vs_plain: %.2f x" % (
                        name, m, (med[m][0] + cpu) / med["plain"][0]))
                if m.startswith("keep2") and m in med:
                    print("%s_%s_trace: %.0f KiB" % (name, m, ops[m] / 1024))
                elif m in med and ops[m]:
                    per = (med[m][0] - med["plain"][0]) / (ops[m] / args.steps * args.steps)
                    print("%s_%s_ns_per_op: %.0f ns (%d ops/step)" % (
                        name, m, 1e9 * per, ops[m] // args.steps))


if __name__ == "__main__":
    main()
