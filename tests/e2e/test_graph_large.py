"""Graphs of real models stay readable: the default drawing of every model
of tests/e2e/examples (DCGAN, word_language_model, time_sequence_prediction,
mnist, vae), of a deep chain (962 nodes) and of a DCGAN-like network fits a
1920 x 1200 px screen as a viewer opens it (SVG: 1 pt = 4/3 px; PNG: its
pixels), says in its title what it left out and the option that shows it,
and always draws a finding's nodes (the red mutation, the failing node),
even far from the root of a long chain or in the middle of a model.
Graphviz never speaks as "(null): ...".

Before (default options): the chain 31676 x 32767 px (cairo's own
scaling, announced as "(null): graph is too large for cairo-renderer
bitmaps"), then 3181 x 1343; the DCGAN-like one 8251 x 2115, then 3423 x
1417; examples/dcgan.py 4493 x 1439, word_language_model (Transformer)
5873 x 1552. After: each at most 1920 x 1200 (the figures are in the
commit that made it so).
"""
import os
import re
import struct
import subprocess
import unittest
import xml.etree.ElementTree as ET

import gtutil

SCREEN_W, SCREEN_H = 1920, 1200
SVG = "{http://www.w3.org/2000/svg}"
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")
SCENARIOS = {
    "graph_chain": ("graph_chain.py",),
    "graph_wide": ("graph_wide.py",),
    "graph_transformer": ("graph_transformer.py",),
}
MODELS = {
    "dcgan": ("dcgan.py",),
    "word_language_model_gru": ("word_language_model.py", "--model", "GRU"),
    "word_language_model_transformer": ("word_language_model.py", "--model",
                                        "Transformer", "--batches", "2"),
    "time_sequence_prediction": ("time_sequence_prediction.py", "--steps", "1",
                                 "--max-iter", "3"),
    "mnist": ("mnist.py",),
    "vae": ("vae.py",),
}
# models with repeated structure: nodes at least hidden in repeats drawn once
MIN_FOLDED = {
    "time_sequence_prediction": 1000,  # 1184 of 1260: 32 nodes x38
    "graph_transformer": 400,          # 524 of 632: 52 nodes x11 (+ 2 x3)
    "word_language_model_gru": 60,     # 84 of 174: two 14-node blocks x4
    "graph_chain": 900,                # 954 of 962: 3 nodes x319
}
# (scenario, arguments): in-place mistakes whose backward raises
BUGS = {
    "chain_bug": ("graph_chain.py", "--bug"),
    "dcgan_bug": ("graph_dcgan_bug.py",),
}
TRACES = {}


def gradtrace(*args):
    return subprocess.run([gtutil.GRADTRACE, *map(str, args)], capture_output=True,
                          text=True, timeout=600)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    return struct.unpack(">II", head[16:24])


MIN_SCALE = 0.85  # graph.h: the smallest label, 10 pt, stays >= 11 px


def svg_scale(path):
    """The scale Graphviz drew the layout at (the graph group's transform)."""
    with open(path) as f:
        m = re.search(r'transform="scale\(([\d.]+)', f.read())
    return float(m.group(1)) if m else 1.0


def svg_size(path):
    """The size a viewer opens the SVG at, in px (1 pt = 4/3 px)."""
    root = ET.parse(path).getroot()
    w, h = root.get("width"), root.get("height")
    assert w.endswith("pt") and h.endswith("pt"), (w, h)
    return float(w[:-2]) * 4 / 3, float(h[:-2]) * 4 / 3


def svg_classes(path):
    """{node name: classes} of the SVG's nodes."""
    root = ET.parse(path).getroot()
    out = {}
    for g in root.iter(SVG + "g"):
        classes = g.get("class", "").split()
        if "node" in classes:
            out[g.find(SVG + "title").text] = classes
    return out


def setUpModule():
    cwd = gtutil.tmpdir()
    for name, (script, *args) in SCENARIOS.items():
        TRACES[name], _ = gtutil.record(gtutil.scenario(script), *args, options=["-q"])
    for name, (script, *args) in MODELS.items():
        TRACES[name], _ = gtutil.record(os.path.join(EXAMPLES, script), *args,
                                        options=["-q"], cwd=cwd)
    for name, (script, *args) in BUGS.items():
        TRACES[name], _ = gtutil.record(gtutil.scenario(script), *args, options=["-q"],
                                        expect_fail=True)


