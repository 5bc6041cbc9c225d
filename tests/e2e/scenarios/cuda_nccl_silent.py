"""An in-place all_reduce under NCCL on a tensor a product saved for
backward, on two GPUs (one per rank, started with torch.multiprocessing.spawn):
no error, the gradient is silently the reduced one.
Usage: cuda_nccl_silent.py PORT"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2)
    dev = torch.device("cuda", rank)
    w = torch.ones(4, device=dev, requires_grad=True)
    stats = torch.full((4,), float(rank + 1), device=dev)
    y = (w * stats).sum()  # @nccl-save
    dist.all_reduce(stats)  # @nccl-write
    y.backward()  # @nccl-backward
    torch.cuda.synchronize()
    print("rank %d grad %s" % (rank, w.grad.tolist()))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2)
