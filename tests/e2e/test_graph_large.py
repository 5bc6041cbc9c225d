"""Graphs of real models stay readable: the default drawing of a deep chain
(962 nodes) and of a DCGAN-like network (48 nodes, a parameter leaf beside
each layer) fits a screen's budget of nodes, wraps long chains into
columns, staggers rows of leaves, says in its title what it left out, and
Graphviz never speaks as "(null): ...".

Before: the chain rendered as a 31676 x 32767 px PNG (after cairo's own
scaling, announced as "(null): graph is too large for cairo-renderer
bitmaps"), the DCGAN-like one 8251 x 2115 px.
"""
import os
import struct
import subprocess
import unittest

import gtutil

TRACES = {}


def gradtrace(*args):
    return subprocess.run([gtutil.GRADTRACE, *map(str, args)], capture_output=True,
                          text=True, timeout=600)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    return struct.unpack(">II", head[16:24])


def setUpModule():
    for name in ("graph_chain", "graph_wide"):
        TRACES[name], _ = gtutil.record(gtutil.scenario(name + ".py"), options=["-q"])


class Large(unittest.TestCase):
    def render(self, name, fmt, *opts):
        out = os.path.join(gtutil.tmpdir(), "%s%s.%s" % (name, "".join(opts), fmt))
        cp = gradtrace("graph", TRACES[name], "-o", out, *opts)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        return out, cp

    def test_chain_fits_and_says_what_is_left_out(self):
        png, cp = self.render("graph_chain", "png")
        self.assertEqual(cp.stderr, "")
        self.assertIn("40 of 962 autograd nodes", cp.stdout)
        w, h = png_size(png)
        self.assertLessEqual(h, 2000, (w, h))
        self.assertLessEqual(w, 4000, (w, h))
        dot, _ = self.render("graph_chain", "dot")
        with open(dot) as f:
            text = f.read()
        # the title says what was drawn, the boundary what was hidden
        self.assertIn("40 of 962 autograd nodes", text)
        self.assertIn("gt-more", text)
        # wrapped: the chain is cut into columns, each kept straight
        self.assertIn("constraint=false", text)
        self.assertIn("group=column1", text)

    def test_wide_model_fits(self):
        png, cp = self.render("graph_wide", "png")
        self.assertEqual(cp.stderr, "")
        w, h = png_size(png)
        self.assertLessEqual(w, 4000, (w, h))
        self.assertLessEqual(h, 2000, (w, h))
        dot, _ = self.render("graph_wide", "dot")
        with open(dot) as f:
            text = f.read()
        self.assertIn("minlen=3", text)  # leaves staggered over three rows

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