class Large(unittest.TestCase):
    def render(self, name, fmt, *opts):
        out = os.path.join(gtutil.tmpdir(), "%s%s.%s" % (name, "".join(opts), fmt))
        cp = gradtrace("graph", TRACES[name], "-o", out, *opts)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        return out, cp

    def check_fits(self, name):
        svg, cp = self.render(name, "svg")
        self.assertEqual(cp.stderr, "")
        w, h = svg_size(svg)
        # a screen's size, unless that would scale the smallest label
        # (10 pt = 13.3 px) below 11 px: then larger, at that scale
        scale = svg_scale(svg)
        self.assertGreaterEqual(scale * 10 * 4 / 3, 11 - 0.01, (name, scale))
        if scale > MIN_SCALE + 0.01:
            self.assertLessEqual(w, SCREEN_W + 1, (name, w, h))
            self.assertLessEqual(h, SCREEN_H + 1, (name, w, h))
        png, cp = self.render(name, "png")
        self.assertEqual(cp.stderr, "")
        pw, ph = png_size(png)
        self.assertLessEqual(abs(pw - w), 3, (name, w, pw))
        self.assertLessEqual(abs(ph - h), 3, (name, h, ph))
        # What was left out is said, with the option that shows it.
        m = re.search(r"(\d+) of (\d+) autograd nodes", cp.stdout)
        self.assertTrue(m, cp.stdout)
        texts = " ".join(t.text or "" for t in
                         ET.parse(svg).getroot().iter(SVG + "text")).replace("\xa0", " ")
        drawn, total = int(m.group(1)), int(m.group(2))
        if drawn < total:
            self.assertIn("%d nodes hidden (--all" % (total - drawn), texts)
            m = re.search(r"(\d+) in repeats of .*drawn once \(([^)]*)\)", texts)
            folded = int(m.group(1)) if m else 0
            m = re.search(r"(\d+) beyond the focus", texts)
            beyond = int(m.group(1)) if m else 0
            if folded:
                # every hidden node is accounted for
                self.assertEqual(drawn + folded + beyond, total, texts)
        return svg, texts

    def test_models_fit_a_screen(self):
        for name in [*MODELS, *SCENARIOS]:
            with self.subTest(name):
                self.check_fits(name)

    def test_findings_always_drawn(self):
        for name in BUGS:
            with self.subTest(name):
                svg, texts = self.check_fits(name)
                classes = svg_classes(svg)
                self.assertTrue([k for k, c in classes.items() if "gt-mutation" in c],
                                (name, classes))
                self.assertEqual(len([k for k, c in classes.items() if "gt-fail" in c]),
                                 1, (name, classes))
                self.assertTrue([k for k, c in classes.items() if "gt-invalidated" in c])
                self.assertIn("backward fails here", texts)

    def test_saved_tensors_folded_and_shown(self):
        """A model's drawing lists saved tensors in their nodes and says so;
        --saved draws each as a note."""
        _, texts = self.check_fits("dcgan")
        self.assertRegex(texts, r"\d+ saved tensors listed in their nodes \(--saved")
        self.assertIn("saves input, weight", texts)
        dot, _ = self.render("dcgan", "dot", "--saved")
        with open(dot) as f:
            self.assertIn("gt-saved", f.read())

    def test_model_calls_grouped(self):
        """The nodes one line created (nn.Sequential's call) share a cluster
        labelled once with that line; a Python loop's lines, which would
        interleave, are not grouped."""
        dot, _ = self.render("dcgan", "dot")
        with open(dot) as f:
            text = f.read()
        self.assertIn("subgraph cluster_line", text)
        self.assertIn("output = self.main(input)", text)
        dot, _ = self.render("dcgan_bug", "dot", "--hops", "6")
        with open(dot) as f:
            self.assertNotIn("cluster_line", f.read())

    def test_chain_says_what_is_left_out(self):
        """The chain's 320 rounds of tanh, mul, add are drawn once, "×319"
        (the first round differs: its input is a leaf), the repeats feeding
        each other a dashed edge back; the title counts what was hidden.
        With --hops, the nodes themselves, the chain wrapped into columns."""
        dot, cp = self.render("graph_chain", "dot")
        self.assertIn("8 of 962 autograd nodes", cp.stdout)
        with open(dot) as f:
            text = f.read().replace("\\\n", "")  # cgraph's line continuations
        self.assertIn("8 of 962 autograd nodes", text)
        self.assertIn("954 nodes hidden (--all draws them): 954 in repeats of a block "
                      "drawn once (\u00d7319)", text)
        self.assertIn("subgraph cluster_repeat1", text)
        self.assertIn("\u00d7319", text)
        self.assertIn("gt-recur", text)
        dot, cp = self.render("graph_chain", "dot", "--hops", "100")
        with open(dot) as f:
            text = f.read().replace("\\\n", "")
        self.assertIn("101 of 962 autograd nodes", text)
        self.assertIn("861 nodes hidden (--all or a larger --hops", text)
        self.assertIn("gt-more", text)
        self.assertNotIn("cluster_repeat", text)
        # wrapped: the chain is cut into columns, each kept straight
        self.assertIn("constraint=false", text)
        self.assertIn("group=column1", text)

    def test_repeats_drawn_once(self):
        """An RNN unrolled over time steps (time_sequence_prediction's
        LSTMCell loop, word_language_model's GRU), a 12-layer
        TransformerEncoder: each repeated block is drawn once in a cluster
        labelled "×N", the title says how many nodes the repeats hid, and
        --all still draws every node. Figures (nodes drawn of total, hidden
        in repeats): before, 40 of each with no repeat shown; after, see
        MIN_FOLDED."""
        for name, min_folded in MIN_FOLDED.items():
            with self.subTest(name):
                svg, texts = self.check_fits(name)
                m = re.search(r"(\d+) in repeats of .*drawn once \(\u00d7(\d+)", texts)
                self.assertTrue(m, texts)
                self.assertGreaterEqual(int(m.group(1)), min_folded, texts)
                self.assertGreaterEqual(int(m.group(2)), 2, texts)
                root = ET.parse(svg).getroot()
                clusters = [g for g in root.iter(SVG + "g")
                            if "gt-repeat" in g.get("class", "").split()]
                self.assertTrue(clusters, name)
                label = " ".join(t.text or "" for t in clusters[0].iter(SVG + "text"))
                self.assertRegex(label, r"\u00d7\d+")
                dot, cp = self.render(name, "dot", "--all")
                with open(dot) as f:
                    text = f.read()
                self.assertNotIn("cluster_repeat", text)
                self.assertNotIn("in repeats", text)
                m = re.search(r"(\d+) of (\d+) autograd nodes", cp.stdout)
                self.assertEqual(m.group(1), m.group(2), cp.stdout)

    def test_repeats_keep_findings(self):
        """The in-place mistake in the middle of the chain: its round is
        drawn as itself, the rounds on either side folded apart."""
        dot, cp = self.render("chain_bug", "dot")
        with open(dot) as f:
            text = f.read().replace("\\\n", "")
        self.assertIn("in repeats of blocks drawn once", text)
        self.assertIn("gt-fail", text)
        self.assertIn("gt-mutation", text)
        # the failing node is outside every repeat cluster
        fail = re.search(r"(n\d+)\s*\[[^\]]*gt-fail", text).group(1)
        blocks = re.findall(r"subgraph cluster_repeat\d+ \{(.*?)\n\t\}", text, re.S)
        self.assertTrue(blocks, text)
        for block in blocks:
            self.assertRegex(block, r"\bn\d+\b")
            self.assertNotRegex(block, r"\b%s\b" % fail)

    def test_wide_ring_drawn_in_part(self):
        """time_sequence_prediction's loss reads a Cat of 39 time steps, which
        feed ~1200 nodes: a ring wider than the screen budget is drawn in
        part (three neighbours a node) rather than stopping the drawing at
        the root and the Cat (2 of 1260 nodes before), and says so."""
        svg, texts = self.check_fits("time_sequence_prediction")
        m = re.search(r"(\d+) of (\d+) autograd nodes", texts)
        self.assertGreaterEqual(int(m.group(1)), 30, texts)
        self.assertRegex(texts, r"then 3 of each node.s neighbours \d+ hops? further")
        classes = svg_classes(svg)
        nodes = [k for k, c in classes.items() if "gt-node" in c]
        self.assertGreaterEqual(len(nodes), 30)
        # the Cat's other inputs are marked, not silently dropped
        self.assertRegex(texts, r"\d+ more inputs")

    def test_wide_model_staggers_leaves(self):
        dot, _ = self.render("graph_wide", "dot")
        with open(dot) as f:
            self.assertIn("minlen=3", f.read())  # leaves staggered over three rows

    def test_explicit_hops_is_obeyed(self):
        _, cp = self.render("graph_chain", "dot", "--hops", "100")
        self.assertIn("101 of 962 autograd nodes", cp.stdout)

    def test_graphviz_messages_are_gradtraces(self):
        """--all on 962 nodes is larger than cairo's bitmaps: Graphviz says
        so, under gradtrace's name, never as "(null): ..."."""
        png, cp = self.render("graph_chain", "png", "--all")
        self.assertNotIn("(null)", cp.stderr)
        for line in cp.stderr.splitlines():
            self.assertTrue(line.startswith("gradtrace: graph: graphviz: "), line)


if __name__ == "__main__":
    unittest.main(verbosity=2)
