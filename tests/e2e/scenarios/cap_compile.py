"""A torch.compile'd function (TorchDynamo, eager backend) called while
recording, twice, with a backward each time; prints what dynamo captured.

    cap_compile.py compiled|plain"""
import sys

import torch

torch.manual_seed(0)
x = torch.randn(5, requires_grad=True)


def body(t):
    return (t.sin() * 2).sum()


fn = torch.compile(body, backend="eager") if sys.argv[1] == "compiled" else body
for _ in range(2):
    fn(x).backward()
print("grad", [round(v, 5) for v in x.grad.tolist()])
if sys.argv[1] == "compiled":
    from torch._dynamo.utils import counters
    print("captured", counters["stats"].get("calls_captured", 0) > 0)
