"""`gradtrace diagnose` with thousands of findings (tests/e2e/scenarios/
diag_many_findings.py: every saved exp() result changed through .data): each
one is counted, in text and JSON, with its write's line; those that say the
same thing (all but the one still named y: the same line saved them, the
same line wrote them) are one finding repeated, with every node. The output
is built in one pass; a quadratic build took minutes here (the timeout below
is only a hang guard, not a measurement).

Env: GRADTRACE (the built command), GT_SOURCE_DIR, GT_BUILD_DIR.
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("diag_many_findings.py")
N = 2000


def marker(tag):
    with open(SCRIPT) as f:
        return [i + 1 for i, l in enumerate(f) if l.rstrip().endswith("# @" + tag)][0]


class ManyFindings(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace, _ = gtutil.record(SCRIPT, N)

    def test_json(self):
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", self.trace],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 1, r.stderr)
        fs = json.loads(r.stdout)["findings"]
        self.assertEqual(sorted(f.get("repeats", 1) for f in fs), [1, N - 1])
        nodes = set()
        for f in fs:
            self.assertEqual(f["kind"], "silent_storage_write")
            self.assertEqual(f["node"]["name"], "ExpBackward0")
            self.assertEqual(len(f["mutations"]), 1)
            self.assertEqual(f["mutations"][0]["location"]["line"], marker("silent"))
            self.assertEqual(f["backward"]["location"]["line"], marker("backward"))
            nodes.update(f.get("nodes") or [f["node"]["id"]])
        self.assertEqual(len(nodes), N)

    def test_text(self):
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", self.trace],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(": 2 findings", r.stdout)
        self.assertEqual(r.stdout.count("[silent_storage_write]"), 2)
        self.assertIn("repeated    %d times: %d ExpBackward0 nodes" % (N - 1, N - 1), r.stdout)


if __name__ == "__main__":
    unittest.main()
