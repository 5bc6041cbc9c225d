"""DDP's per-forward buffer broadcast (broadcast_buffers=True) between two
forwards of one BatchNorm and one backward, in one gloo process: the
broadcast writes the running statistics the node saved, with no version
bump. In training mode BatchNorm's backward reads the batch statistics, not
the running ones: nothing to report. In eval mode it reads the running
ones: a silent write.
Usage: dist_bn_broadcast.py train|eval"""
import os
import sys

import torch
import torch.distributed as dist

case = sys.argv[1] if len(sys.argv) > 1 else "train"
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
bn = torch.nn.BatchNorm1d(4)
if case == "eval":
    bn.eval()
x = torch.randn(8, 4, requires_grad=True)
a = bn(x).sum()
for buf in bn.buffers():
    dist.broadcast(buf, 0)  # @broadcast
b = bn(x * 2).sum()
(a + b).backward()  # @backward
print("grad", x.grad.sum().item())
dist.destroy_process_group()
