"""gradtrace memory on recorded runs of a ResNet-18 (written out: no
torchvision) and a 3-layer nn.TransformerEncoder, checked against the same
step measured from inside torch.

The measurement is a separate plain run of the same script (argument
`measure`): a torch.autograd.graph.saved_tensors_hooks pack hook sees every
tensor autograd saves and sums the distinct storages among them
(untyped_storage().data_ptr(), nbytes()), each once. The pack hook returns
the tensor itself and a list keeps it, so no saved storage is freed and its
address reused during the forward. Neither run is disturbed by the other:
the recorded run has no hooks, the measured run no recorder.

Agreement is exact: the recorder keeps each storage's nbytes (storages) and
which storage each saved tensor is on, and gradtrace memory counts each
storage once over the saved tensors of the nodes the backward call
reaches. Both runs see every node reach the loss, so the hook's set (every
saved tensor) is the call's.
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

MODELS = r'''
"""Two models trained one step: `resnet18` (ResNet-18's layout, written out
here) and `transformer` (nn.TransformerEncoder, 3 layers). With `measure`,
the bytes held for backward are summed from inside torch instead: a
saved_tensors_hooks pack hook sees every tensor autograd saves, and the
distinct storages among them are counted once (printed as JSON)."""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet18(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


class Encoder(nn.Module):
    def __init__(self, vocab=100, d=64, layers=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 128, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


def step(which):
    torch.manual_seed(0)
    if which == "resnet18":
        model = ResNet18()
        x = torch.randn(2, 3, 64, 64)
        y = torch.tensor([1, 2])
        loss = F.cross_entropy(model(x), y)
    else:
        model = Encoder()
        tokens = torch.randint(0, 100, (2, 16))
        out = model(tokens)
        loss = F.cross_entropy(out.reshape(-1, 100), tokens.reshape(-1))
    return model, loss


def measure(which):
    storages = {}
    saved = []

    def pack(t):
        s = t.untyped_storage()
        key = s.data_ptr() if s.nbytes() else ("empty", len(saved))
        storages[key] = max(storages.get(key, 0), s.nbytes())
        saved.append(t)  # alive until backward, as autograd keeps it
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model, loss = step(which)
    print(json.dumps({"bytes": sum(storages.values()), "storages": len(storages),
                      "saved": len(saved)}))
    loss.backward()


if __name__ == "__main__":
    which = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "measure":
        measure(which)
    else:
        model, loss = step(which)
        loss.backward()
'''


def models_script():
    path = os.path.join(gtutil.tmpdir(), "mem_models.py")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(MODELS)
    return path


_measured = {}


def measured(which):
    """The hook's figures for model `which` (one plain run per model)."""
    if which not in _measured:
        cp = gtutil.run_plain(models_script(), which, "measure")
        assert cp.returncode == 0, cp.stderr[-3000:]
        _measured[which] = json.loads(cp.stdout.strip().splitlines()[-1])
    return _measured[which]


def memory(trace, *args, json_out=True):
    cmd = [gtutil.GRADTRACE, "memory", *(["--json"] if json_out else []), *args, trace]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout) if json_out else cp.stdout


