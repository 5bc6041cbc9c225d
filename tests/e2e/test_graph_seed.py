"""End-to-end test of `gradtrace graph` on a real recording of the seed
(examples/seed_class_weights.py): the DOT it writes is read back with cgraph
itself (libcgraph through ctypes, agmemread) and must hold the saved
class-weights tensor, the node that saved it, the in-place ops with their
lines and versions, and the edges between them; the SVG must parse as XML and
the PNG be a PNG.

Env: GRADTRACE (the built command), GT_SOURCE_DIR.
"""
import ctypes
import ctypes.util
import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

GRADTRACE = os.environ.get("GRADTRACE", "gradtrace")
SOURCE = os.environ.get(
    "GT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SEED = os.path.join(SOURCE, "examples", "seed_class_weights.py")


def line_of(fragment):
    """1-based line of the seed that holds `fragment`."""
    with open(SEED, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            if fragment in text:
                return number
    raise AssertionError(f"{fragment!r} not in {SEED}")


class Cgraph:
    """The few cgraph calls needed to read a DOT graph back."""

    def __init__(self):
        name = ctypes.util.find_library("cgraph") or "libcgraph.so.6"
        lib = ctypes.CDLL(name)
        vp, cp = ctypes.c_void_p, ctypes.c_char_p
        for fn, res, args in [
            ("agmemread", vp, [cp]), ("agclose", ctypes.c_int, [vp]),
            ("agfstnode", vp, [vp]), ("agnxtnode", vp, [vp, vp]),
            ("agfstout", vp, [vp, vp]), ("agnxtout", vp, [vp, vp]),
            ("agnameof", cp, [vp]), ("agget", cp, [vp, cp]),
        ]:
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        self.lib = lib
        for fn in ("aghead", "agtail"):
            f = getattr(lib, fn)
            f.restype, f.argtypes = vp, [vp]

    def read(self, dot):
        """{name: {attr: value}} for nodes and a list of (tail, head, attrs)."""
        lib = self.lib
        g = lib.agmemread(dot.encode("utf-8"))
        if not g:
            raise AssertionError("agmemread could not parse the DOT")
        nodes, edges = {}, []
        attrs = ("label", "class", "color", "penwidth", "shape", "style", "tooltip")

        def get(obj):
            out = {}
            for a in attrs:
                v = lib.agget(obj, a.encode())
                out[a] = v.decode("utf-8") if v is not None else ""
            return out

        n = lib.agfstnode(g)
        while n:
            name = lib.agnameof(n).decode("utf-8")
            nodes[name] = get(n)
            e = lib.agfstout(g, n)
            while e:
                head = lib.agnameof(lib.aghead(e)).decode("utf-8")
                edges.append((name, head, get(e)))
                e = lib.agnxtout(g, e)
            n = lib.agnxtnode(g, n)
        lib.agclose(g)
        return nodes, edges


def shown(label):
    """A DOT label as drawn: \\n breaks, \\\\ and &amp; decoded."""
    out, i = [], 0
    while i < len(label):
        if label.startswith("\\\\", i):
            out.append("\\")
            i += 2
        elif label.startswith("\\n", i):
            out.append("\n")
            i += 2
        elif label.startswith("&amp;", i):
            out.append("&")
            i += 5
        else:
            out.append(label[i])
            i += 1
    return "".join(out)


class GraphSeed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="gt_e2e_graph_seed_")
        cls.trace = os.path.join(cls.tmp.name, "seed.db")
        r = subprocess.run([GRADTRACE, "record", "-o", cls.trace, "--", SEED],
                           capture_output=True, text=True, timeout=600, cwd=SOURCE)
        if not os.path.exists(cls.trace):
            raise AssertionError(f"record wrote no trace: {r.stderr}")
        cls.nll_line = line_of("loss = F.nll_loss(")
        cls.update_line = line_of("class_weights[i] *=")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def graph(self, *args):
        r = subprocess.run([GRADTRACE, "graph", self.trace, *args], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def test_dot_structure(self):
        r = self.graph("-o", "-")
        nodes, edges = Cgraph().read(r.stdout)
        labels = {k: shown(v["label"]) for k, v in nodes.items()}

        # The node PyTorch fails on: NllLossBackward0 at the nll_loss line.
        fail = [k for k, v in nodes.items() if "gt-fail" in v["class"].split()]
        self.assertEqual(len(fail), 1, nodes)
        nll = fail[0]
        self.assertTrue(labels[nll].startswith(
            f"NllLossBackward0\nseed_class_weights.py:{self.nll_line}\n"
            "loss = F.nll_loss(log_probs, target, weight=class_weights)"), labels[nll])
        self.assertEqual(nodes[nll]["color"], "red")
        self.assertEqual(nodes[nll]["tooltip"],
                         f"examples/seed_class_weights.py:{self.nll_line}")

        # Its saved weight: class_weights, float32 [3], saved at 0, 6 at backward.
        bad = [k for k, v in nodes.items() if "gt-invalidated" in v["class"].split()]
        self.assertEqual(len(bad), 1)
        weight = bad[0]
        self.assertEqual(labels[weight], "weight (saved)\nfloat32 [3]\nclass_weights\n"
                                         "saved at version 0\nversion 6 when backward ran")
        self.assertIn((weight, nll), [(t, h) for t, h, _ in edges])

        # Six in-place ops at the update line, versions 1..6, each with a red
        # edge to the saved weight.
        muts = sorted((k for k, v in nodes.items() if v["class"] == "gt-mutation"),
                      key=lambda k: int(k[1:]))
        self.assertEqual(len(muts), 6)
        for version, m in enumerate(muts, 1):
            lines = labels[m].split("\n")
            self.assertIn(lines[0], ("aten::mul_.Tensor", "aten::copy_"))
            self.assertEqual(lines[1:], [f"seed_class_weights.py:{self.update_line}",
                                         "class_weights[i] *= 1.0 + share",
                                         f"→ version {version}"])
            red = [a for t, h, a in edges if t == m and h == weight]
            self.assertEqual(len(red), 1)
            self.assertEqual(red[0]["color"], "red")
        self.assertEqual([labels[m].split("\n")[0] for m in muts],
                         ["aten::mul_.Tensor", "aten::copy_"] * 3)

        # Next-function edges into the failing node: LogSoftmaxBackward0.
        into = [t for t, h, a in edges if h == nll and "gt-node" in nodes[t]["class"]]
        self.assertEqual([labels[t].split("\n")[0] for t in into], ["LogSoftmaxBackward0"])
        self.assertIn("(backward root)", labels[nll])

    def test_all_has_every_node(self):
        r = self.graph("-o", "-", "--all")
        nodes, edges = Cgraph().read(r.stdout)
        names = [shown(v["label"]).split("\n")[0] for k, v in nodes.items()
                 if "gt-node" in v["class"].split()]
        self.assertEqual(names.count("AccumulateGrad"), 4)  # 2 weights, 2 biases
        self.assertEqual(names.count("AddmmBackward0"), 2)
        self.assertEqual(names.count("NllLossBackward0"), 1)
        leaves = [k for k, v in nodes.items() if "gt-leaf" in v["class"].split()]
        self.assertEqual(len(leaves), 4)
        for leaf in leaves:
            self.assertTrue(any(t == leaf for t, _, _ in edges), leaf)
        self.assertIn("all 11 autograd nodes", shown(r.stdout[:2000]))

    def test_svg_and_png(self):
        svg = os.path.join(self.tmp.name, "seed.svg")
        png = os.path.join(self.tmp.name, "seed.png")
        self.graph("-o", svg)
        root = ET.parse(svg).getroot()
        texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
        self.assertIn("version 6 when backward ran", texts)
        self.assertIn(f"seed_class_weights.py:{self.update_line}", texts)
        self.graph("-o", png)
        with open(png, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        width, height = struct.unpack(">II", data[16:24])
        self.assertTrue(500 <= width <= 8000 and 300 <= height <= 8000, (width, height))

    def test_fixed_run_has_no_findings(self):
        trace = os.path.join(self.tmp.name, "fixed.db")
        subprocess.run([GRADTRACE, "record", "-o", trace, "--", SEED, "--fixed"],
                       capture_output=True, text=True, timeout=600, cwd=SOURCE, check=True)
        r = subprocess.run([GRADTRACE, "graph", trace, "-o", "-"], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        nodes, _ = Cgraph().read(r.stdout)
        self.assertFalse([k for k, v in nodes.items() if v["class"] == "gt-mutation"])
        self.assertFalse([k for k, v in nodes.items() if "gt-fail" in v["class"]])
        self.assertTrue(re.search(r"backward call 2 of fixed\.db", r.stdout), r.stdout[:600])


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=[sys.argv[0]])
