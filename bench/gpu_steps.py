"""What recording costs on a GPU: a ResNet-18 and a GPT-2-small-size
transformer, trained with AdamW on CUDA, plain and recorded, interleaved.

    python bench/gpu_steps.py [--rounds 3] [--steps 10] [--models resnet18,gpt2]
                              [--adapters engine,dispatch]

Models (written out here; nothing is downloaded):
  resnet18  the ResNet-18 layout (BasicBlocks [2,2,2,2], 64-512 channels),
            batch 32 of 3x224x224, 1000 classes
  gpt2      12 pre-norm blocks, d_model 768, 12 heads, MLP 3072, vocabulary
            50257 (output head tied to the token embedding), sequence 256, batch 8
            (the GPT-2 small shape, 124 M parameters)
Each round runs `--steps` training steps per mode in turn (plain, then each
adapter inside `gradtrace.record()`); a step is forward, loss, backward,
optimizer step, and the device is synchronised only at the ends of a
measured window. Figures per step, median over rounds: wall time and process
CPU (every thread). Prints `name: value unit` lines, each recorded figure
beside plain's from the same rounds and their ratio; never fails on a
figure. Without a CUDA device it prints one line and exits 0.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        idt = x if self.down is None else self.down(x)
        return F.relu(out + idt)


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride),
                                        BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT2(nn.Module):
    def __init__(self, vocab=50257, d=768, heads=12, layers=12, seq=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2 does

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=idx.device), 1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def resnet18(dev):
    model = ResNet18().to(dev)
    x = torch.randn(32, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (32,), device=dev)
    return model, lambda: F.cross_entropy(model(x), y)


def gpt2(dev):
    model = GPT2().to(dev)
    idx = torch.randint(0, 50257, (8, 256), device=dev)
    tgt = torch.randint(0, 50257, (8, 256), device=dev)
    return model, lambda: F.cross_entropy(model(idx).flatten(0, 1), tgt.flatten())


def window(step, steps):
    """(wall s, process CPU s) per step over `steps` steps."""
    torch.cuda.synchronize()
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return ((time.perf_counter() - w0) / steps, (time.process_time() - c0) / steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--models", default="resnet18,gpt2")
    ap.add_argument("--adapters", default="engine,dispatch")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_steps: no CUDA device visible to torch %s: nothing measured"
              % torch.__version__)
        return 0
    import gradtrace
    dev = torch.device("cuda")
    print("gpu_steps: %s, torch %s" % (torch.cuda.get_device_name(0), torch.__version__))
    tmp = tempfile.mkdtemp(prefix="gtgpu-")
    for name in a.models.split(","):
        torch.manual_seed(0)
        model, loss_fn = {"resnet18": resnet18, "gpt2": gpt2}[name](dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn().backward()
            opt.step()

        window(step, 3)  # warm-up: cuDNN autotuning, allocator, lazy init
        res = {m: [] for m in ["plain"] + a.adapters.split(",")}
        for r in range(a.rounds):
            for mode in res:
                if mode == "plain":
                    res[mode].append(window(step, a.steps))
                    continue
                os.environ["GRADTRACE_ADAPTER"] = mode
                path = os.path.join(tmp, "%s-%s-%d.db" % (name, mode, r))
                with gradtrace.record(path, overwrite=True):
                    res[mode].append(window(step, a.steps))
                os.unlink(path)
        pw = statistics.median(w for w, _ in res["plain"])
        pc = statistics.median(c for _, c in res["plain"])
        print("%s_plain_wall: %.2f ms" % (name, pw * 1e3))
        print("%s_plain_cpu: %.2f ms" % (name, pc * 1e3))
        for mode in res:
            if mode == "plain":
                continue
            w = statistics.median(x for x, _ in res[mode])
            c = statistics.median(x for _, x in res[mode])
            print("%s_%s_wall: %.2f ms" % (name, mode, w * 1e3))
            print("%s_%s_wall_vs_plain: %.2f x" % (name, mode, w / pw))
            print("%s_%s_cpu: %.2f ms" % (name, mode, c * 1e3))
            print("%s_%s_cpu_vs_plain: %.2f x" % (name, mode, c / pc))
        sys.stdout.flush()
        del model, opt
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
