"""Writes autograd cannot see: `.data =` assignments (spectral norm's
`u.data = new_u`) on tensors a node saved.

    cap_swap.py CASE

after_save: the power-iteration vector is swapped after the forward saved
it: no error, wrong gradients. before_save: the same swap before the
forward: correct. by_op: swapped, then used by an op before the backward.
set_op: replaced with set_(), an op autograd sees (PyTorch raises).
param: a module parameter swapped with `.data =` inside a helper function
(the finding names the helper's line). raw: the swap goes through the base
class's descriptor itself, past anything that watches `.data =` (only the
interval it happened in can be given). raw_steps: the same after three
earlier backward calls that saved u too (a parameter is saved again by
every step).
Prints the weight's gradient."""
import sys

import torch
import torch.nn.functional as F

case = sys.argv[1]
torch.manual_seed(0)
weight = torch.randn(4, 4, requires_grad=True)
u = F.normalize(torch.randn(4), dim=0)

if case == "before_save":
    u.data = F.normalize(weight.detach() @ u, dim=0)  # @swap
sigma = u @ weight @ u  # @save
if case in ("after_save", "by_op"):
    u.data = F.normalize(weight.detach() @ u, dim=0)  # @swap
if case == "raw":
    base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
    base.__dict__["data"].__set__(u, F.normalize(weight.detach() @ u, dim=0))  # @swap-raw
if case == "raw_steps":
    for _ in range(3):  # each step saves u again, as it would a parameter
        (u @ weight @ u).backward()  # @warm
    weight.grad = None
    sigma = u @ weight @ u  # @save-steps
    base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
    base.__dict__["data"].__set__(u, F.normalize(weight.detach() @ u, dim=0))  # @swap-steps
if case == "by_op":
    print("norm", round(float(u.norm()), 4))  # @notice
if case == "set_op":
    u.set_(F.normalize(torch.randn(4), dim=0))  # @swap
if case == "param":
    norm = torch.nn.LayerNorm(4)
    x = torch.randn(2, 4, requires_grad=True)
    sigma = (norm(x) * torch.arange(4.0)).sum()  # @save-param

    def reset(m):
        m.weight.data = torch.full((4,), 2.0)  # @swap-param

    reset(norm)
    weight = x  # the gradient printed: it reads norm.weight
try:
    sigma.backward()  # @backward
    print(weight.grad)
except RuntimeError as e:
    print("error:", str(e).split(" Hint:")[0])
