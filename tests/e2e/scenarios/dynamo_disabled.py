"""Code PyTorch wraps with torch._disable_dynamo (tests/e2e/test_diagnose_notes.py).

torch.utils.checkpoint.checkpoint (reentrant and not) and torch.func
transforms run through TorchDynamo's DisableContext wrapper, a frame of
torch/_dynamo/eval_frame.py that compiles nothing: nothing here is
torch.compile'd, so diagnose must not say compiled code ran eagerly.
"""
import torch
import torch.utils.checkpoint as ck

torch.manual_seed(0)
w = torch.randn(4, 4, requires_grad=True)
x = torch.randn(3, 4, requires_grad=True)
opt = torch.optim.Adam([w])
for reentrant in (True, False):
    opt.zero_grad()
    y = ck.checkpoint(lambda t: (t @ w).tanh(), x, use_reentrant=reentrant)
    y.sum().backward()
    opt.step()
print(torch.func.vmap(torch.func.grad(lambda t: (t ** 3).sum()))(torch.ones(2, 3)).sum().item())
