"""What recording costs each rank of a distributed run: a 2-rank DDP loop on
CPU (gloo), started with torch.multiprocessing.spawn, recorded and not.

    python bench/bench_dist.py [--rounds 5] [--steps 30] [--world 2]

Model: an MLP (32-64-64-10, batch 16) wrapped in DistributedDataParallel,
trained with SGD. Each rank times its own training loop (forward, backward
with DDP's bucket all-reduces, step) in process CPU seconds and wall seconds;
`recorded` runs the same loop inside gradtrace.record(rank's trace), opened
before the loop and closed after it (the open/close cost is not in the
loop figure). Plain and recorded runs alternate in each round (the machine
is shared; wall time drifts); each figure is the median over rounds and
ranks. Also prints the size of each rank's trace. Prints `name: value unit`
lines and ratios; never fails.
"""
import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, port, steps, trace, result):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    data = [(torch.randn(16, 32, generator=gen), torch.randint(0, 10, (16,), generator=gen))
            for _ in range(steps)]
    rec = None
    if trace:
        import gradtrace
        rec = gradtrace.record(trace, per_rank=False).start()
    dist.barrier()
    c0, w0 = time.process_time(), time.perf_counter()
    for x, y in data:
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    c1, w1 = time.process_time(), time.perf_counter()
    if rec is not None:
        rec.stop()
    with open("%s.%d" % (result, rank), "w") as f:
        f.write("%r %r\n" % (c1 - c0, w1 - w0))
    dist.destroy_process_group()


def one_run(world, steps, trace_dir, tmp):
    result = os.path.join(tmp, "result")
    trace = os.path.join(trace_dir, "run.rank{rank}.db") if trace_dir else None
    if trace:
        trace_of = lambda r: trace.replace("{rank}", str(r))  # noqa: E731
    procs = []
    port = free_port()
    ctx = mp.get_context("spawn")
    for r in range(world):
        p = ctx.Process(target=worker,
                        args=(r, world, port, steps, trace_of(r) if trace else None, result))
        p.start()
        procs.append(p)
    for p in procs:
        p.join()
    times = []
    for r in range(world):
        with open("%s.%d" % (result, r)) as f:
            cpu, wall = map(float, f.read().split())
        times.append((cpu, wall))
    sizes = [os.path.getsize(trace_of(r)) for r in range(world)] if trace else []
    return times, sizes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    plain_cpu, plain_wall, rec_cpu, rec_wall, sizes = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            for mode in ("plain", "recorded"):
                d = os.path.join(tmp, "%s%d" % (mode, i))
                os.mkdir(d)
                times, sz = one_run(a.world, a.steps, d if mode == "recorded" else None, d)
                cpu = [t[0] for t in times]
                wall = [t[1] for t in times]
                (plain_cpu if mode == "plain" else rec_cpu).extend(cpu)
                (plain_wall if mode == "plain" else rec_wall).extend(wall)
                sizes.extend(sz)
    ms = lambda v: 1000 * statistics.median(v) / a.steps  # noqa: E731
    print("ranks: %d" % a.world)
    print("steps: %d" % a.steps)
    print("plain_step_cpu: %.3f ms" % ms(plain_cpu))
    print("recorded_step_cpu: %.3f ms" % ms(rec_cpu))
    print("recorded_vs_plain_cpu: %.2f x" % (ms(rec_cpu) / ms(plain_cpu)))
    print("plain_step_wall: %.3f ms" % ms(plain_wall))
    print("recorded_step_wall: %.3f ms" % ms(rec_wall))
    print("recorded_vs_plain_wall: %.2f x" % (ms(rec_wall) / ms(plain_wall)))
    print("rank_trace_size: %d bytes (median; min %d, max %d)" % (
        statistics.median(sizes), min(sizes), max(sizes)))
    print("rank_trace_size_per_step: %.0f bytes" % (statistics.median(sizes) / a.steps))


if __name__ == "__main__":
    sys.exit(main())