class MemoryAgainstTorch(gtutil.BothAdapters, unittest.TestCase):
    def record(self, which, adapter):
        env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
        trace, _ = gtutil.record(models_script(), which, env=env)
        return trace

    def compare(self, which, adapter):
        trace = self.record(which, adapter)
        doc = memory(trace)
        want = measured(which)
        self.assertEqual(len(doc["calls"]), 1)
        call = doc["calls"][0]
        self.assertTrue(call["chosen"])
        # the same bytes, storages and saved tensors as torch's own hooks
        self.assertEqual(call["bytes"], want["bytes"], (adapter, which, want))
        self.assertEqual(call["storages"], want["storages"])
        self.assertEqual(call["saved"], want["saved"])
        self.assertEqual(call["live_bytes"], call["bytes"])
        # every breakdown adds up to the total, each storage once
        for key in ("by_module", "by_line", "by_node"):
            self.assertEqual(sum(g["bytes"] for g in call[key]), call["bytes"], key)
        self.assertEqual(sum(t["bytes"] for t in call["tensors"]), call["bytes"])
        self.assertEqual(call["timeline"][-1]["bytes"], call["bytes"])
        for m in call["checkpoint"]:
            self.assertEqual(m["held"], m["kept"] + m["shared"] + m["frees"], m)
        return trace, call

    def check(self, adapter):
        trace, call = self.compare("resnet18", adapter)
        modules = {g["module"]: g for g in call["by_module"]}
        # a parameter's name gives its module; a ReLU (no parameter) its
        # caller's attribute
        for name in ("model.conv1", "model.bn1", "model.layer1.0.conv1",
                     "model.layer4.1.bn2", "model.layer2.0.downsample.0",
                     "model.layer3.1.relu", "model.maxpool", "model.fc"):
            self.assertIn(name, modules, sorted(modules))
        # the largest saved storages: layer4's 3x3 conv weights (512*512*9*4)
        self.assertEqual(call["tensors"][0]["bytes"], 512 * 512 * 9 * 4)
        self.assertEqual(call["tensors"][0]["node_name"], "ConvolutionBackward0")
        self.assertEqual(call["tensors"][0]["slot"], "weight")
        # parameters are the bulk of a 2-image batch
        self.assertGreater(call["param_bytes"], call["bytes"] // 2)
        ckpt = {m["module"]: m for m in call["checkpoint"]}
        # recomputing a block keeps its input (made by the block before)
        block = ckpt["model.layer1.1"]
        self.assertGreater(block["frees"], 0)
        self.assertGreater(block["kept"], 0)
        # a whole model checkpointed frees every activation it made
        self.assertEqual(ckpt["model"]["frees"] + ckpt["model"]["kept"]
                         + ckpt["model"]["shared"], ckpt["model"]["held"])

        trace, call = self.compare("transformer", adapter)
        modules = {g["module"] for g in call["by_module"]}
        for name in ("model.embed", "model.head", "model.encoder.layers.0.self_attn",
                     "model.encoder.layers.2.linear1", "model.encoder.layers.1.norm2",
                     "model.encoder.layers.0.dropout"):
            self.assertIn(name, modules, sorted(modules))
        # the three layers hold the same
        held = [next(m for m in call["checkpoint"]
                     if m["module"] == "model.encoder.layers.%d" % i)["held"]
                for i in range(3)]
        self.assertEqual(len(set(held)), 1, held)

    def test_text_graph_and_python(self):
        trace = self.record("transformer", gtutil.adapter())
        text = memory(trace, json_out=False)
        first = text.splitlines()[0]
        self.assertRegex(first, r"^backward call 1 \(Tensor\.backward at .*mem_models\.py:\d+\): "
                                r"[0-9.]+ KiB held for backward at its start$")
        for title in ("by module", "by line", "by node type", "largest saved tensors",
                      "held for this call as the forward ran",
                      "checkpointing: recomputing a module"):
            self.assertIn("\n" + title, text)
        # the Python API returns the command's document
        sys.path.insert(0, os.path.join(gtutil.SOURCE, "recorder", "python"))
        import gradtrace
        self.assertEqual(gradtrace.open(trace).memory(), memory(trace))
        # graph --bytes: nodes labelled with what they hold
        dot = os.path.join(gtutil.tmpdir(), "mem.dot")
        cp = subprocess.run([gtutil.GRADTRACE, "graph", "--bytes", "--all", "-o", dot, trace],
                            capture_output=True, text=True, timeout=300)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        with open(dot) as f:
            d = f.read()
        self.assertIn("holds 48.0 KiB", d)  # in_proj's weight, saved by MmBackward0
        self.assertIn("fillcolor", d)


if __name__ == "__main__":
    unittest.main()
