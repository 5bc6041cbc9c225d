"""Real-size models from random weights, one training step each with the
classic mistake: the optimizer steps between the forward and its backward.

    cap_models.py MODEL OPTIMIZER IMPL TRUTH.json

MODEL: resnet50 (a ResNet-50-shaped CNN: bottleneck blocks 3-4-6-3, 161
parameter tensors), transformer (nn.TransformerEncoder, 12 layers, 147
parameter tensors) or mlp (150 Linear layers, 300 parameter tensors).
OPTIMIZER: adam, adamw or sgd (momentum 0.9); IMPL: foreach, fused or loop.

Before the step, the script writes to TRUTH.json the names of the
parameters some autograd node saved (read from the graph's _saved_
attributes, matched by data pointer): the weights the step makes stale.
After the backward it prints PyTorch's error (or 'no error') and a checksum
of the parameters, so that a recorded run can be compared with a plain one.
"""
import json
import sys

import torch
import torch.nn as nn

MODEL, OPT, IMPL, TRUTH = sys.argv[1:5]
torch.manual_seed(0)


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + idt)


class ResNet50(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def build():
    if MODEL == "resnet50":
        return ResNet50(), lambda: (torch.randn(2, 3, 64, 64), torch.tensor([1, 7]))
    if MODEL == "transformer":
        layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True)

        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(100, 256)
                self.encoder = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
                self.head = nn.Linear(256, 10)

            def forward(self, tokens):
                return self.head(self.encoder(self.embed(tokens)).mean(1))

        return Encoder(), lambda: (torch.randint(0, 100, (2, 16)), torch.tensor([3, 4]))
    if MODEL == "mlp":
        layers = []
        for _ in range(150):
            layers += [nn.Linear(4, 4), nn.Tanh()]
        return nn.Sequential(*layers), lambda: (torch.randn(8, 4), torch.randint(0, 4, (8,)))
    raise SystemExit("unknown model " + MODEL)


def saved_params(model, root):
    """Names of the parameters some node reachable from root saved."""
    ptrs = set()
    seen, todo = set(), [root]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_"):
                v = getattr(node, attr)
                for t in (v if isinstance(v, (tuple, list)) else [v]):
                    if isinstance(t, torch.Tensor):
                        ptrs.add(t.data_ptr())
        todo.extend(n for n, _ in node.next_functions)
    return sorted("model." + n for n, p in model.named_parameters() if p.data_ptr() in ptrs)


model, batch = build()
kw = {"foreach": {"foreach": True}, "fused": {"fused": True},
      "loop": {"foreach": False}}[IMPL]
if OPT == "adam":
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, **kw)
elif OPT == "adamw":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **kw)
else:
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, **kw)
x, y = batch()
nn.functional.cross_entropy(model(x), y).backward()
opt.step()  # a good step: every parameter has a gradient and optimizer state

loss = nn.functional.cross_entropy(model(x), y)
with open(TRUTH, "w") as f:
    json.dump({"stale": saved_params(model, loss.grad_fn),
               "params": len(list(model.parameters()))}, f)
opt.step()  # @step  (the mistake: before the backward of this forward)
try:
    loss.backward()  # @backward
    print("no error")
except RuntimeError as e:
    print("error:", str(e).split(" Hint:")[0])
with torch.no_grad():
    print("checksum: %.10e" % sum(p.double().sum().item() for p in model.parameters()))
