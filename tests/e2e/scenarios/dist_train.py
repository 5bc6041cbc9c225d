"""Distributed training on CPU (gloo), for the rank-tracing tests.

    dist_train.py MODE OUTDIR [args...] [--spawn N --port P]

Launched by torchrun (one process per rank, env:// rendezvous), by hand
with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set, or, with --spawn N, it
starts its N ranks itself with torch.multiprocessing.spawn. Each rank writes
what it computed to OUTDIR/rank<R>.txt (exact float.hex) so that runs can be
compared bit for bit.

Modes
    ddp STEPS          a correct DistributedDataParallel loop (SGD)
    fsdp STEPS         a correct FSDP2 (fully_shard) loop (Adam): it frees each
                       layer's gathered parameters after the forward and
                       refills them before the backward (resize_ of their
                       storage, a copy hidden from autograd's version counter)
    silent             dist.all_reduce(stats) on a tensor that w * stats saved
                       for backward: no error, gradients silently wrong
    kill RANK STEP     the ddp loop, but rank RANK SIGKILLs itself in step STEP
                       after the forward
    fail               local training; rank r changes a saved tensor in place
                       in step r + 1 (backward raises there), then the rank ends
    collectives        one call of each collective gloo runs, on named tensors
    api                `silent` inside `with gradtrace.record(OUTDIR/api.db)`,
                       started after init_process_group (no RANK in the env)
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def write(outdir, rank, lines):
    with open(os.path.join(outdir, "rank%d.txt" % rank), "w") as f:
        f.write("\n".join(lines) + "\n")


def params_hex(model):
    return ["%s %s" % (n, [v.hex() for v in p.detach().flatten().tolist()])
            for n, p in model.named_parameters()]


def ddp(rank, outdir, steps, die=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ddp_model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    lines = []
    for step in range(steps):
        x = torch.randn(8, 4, generator=gen)
        y = torch.randn(8, 2, generator=gen)
        loss = torch.nn.functional.mse_loss(ddp_model(x), y)
        if die is not None and die == (rank, step):
            # a trace commits its events every 250 ms (at the next op): let
            # the steps so far reach the file, as they would in a longer run
            time.sleep(0.3)
            torch.ones(1).add(1)
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        loss.backward()
        opt.step()
        lines.append("%d %s" % (step, loss.item().hex()))
    write(outdir, rank, lines + params_hex(model))


def fsdp(rank, outdir, steps):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(100 + rank)
    lines = []
    for step in range(steps):
        x = torch.randn(8, 4, generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        lines.append("%d %s" % (step, loss.item().hex()))
    write(outdir, rank, lines + ["%s %s" % (n, [v.hex() for v in p.to_local().flatten().tolist()])
                                 for n, p in model.named_parameters()])


def silent(rank, outdir):
    w = torch.ones(3, requires_grad=True)
    stats = torch.full((3,), float(rank + 1))
    y = (w * stats).sum()
    dist.all_reduce(stats)
    y.backward()
    write(outdir, rank, ["grad %s" % [v.hex() for v in w.grad.tolist()]])


def fail(rank, outdir):
    torch.manual_seed(rank)
    w = torch.randn(4, 4, requires_grad=True)
    for step in range(1, 5):
        h = torch.randn(4, 4) @ w
        out = h.sigmoid()
        if step == rank + 1:
            out.mul_(2)  # sigmoid saved its result: backward raises here
        out.sum().backward()
        write(outdir, rank, ["step %d" % step])


def collectives(rank, outdir):
    world = dist.get_world_size()
    bcast = torch.full((2,), float(rank))
    dist.broadcast(bcast, 0)
    summed = torch.ones(2)
    dist.all_reduce(summed)
    gathered = [torch.zeros(2) for _ in range(world)]
    dist.all_gather(gathered, summed)
    flat = torch.zeros(2 * world)
    dist.all_gather_into_tensor(flat, summed)
    part = torch.zeros(2)
    dist.reduce_scatter_tensor(part, torch.ones(2 * world))
    reduced = torch.ones(2)
    dist.reduce(reduced, 0)
    scattered = torch.zeros(2)
    dist.scatter(scattered, [torch.full((2,), float(i)) for i in range(world)]
                 if rank == 0 else None, src=0)
    swapped = torch.zeros(world)
    dist.all_to_all_single(swapped, torch.arange(world, dtype=torch.float))
    if rank == 0:
        dist.send(torch.ones(1), 1)
    elif rank == 1:
        received = torch.zeros(1)
        dist.recv(received, 0)
    dist.barrier()
    write(outdir, rank, ["flat %s" % flat.tolist(), "swapped %s" % swapped.tolist()])


def run(rank, mode, outdir, args):
    if mode == "ddp":
        ddp(rank, outdir, int(args[0]))
    elif mode == "fsdp":
        fsdp(rank, outdir, int(args[0]))
    elif mode == "kill":
        ddp(rank, outdir, 4, die=(int(args[0]), int(args[1])))
    elif mode == "silent":
        silent(rank, outdir)
    elif mode == "fail":
        fail(rank, outdir)
    elif mode == "collectives":
        collectives(rank, outdir)
    elif mode == "api":
        import gradtrace
        with gradtrace.record(os.path.join(outdir, "api.db")):
            silent(rank, outdir)
    else:
        raise SystemExit("unknown mode %s" % mode)


def spawned(index, world, port, mode, outdir, args):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=index,
                            world_size=world)
    try:
        run(index, mode, outdir, args)
    finally:
        dist.destroy_process_group()


def main(argv):
    mode, outdir, rest = argv[0], argv[1], argv[2:]
    if "--spawn" in rest:
        i = rest.index("--spawn")
        world, port = int(rest[i + 1]), int(rest[i + 3])
        args = rest[:i] + rest[i + 4:]
        mp.spawn(spawned, args=(world, port, mode, outdir, args), nprocs=world)
        return
    dist.init_process_group("gloo")
    try:
        run(dist.get_rank(), mode, outdir, rest)
        if mode == "ddp":
            # every rank finishes the loop: leave together, so that no rank
            # tears gloo down while its peer still talks to it (under load
            # that aborted a rank with "terminate called without an active
            # exception", recorded or not)
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
