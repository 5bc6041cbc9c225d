"""Big models read well: a hand-written ResNet-18 and a 6-layer transformer,
each with an in-place bug (examples/resnet18_inplace.py,
examples/transformer_inplace.py), recorded and diagnosed.

Checks the module paths (stacks.module) in diagnose's text and JSON, the
transformer's six findings said once and drawn once as x6 with the blocks'
indices (DOT), the DOT's clusters in the order they were drawn, that a finding's node notes only the saved tensors the
finding is about (no batch norm running statistics, no weights), and that a
PNG's labels stay at least 11 px high (its scale) at the default size."""
import os
import re
import struct
import subprocess
import unittest

import gtutil

MIN_FONT_PX = 11


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head[:8]
    return struct.unpack(">II", head[16:24])


def graph(trace, out, *options):
    cp = subprocess.run([gtutil.GRADTRACE, "graph", trace, "-o", out, *options],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    return cp


class BigModels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = gtutil.tmpdir()
        cls.resnet, _ = gtutil.record(gtutil.example("resnet18_inplace.py"),
                                      expect_fail=True, options=("-q",))
        cls.transformer, _ = gtutil.record(gtutil.example("transformer_inplace.py"),
                                           expect_fail=True, options=("-q",))

    def test_resnet_block_named_in_text_and_json(self):
        _, doc, text = gtutil.diagnose_both(self.resnet)
        first = [f for f in doc["findings"] if f.get("first_to_fail")][0]
        self.assertEqual(first["node"]["name"], "ConvolutionBackward0")
        self.assertEqual(first["node"]["location"]["module"], "layer3.1")
        self.assertEqual(first["mutations"][0]["location"]["module"], "layer3.1")
        # the backward call's line runs in no module: no "module" there
        self.assertNotIn("module", first["backward"]["location"])
        self.assertIn("in layer3.1 (BasicBlock.forward)", text)
        self.assertNotIn("layer3.0 (", text)

    def test_transformer_said_once_for_six_blocks(self):
        _, doc, text = gtutil.diagnose_both(self.transformer)
        self.assertEqual(len(doc["findings"]), 1, text)
        f = doc["findings"][0]
        self.assertEqual(f["repeats"], 6)
        self.assertEqual(sorted(f["modules"]), ["blocks.%d.mlp" % i for i in range(6)])
        self.assertRegex(f["node"]["location"]["module"], r"^blocks\.[0-5]\.mlp$")
        self.assertIn("in modules  blocks.0\u20135.mlp", text)
        self.assertRegex(text, r"in blocks\.\d\.mlp \(MLP\.forward\)")

    def test_transformer_graph_draws_the_finding_once(self):
        dot = os.path.join(self.tmp, "transformer.dot")
        graph(self.transformer, dot)
        with open(dot) as f:
            text = f.read()
        self.assertEqual(text.count("gt-fail"), 1, text)
        self.assertEqual(text.count("gt-saved gt-invalidated"), 1, text)
        self.assertIn("\u00d76 in blocks.0\u20135.mlp", text)
        # labels carry the module that made each node
        self.assertRegex(text, r"AddmmBackward0\\nblocks\.\d\.mlp\.fc2\\n")

    def test_dot_clusters_in_drawing_order(self):
        # cgraph walks subgraphs by ID: with IDs counted, not taken from
        # the addresses of interned names, the clusters come out in the
        # order they were drawn (the legend last), whatever the allocator did
        for name, trace in (("resnet", self.resnet), ("transformer", self.transformer)):
            with self.subTest(name):
                dot = os.path.join(self.tmp, name + "_all.dot")
                graph(trace, dot, "--all")
                with open(dot) as f:
                    clusters = re.findall(r"subgraph (cluster_\w+)", f.read())
                self.assertGreater(len(clusters), 2, clusters)
                self.assertEqual(clusters[-1], "cluster_legend", clusters)

    def test_resnet_graph_notes_only_the_finding_tensors(self):
        dot = os.path.join(self.tmp, "resnet.dot")
        graph(self.resnet, dot)
        with open(dot) as f:
            text = f.read()
        notes = []
        for attrs in re.findall(r"\n\t(?:s\d+)\t\[(.*?)\];", text, re.S):
            if 'class="gt-saved' in attrs:
                notes.append(re.search(r'label="([^"]*)"', attrs).group(1))
        # the two findings' tensors: the output of layer3.1's first ReLU
        self.assertEqual(len(notes), 2, text)
        for label in notes:
            self.assertNotIn("running_", label)
            self.assertNotIn("weight (saved)", label)
        self.assertIn("layer3.1.conv2", text)
        # --all-saved draws the others
        dot_all = os.path.join(self.tmp, "resnet_all.dot")
        graph(self.resnet, dot_all, "--all-saved")
        with open(dot_all) as f:
            self.assertIn("running_var (saved)", f.read())

    def test_png_labels_legible(self):
        for name, trace in (("resnet", self.resnet), ("transformer", self.transformer)):
            with self.subTest(name):
                png = os.path.join(self.tmp, name + ".png")
                graph(trace, png)
                w, h = png_size(png)
                svg = os.path.join(self.tmp, name + ".svg")
                graph(trace, svg)
                with open(svg) as f:
                    s = f.read()
                m = re.search(r'transform="scale\(([\d.]+)', s)
                scale = float(m.group(1)) if m else 1.0
                sizes = [float(x) for x in re.findall(r'font-size="([\d.]+)"', s)]
                self.assertTrue(sizes)
                # the smallest text, in PNG pixels (96 dpi: 4/3 px a point)
                self.assertGreaterEqual(min(sizes) * scale * 4 / 3, MIN_FONT_PX - 0.01,
                                        (name, min(sizes), scale))
                # a screen's width (or just above it, at the legible scale)
                self.assertLessEqual(w, 2600, (name, w, h))
                self.assertGreater(w, 400, (name, w, h))


if __name__ == "__main__":
    unittest.main()
