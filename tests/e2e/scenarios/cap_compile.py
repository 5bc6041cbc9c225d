"""A torch.compile'd function (TorchDynamo, eager backend) called while
recording, twice, with a backward each time; prints what dynamo captured.
aot: the aot_eager backend, whose AOTAutograd calls torch.autograd.grad
itself while it compiles (tracing the backward graph).

    cap_compile.py compiled|aot|plain"""
import sys

import torch

torch.manual_seed(0)
x = torch.randn(5, requires_grad=True)


def body(t):
    return (t.sin() * 2).sum()


backend = {"compiled": "eager", "aot": "aot_eager"}.get(sys.argv[1])
fn = torch.compile(body, backend=backend) if backend else body
for _ in range(2):
    fn(x).backward()
print("grad", [round(v, 5) for v in x.grad.tolist()])
if backend:
    from torch._dynamo.utils import counters
    print("captured", counters["stats"].get("calls_captured", 0) > 0)
