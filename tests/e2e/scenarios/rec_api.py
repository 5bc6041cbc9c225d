"""Uses the Python API: `with gradtrace.record(path)` and start()/stop().
argv: dir to write traces into. Prints what it checked."""
import os
import sys

import torch

import gradtrace

out = sys.argv[1]
orig_backward = torch.Tensor.backward

with gradtrace.record(os.path.join(out, "with.db")):
    a = torch.ones(2, requires_grad=True)
    b = a.exp()
    b.add_(1)
    try:
        b.sum().backward()
    except RuntimeError as e:
        print("caught", type(e).__name__)

rec = gradtrace.record(os.path.join(out, "startstop.db"))
rec.start()
c = torch.ones(3, requires_grad=True)
(c * c).sum().backward()
rec.stop()

try:
    with gradtrace.record(os.path.join(out, "raise.db")):
        torch.ones(1).add_(1)
        raise KeyError("boom")
except KeyError:
    print("propagated KeyError")

notes = os.path.join(out, "notes.txt")
with open(notes, "w") as f:
    f.write("not a trace")
try:
    gradtrace.record(notes).start()
except FileExistsError as e:
    print("refused to overwrite", "overwrite=True" in str(e))

with gradtrace.record(os.path.join(out, "startstop.db")):
    torch.ones(1).add_(1)
print("kept", os.path.exists(os.path.join(out, "startstop.db.old")))

print("backward restored", torch.Tensor.backward is orig_backward)
