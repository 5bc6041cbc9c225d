"""Writes autograd cannot see, through memory handed out of PyTorch.

    cap_numpy.py CASE

numpy: a custom Function saves its output; a "fused kernel" writes into the
same memory through a NumPy view (no version bump, no error, wrong
gradient). clean: the same without the write. normalise: a policy's input
observation, a NumPy array seen through torch.from_numpy and saved by the
linear layer for its weight's gradient, normalised in place by NumPy before
backward. kernel: a "fused cross-entropy kernel" (ctypes.memmove through
data_ptr()) writes its gradient into the logits that tanh saved. dropped:
70,000 forward graphs dropped without backward first (their saved tensors'
fingerprints wait for nodes that never run, past the adapters' cap), then
numpy. Prints the gradient."""
import ctypes
import sys

import numpy as np

import torch


class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad):
        result, = ctx.saved_tensors
        return grad * result


torch.manual_seed(0)
if sys.argv[1] == "normalise":
    obs_np = np.random.RandomState(0).rand(64, 128).astype(np.float32)
    obs = torch.from_numpy(obs_np)
    policy = torch.nn.Linear(128, 8)
    out = policy(obs)  # @obs_saved
    scale = out.detach().abs().mean()  # @obs_read
    obs_np -= obs_np.mean()  # @normalise
    obs_np /= obs_np.std()
    (out * scale).pow(2).sum().backward()  # @obs_backward
    print("grad", round(policy.weight.grad.sum().item(), 3))
    sys.exit(0)
if sys.argv[1] == "kernel":
    w = torch.randn(128, 100, requires_grad=True)
    feats = torch.randn(256, 128)
    logits = torch.tanh(feats @ w)  # @logits_saved
    target = torch.randint(0, 100, (256,))
    loss = torch.nn.functional.cross_entropy(logits, target)
    # the "fused kernel": the loss's gradient computed by hand and written
    # over the logits' memory, as a kernel given logits.data_ptr() would
    grad = (logits.detach().softmax(-1) - torch.nn.functional.one_hot(target, 100)) / 256
    ctypes.memmove(logits.data_ptr(), grad.data_ptr(), grad.numel() * 4)  # @kernel
    loss.backward()  # @kernel_backward
    print("grad", round(w.grad.abs().sum().item(), 3))
    sys.exit(0)
if sys.argv[1] == "dropped":
    w = torch.randn(4, requires_grad=True)
    for _ in range(70000):
        w * w  # MulBackward0 saves self and other; its graph is dropped
x = torch.randn(4, requires_grad=True)
y = Exp.apply(x)  # @save
if sys.argv[1] in ("numpy", "dropped"):
    view = y.detach().numpy()  # @touch
    view[:] = 0.0  # @write
y.sum().backward()  # @backward
print("grad", x.grad.tolist())
