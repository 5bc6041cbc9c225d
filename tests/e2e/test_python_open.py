"""gradtrace.open(path): reading traces from Python through the C inspector
(_gtinspect), with the same results as the command line."""
import json
import os
import subprocess
import unittest

import gtutil

import gradtrace

SEED = None


def cli(*args):
    return subprocess.run([gtutil.GRADTRACE, *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def setUpModule():
    global SEED
    SEED, _ = gtutil.record(gtutil.example("seed_class_weights.py"), expect_fail=True,
                            options=["-q"])


class Open(unittest.TestCase):
    def setUp(self):
        self.t = gradtrace.open(SEED)

    def test_diagnose_is_the_json_of_the_command(self):
        self.assertEqual(self.t.diagnose(), json.loads(cli("diagnose", "--json", SEED).stdout))
        self.assertEqual(self.t.diagnose(backward=1),
                         json.loads(cli("diagnose", "--json", "--backward", "1", SEED).stdout))
        self.assertEqual(self.t.diagnosis(),
                         cli("diagnose", "--color", "never", SEED).stdout)

    def test_history_and_info(self):
        self.assertEqual(self.t.history("class_weights"),
                         json.loads(cli("history", "--json", SEED, "class_weights").stdout))
        self.assertEqual(self.t.info(), json.loads(cli("info", "--json", SEED).stdout))

    def test_sql_rows_and_params(self):
        n = self.t.sql("SELECT count(*) FROM ops")[0][0]
        self.assertEqual(n, gtutil.one(gtutil.connect(SEED), "SELECT count(*) FROM ops"))
        rows = self.t.sql("SELECT seq, ? AS p FROM ops WHERE seq <= ? ORDER BY seq",
                          ("x", 3))
        self.assertTrue(rows and all(r[1] == "x" and r[0] <= 3 for r in rows), rows)
        by_name = self.t.sql("SELECT :a + :b", {"a": 2, "b": 0.5})
        self.assertEqual(by_name, [(2.5,)])
        self.assertEqual(self.t.sql("SELECT NULL, x'00ff', 'é'"), [(None, b"\x00\xff", "é")])
        # the views of SCHEMA.md, e.g. mutations
        self.assertTrue(self.t.sql("SELECT count(*) FROM mutations")[0][0] >= 6)
        self.assertEqual(self.t.columns("SELECT 1 AS one, 2 AS two"), ["one", "two"])

    def test_sql_dataframe(self):
        try:
            import pandas  # noqa: F401
        except ImportError:
            # tests/e2e/test_notebook.py covers it (its venv has pandas)
            self.skipTest("pandas not installed")
        df = self.t.sql("SELECT seq, op FROM op_log LIMIT 5", dataframe=True)
        self.assertEqual(list(df.columns), ["seq", "op"])
        self.assertEqual(len(df), 5)

    def test_sql_is_read_only(self):
        for q in ("DELETE FROM ops", "CREATE TABLE x (a)", "ATTACH 'x.db' AS x",
                  "PRAGMA user_version = 9", "SELECT 1; DELETE FROM ops"):
            with self.subTest(q):
                with self.assertRaises(ValueError):
                    self.t.sql(q)
        self.assertEqual(self.t.sql("SELECT count(*) FROM ops"),
                         [(gtutil.one(gtutil.connect(SEED), "SELECT count(*) FROM ops"),)])
        with self.assertRaises(ValueError):
            self.t.sql("SELECT ?")  # a parameter without a value
        with self.assertRaises(TypeError):
            self.t.sql("SELECT ?", (object(),))

    def test_graph_inline_and_saved(self):
        g = self.t.graph()
        svg = g._repr_svg_()
        self.assertIn("<svg", svg)
        self.assertIn("class_weights", svg)
        out = os.path.join(gtutil.tmpdir(), "g.png")
        self.assertEqual(g.save(out), out)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertIn("digraph gradtrace", self.t.graph(hops=1).dot())

    def test_graph_dot_same_bytes_in_one_process(self):
        # drawn again after other drawings (other allocations): the same DOT
        # as the command's
        first = self.t.graph(all=True).dot()
        self.t.graph(hops=1)._repr_svg_()
        self.assertEqual(self.t.graph(all=True).dot(), first)
        out = os.path.join(gtutil.tmpdir(), "cli.dot")
        self.assertEqual(cli("graph", "--all", SEED, "-o", out).returncode, 0)
        with open(out) as f:
            self.assertEqual(f.read(), first)

    def test_bad_files(self):
        bad = os.path.join(gtutil.tmpdir(), "not.db")
        with open(bad, "w") as f:
            f.write("hello")
        with self.assertRaises(gradtrace.TraceError) as cm:
            gradtrace.open(bad)
        self.assertIn("cannot open", str(cm.exception))
        with self.assertRaises(gradtrace.TraceError):
            gradtrace.open(os.path.join(gtutil.tmpdir(), "missing.db"))
        with self.assertRaises(gradtrace.TraceError) as cm:
            self.t.history("no_such_variable_anywhere")
        self.assertTrue(str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
