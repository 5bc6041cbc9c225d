"""Training patterns that only CUDA has, each run on the GPU.
Usage: cuda_patterns.py CASE

seed: the seed's class weights on the GPU, updated in place between the
  loss and backward(): PyTorch raises (inplace_invalidated_saved).
amp: a correct autocast fp16 step with GradScaler (it unscales gradients in
  place after backward): no finding.
fused_adam / foreach_adam: Adam (fused=True / foreach=True) stepped between
  a forward and its backward: the fused kernel writes the weights a Linear
  saved; PyTorch raises.
lstm: a correct cuDNN LSTM step (flat weight buffer): no finding.
lstm_flatten: flatten_parameters() between forward and backward of a cuDNN
  LSTM: must behave exactly as the plain run does.
non_blocking: a non_blocking host-to-device copy into a tensor a product
  saved: PyTorch raises.
nosync: SGD steps under torch.cuda.set_sync_debug_mode("error"): any
  operation that waits for the device raises, so a recorder that
  synchronised would fail the run.
graph: a training step captured into a CUDA graph and replayed: must behave
  exactly as the plain run does (recorded, or refused with one line).
Prints one line `result ...` whose values the plain and recorded runs share."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

case = sys.argv[1]
dev = torch.device("cuda")
torch.manual_seed(0)


def seed():
    logits = torch.randn(8, 3, device=dev, requires_grad=True)
    target = torch.randint(0, 3, (8,), device=dev)
    class_weights = torch.ones(3, device=dev)
    log_probs = F.log_softmax(logits, dim=1)
    loss = F.nll_loss(log_probs, target, weight=class_weights)  # @cuda-save
    for i in range(3):
        class_weights[i] *= 1.5  # @cuda-write
    loss.backward()  # @cuda-backward


def amp():
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(16, 32, device=dev)
    y = torch.randint(0, 4, (16,), device=dev)
    for _ in range(3):
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    print("result %.4f" % loss.item())


def adam(**kw):
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, **kw)
    x = torch.randn(8, 16, device=dev)
    warm = model(x).sum()
    warm.backward()  # gives the parameters gradients for the early step
    loss = model(x).pow(2).mean()  # @cuda-adam-forward
    opt.step()  # @cuda-adam-step
    loss.backward()  # @cuda-adam-backward


def lstm(flatten):
    rnn = nn.LSTM(8, 16, num_layers=2, batch_first=True).to(dev)
    opt = torch.optim.SGD(rnn.parameters(), lr=0.05)
    x = torch.randn(4, 5, 8, device=dev)
    for _ in range(2):
        opt.zero_grad()
        out, _ = rnn(x)
        loss = out.pow(2).mean()
        if flatten:
            rnn.flatten_parameters()
        loss.backward()
        opt.step()
    print("result %.5f" % loss.item())


def non_blocking():
    w = torch.randn(4, device=dev, requires_grad=True)
    buf = torch.randn(4, device=dev)
    y = (w * buf).sum()  # @cuda-nb-save
    host = torch.ones(4).pin_memory()
    buf.copy_(host, non_blocking=True)  # @cuda-nb-write
    y.backward()  # @cuda-nb-backward


def nosync():
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=dev)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    for _ in range(3):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
    torch.cuda.set_sync_debug_mode("default")
    print("result %.5f" % loss.item())


def graph():
    model = nn.Linear(8, 8).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    static_x = torch.randn(4, 8, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up on a side stream, as CUDA graphs require
            opt.zero_grad(set_to_none=True)
            model(static_x).pow(2).mean().backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = model(static_x).pow(2).mean()
        static_loss.backward()
        opt.step()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    print("result %.5f" % static_loss.item())


cases = {
    "seed": seed,
    "amp": amp,
    "fused_adam": lambda: adam(fused=True),
    "foreach_adam": lambda: adam(foreach=True),
    "lstm": lambda: lstm(False),
    "lstm_flatten": lambda: lstm(True),
    "non_blocking": non_blocking,
    "nosync": nosync,
    "graph": graph,
}
cases[case]()
