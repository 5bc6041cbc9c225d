"""`gradtrace graph` counts findings as diagnose prints them: findings that
say the same thing (an RNN's weight saved by the node of every time step,
all changed by one write; diagnose: one finding, "repeated 4 times") are one
finding in graph's title and its "wrote ..." line, while every one of their
saved tensors is still highlighted. On tests/e2e/realbugs/rnn_hidden_retain_62.py.

Env: GRADTRACE, GT_SOURCE_DIR, PYTHONPATH (set by ctest).
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "realbugs",
                      "rnn_hidden_retain_62.py")


class MergedFindings(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace, _ = gtutil.record(SCRIPT, expect_fail=True)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", cls.trace],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, (r.returncode, r.stderr)
        cls.findings = json.loads(r.stdout)["findings"]
        cls.dot = os.path.join(gtutil.tmpdir(), "rnn_graph.dot")
        cls.graph = subprocess.run([gtutil.GRADTRACE, "graph", "-o", cls.dot, cls.trace],
                                   capture_output=True, text=True, timeout=300)
        assert cls.graph.returncode == 0, cls.graph.stderr
        with open(cls.dot, encoding="utf-8") as f:
            cls.text = f.read()

    def test_diagnose_merges(self):
        self.assertEqual(len(self.findings), 1, self.findings)
        self.assertEqual(self.findings[0]["repeats"], 4, self.findings[0])

    def test_graph_counts_the_merged_finding_once(self):
        self.assertRegex(self.graph.stdout, r"autograd nodes, 1 finding\n$")
        title = re.search(r'label="backward call .*?"', self.text, re.S).group(0)
        self.assertIn("1 finding", title.replace("\\\n", ""))
        self.assertNotIn("4 findings", title.replace("\\\n", ""))

    def test_graph_draws_the_repeats_once(self):
        # the finding said once is drawn once, its node saying how many
        self.assertEqual(self.text.count("gt-saved gt-invalidated"), 1, self.text)
        self.assertIn("\u00d7%d" % self.findings[0]["repeats"], self.text)


if __name__ == "__main__":
    unittest.main()
