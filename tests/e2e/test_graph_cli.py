"""End-to-end tests of `gradtrace graph` on traces written straight from the
schema (schema/*.sql) with Python's sqlite3: awkward text in every label
(quotes, backslashes, <, >, &, newlines, long lines, Chinese file and
variable names) must come out of the SVG as the user wrote it; the SVG must
be well-formed XML, the PNG a PNG; the options and their errors.

Env: GRADTRACE (the built command), GT_SOURCE_DIR (for the schema).
"""
import os
import sqlite3
import struct
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

GRADTRACE = os.environ.get("GRADTRACE", "gradtrace")
SOURCE = os.environ.get(
    "GT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SVG = "{http://www.w3.org/2000/svg}"

AWKWARD_FILE = '/tmp/项目 "q"/训练<&>.py'
AWKWARD_CODE = "s = \"a\\\\b\" + '<tag>' & x  # \\n is not a newline"
AWKWARD_NAME = '权重"<&>\\'
LONG_CODE = "long = " + "x" * 200


class Trace:
    """A trace written row by row, the way the recorder lays it out."""

    def __init__(self, path):
        self.db = sqlite3.connect(path)
        for name in ("gradtrace.sql", "indexes.sql", "views.sql"):
            with open(os.path.join(SOURCE, "schema", name), encoding="utf-8") as f:
                self.db.executescript(f.read())
        self.db.execute("PRAGMA user_version = 1")
        self.db.execute(
            "INSERT INTO run (id, gradtrace_version, schema_version, start_ns, status)"
            " VALUES (1, '0.1.0', 1, 0, 'exception')")
        self.db.execute("INSERT INTO threads VALUES (1, 1, 'main')")
        self.seq = 0
        self.strings = {}

    def next_seq(self):
        self.seq += 1
        return self.seq

    def s(self, text):
        if text not in self.strings:
            cur = self.db.execute("INSERT INTO strings (text) VALUES (?)", (text,))
            self.strings[text] = cur.lastrowid
        return self.strings[text]

    def stack(self, file, line, code):
        cur = self.db.execute(
            "INSERT INTO frames (file, line, function, code) VALUES (?, ?, ?, ?)",
            (self.s(file), line, self.s("<module>"), self.s(code)))
        frame = cur.lastrowid
        cur = self.db.execute(
            "INSERT INTO stacks (parent, frame, user_frame) VALUES (NULL, ?, ?)",
            (frame, frame))
        return cur.lastrowid

    def op(self, name, stack):
        seq = self.next_seq()
        self.db.execute("INSERT INTO ops VALUES (?, ?, 0, 1, 1, ?)",
                        (seq, self.s(name), stack))
        return seq

    def tensor(self, tid, shape, leaf=0):
        self.db.execute(
            "INSERT INTO tensors (id, seq, dtype, shape, strides, storage_offset,"
            " requires_grad, is_leaf, version_counter) VALUES (?, ?, ?, ?, ?, 0, 1, ?, ?)",
            (tid, self.next_seq(), self.s("float32"), shape, shape, leaf, tid))

    def name(self, tensor, name):
        self.db.execute("INSERT INTO names VALUES (?, ?, ?)",
                        (self.next_seq(), tensor, self.s(name)))

    def node(self, nid, name, op=None, variable=None):
        self.db.execute("INSERT INTO nodes VALUES (?, ?, ?, ?, NULL, 1, ?)",
                        (nid, self.next_seq(), self.s(name), op, variable))

    def edge(self, node, pos, nxt):
        self.db.execute("INSERT INTO edges VALUES (?, ?, ?, 0)", (node, pos, nxt))

    def saved(self, node, slot, tensor, version):
        seq = self.next_seq()
        self.db.execute("INSERT INTO saved_tensors VALUES (?, ?, ?, ?, ?, 0, 8)",
                        (seq, node, self.s(slot), tensor, version))
        return seq

    def mutate(self, op, tensor, version):
        self.db.execute("INSERT INTO op_args VALUES (?, 2, 0, ?, ?)",
                        (op, tensor, version - 1))
        self.db.execute("INSERT INTO version_bumps VALUES (?, ?, ?, ?, 0)",
                        (self.next_seq(), op, tensor, version))

    def backward(self, root_tensor, root_node, ok):
        bid = (self.db.execute("SELECT count(*) FROM backward_calls").fetchone()[0]) + 1
        self.db.execute(
            "INSERT INTO backward_calls (id, seq, end_seq, api, retain_graph,"
            " create_graph, thread, status) VALUES (?, ?, ?, ?, 0, 0, 1, ?)",
            (bid, self.next_seq(), self.seq + 1, self.s("Tensor.backward"),
             "ok" if ok else "error"))
        self.next_seq()
        self.db.execute("INSERT INTO backward_roots VALUES (?, 0, ?, ?)",
                        (bid, root_tensor, root_node))
        return bid

    def close(self):
        self.db.commit()
        self.db.close()


def awkward_trace(path):
    """x (named AWKWARD_NAME) saved by MulBackward0 at version 0, then
    changed in place by a 200-character line: diagnose finds it."""
    t = Trace(path)
    st = t.stack(AWKWARD_FILE, 3, AWKWARD_CODE)
    st_long = t.stack(AWKWARD_FILE, 4, LONG_CODE)
    st_nl = t.stack(AWKWARD_FILE, 5, "first\nsecond")
    t.tensor(1, "[2]", leaf=1)
    t.name(1, AWKWARD_NAME)
    mul = t.op("aten::mul", st)
    t.node(1, "AccumulateGrad", variable=1)
    t.node(2, "MulBackward0", op=mul)
    t.edge(2, 0, 1)
    t.saved(2, "self", 1, 0)
    sm = t.op("aten::sum", st_nl)
    t.node(3, "SumBackward0", op=sm)
    t.edge(3, 0, 2)
    t.tensor(9, "[]")
    add = t.op("aten::add_.Tensor", st_long)
    t.mutate(add, 1, 1)
    t.backward(9, 3, ok=False)
    t.close()


def chain_trace(path, n=60):
    """SinBackward0 nodes 1 <- 2 <- ... <- n, no findings, two backward calls."""
    t = Trace(path)
    st = t.stack("/home/u/chain.py", 7, "y = y.sin()")
    for i in range(1, n + 1):
        t.node(i, "SinBackward0", op=t.op("aten::sin", st))
        if i > 1:
            t.edge(i, 0, i - 1)
    t.tensor(99, "[]")
    t.backward(99, n, ok=True)
    t.backward(99, n, ok=True)
    t.close()


def run(*args):
    return subprocess.run([GRADTRACE, "graph", *args], capture_output=True, text=True,
                          timeout=120)


def svg_nodes(path):
    """{node name: (class, [text lines])} from an SVG written by gvc."""
    root = ET.parse(path).getroot()
    out = {}
    for g in root.iter(SVG + "g"):
        classes = g.get("class", "").split()
        if "node" not in classes:
            continue
        title = g.find(SVG + "title").text
        lines = [(t.text or "").replace("\xa0", " ") for t in g.iter(SVG + "text")]
        out[title] = (classes, lines)
    return root, out


class GraphCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gt_e2e_graph_")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_awkward_svg_round_trip(self):
        trace = self.path('awkward "训练".db')
        awkward_trace(trace)
        out = self.path("图 <1> & 'x'.svg")
        r = run(trace, "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        self.assertIn("backward call 1, 3 of 3 autograd nodes, 1 finding", r.stdout)
        root, nodes = svg_nodes(out)  # ET.parse raises on malformed XML

        classes, lines = nodes["n2"]
        self.assertEqual(lines[:3], ["MulBackward0", "训练<&>.py:3", AWKWARD_CODE])
        self.assertIn("gt-fail", classes)
        self.assertIn("backward fails here", lines)
        # The tooltip keeps the whole path.
        link = [a for a in root.iter(SVG + "a")
                if a.get("{http://www.w3.org/1999/xlink}title", "").endswith(".py:3")]
        self.assertEqual(link[0].get("{http://www.w3.org/1999/xlink}title"),
                         AWKWARD_FILE + ":3")
        # A newline in the source stays a line break.
        self.assertEqual(nodes["n3"][1][:4], ["SumBackward0", "训练<&>.py:5", "first",
                                              "second"])
        # The leaf's variable name, with quotes, <&> and a backslash.
        self.assertEqual(nodes["n1"][1], ["AccumulateGrad", "float32 [2]", AWKWARD_NAME])

        saved = [v for v in nodes.values() if "gt-saved" in v[0]]
        self.assertEqual(len(saved), 1)
        self.assertEqual(saved[0][1], ["self (saved)", "float32 [2]", AWKWARD_NAME,
                                       "saved at version 0",
                                       "version 1 when backward ran"])
        self.assertIn("gt-invalidated", saved[0][0])

        muts = [v for v in nodes.values() if "gt-mutation" in v[0]]
        self.assertEqual(len(muts), 1)
        lines = muts[0][1]
        self.assertEqual(lines[0], "aten::add_.Tensor")
        self.assertEqual(lines[1], "训练<&>.py:4")
        self.assertEqual(len(lines[2]), 60)
        self.assertEqual(lines[2], LONG_CODE[:59] + "…")
        self.assertEqual(lines[3], "→ version 1")

        title = "".join(t.text for t in root.find(SVG + "g").findall(SVG + "text"))
        self.assertIn('backward call 1 of awkward "训练".db', title)

    def test_png(self):
        trace = self.path("awkward.db")
        awkward_trace(trace)
        out = self.path("训练.png")
        r = run(trace, "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        self.assertEqual(data[12:16], b"IHDR")
        width, height = struct.unpack(">II", data[16:24])
        self.assertTrue(200 <= width <= 10000, width)
        self.assertTrue(200 <= height <= 10000, height)

    def test_dot_to_stdout(self):
        trace = self.path("awkward.db")
        awkward_trace(trace)
        r = run(trace, "-o", "-")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("digraph gradtrace {"), r.stdout[:80])
        # cgraph quoted the quotes; the backslashes are doubled.
        self.assertIn('s = \\"a\\\\\\\\b\\" + \'<tag>\' &amp; x', r.stdout)
        self.assertIn("n1 -> n2", r.stdout)
        self.assertIn("n2 -> n3", r.stdout)

    def test_focus_and_all(self):
        trace = self.path("chain.db")
        chain_trace(trace, 60)
        out = self.path("c.svg")
        # No findings, more than a screen's worth (40), and all made by one
        # line: the repeated node drawn once (x58: n2..n59 and n1, an input
        # only they use), beside the root; --hops 39: the 40 nearest the root
        # of the last call; --all: the whole of it.
        r = run(trace, "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("backward call 2, 2 of 60 autograd nodes, 0 findings", r.stdout)
        root, nodes = svg_nodes(out)
        self.assertEqual(sorted(k for k in nodes if k.startswith("n")), ["n59", "n60"])
        texts = " ".join(t.text or "" for t in root.iter(SVG + "text"))
        texts = texts.replace("\xa0", " ")
        self.assertIn("58 nodes hidden (--all draws them): 58 in repeats", texts)
        self.assertIn("\u00d758", texts)
        r = run(trace, "-o", out, "--hops", "39")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("backward call 2, 40 of 60 autograd nodes, 0 findings", r.stdout)
        _, nodes = svg_nodes(out)
        self.assertEqual(sum(1 for k in nodes if k.startswith("n")), 40)
        r = run(trace, "-o", out, "--all")
        self.assertIn("backward call 2, 60 of 60 autograd nodes, 0 findings", r.stdout)
        _, nodes = svg_nodes(out)
        self.assertEqual(sum(1 for k in nodes if k.startswith("n")), 60)
        r = run(trace, "-o", out, "--backward", "1", "--no-legend")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("backward call 1,", r.stdout)
        _, nodes = svg_nodes(out)
        self.assertFalse([k for k in nodes if k.startswith("legend_")])
        r = run(trace, "-o", self.path("c.dot"), "--all")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("c.dot"), encoding="utf-8") as f:
            dot = f.read()
        self.assertIn("n59 -> n60", dot)

    def test_format_option_overrides_extension(self):
        trace = self.path("chain.db")
        chain_trace(trace, 3)
        out = self.path("graph.txt")
        r = run(trace, "-o", out, "--format", "svg")
        self.assertEqual(r.returncode, 0, r.stderr)
        ET.parse(out)

    def test_errors(self):
        trace = self.path("chain.db")
        chain_trace(trace, 3)
        cases = [
            ((), "gradtrace: graph: missing TRACE"),
            ((trace,), "gradtrace: graph: missing -o FILE"),
            ((trace, "-o", self.path("x.jpg")), "cannot tell the format of"),
            ((trace, "-o", self.path("x.svg"), "--format", "gif"), "unknown format 'gif'"),
            ((trace, "-o", self.path("x.svg"), "--hops", "two"), "--hops wants a number"),
            ((trace, "-o", self.path("x.svg"), "--backward", "0"),
             "--backward wants a positive number"),
            ((trace, "-o", self.path("x.svg"), "--backward", "5"), "5"),
            ((trace, "-o", self.path("x.svg"), "--frobnicate"), "unknown option"),
            ((self.path("missing.db"), "-o", self.path("x.svg")), "cannot open"),
            ((trace, "-o", self.path("no/such/dir/x.svg")), "cannot write"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)
                self.assertTrue(r.stderr.startswith("gradtrace: "), r.stderr)
                self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertFalse(os.path.exists(self.path("x.svg")))
        self.assertFalse(os.path.exists(self.path("x.jpg")))

    def test_draws_what_diagnose_cannot_read(self):
        trace = self.path("damaged.db")
        chain_trace(trace, 5)
        db = sqlite3.connect(trace)
        db.execute("DROP TABLE version_bumps")
        db.commit()
        db.close()
        out = self.path("d.svg")
        r = run(trace, "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stderr.startswith(
            "gradtrace: graph: cannot diagnose, drawing without findings: "), r.stderr)
        self.assertIn("version_bumps", r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        _, nodes = svg_nodes(out)
        self.assertEqual(sorted(k for k in nodes if k.startswith("n")),
                         ["n1", "n2", "n3", "n4", "n5"])

    def test_missing_graphviz_plugins(self):
        # GVBINDIR points Graphviz at a directory without plugins.
        trace = self.path("chain.db")
        chain_trace(trace, 3)
        env = dict(os.environ, GVBINDIR=self.path("no-plugins"))
        os.mkdir(env["GVBINDIR"])
        for ext in ("svg", "png"):
            r = subprocess.run([GRADTRACE, "graph", trace, "-o", self.path("g." + ext)],
                               capture_output=True, text=True, timeout=120, env=env)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"cannot render {ext}: graphviz has no dot layout plugin here: "
                          "install the debian package libgvc6", r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
            self.assertFalse(os.path.exists(self.path("g." + ext)))
        # DOT needs no plugin.
        r = subprocess.run([GRADTRACE, "graph", trace, "-o", self.path("g.dot")],
                           capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_help(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage: gradtrace graph TRACE -o FILE", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=[sys.argv[0]])
