"""DistributedDataParallel on 2 CPU ranks (gloo) with parameters the loss does
not use: DDP raises "Expected to have finished reduction in the prior
iteration ..." at the second forward.

    ddp_unused.py CASE PORT

CASE
    unused   a layer defined in __init__ and never called in forward
    branch   a layer computed in forward whose output is not in the loss
    detach   a layer whose output is detach()ed before the rest
    nograd   a layer run under torch.no_grad()

Lines the test looks up are marked with a comment "# @<mark>".
"""
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class Unused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.extra = torch.nn.Linear(8, 8)  # @made
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Branch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.aux = torch.nn.Linear(8, 2)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        side = self.aux(h)  # @used
        return self.fc2(h)


class Detached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        h = self.enc(x).detach()  # @cut
        return self.head(h)


class NoGrad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        with torch.no_grad():
            h = self.enc(x)  # @nograd
        return self.head(h)


def main(rank, world, port, case):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = {"unused": Unused, "branch": Branch, "detach": Detached, "nograd": NoGrad}[case]()
    ddp_model = torch.nn.parallel.DistributedDataParallel(model)  # @ddp
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    for step in range(2):
        x = torch.randn(8, 4, generator=gen)
        loss = ddp_model(x).pow(2).mean()  # @raise
        opt.zero_grad()
        loss.backward()  # @backward
        opt.step()
    print("rank %d done" % rank)
    # leave together: a rank tearing gloo down while its peer still talks
    # to it can abort ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2, int(sys.argv[2]), sys.argv[1]), nprocs=2)
