"""`gradtrace diagnose` with thousands of findings (tests/e2e/scenarios/
diag_many_findings.py: every saved exp() result changed through .data): each
one is reported, in text and JSON, with its write's line. The output is built
in one pass; a quadratic build took minutes here (the timeout below is only
a hang guard, not a measurement).

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
        self.assertEqual(len(fs), N)
        tensors = set()
        for f in fs:
            self.assertEqual(f["kind"], "silent_storage_write")
            self.assertEqual(f["node"]["name"], "ExpBackward0")
            self.assertEqual(len(f["mutations"]), 1)
            self.assertEqual(f["mutations"][0]["location"]["line"], marker("silent"))
            self.assertEqual(f["backward"]["location"]["line"], marker("backward"))
            tensors.add(f["saved"]["tensor"])
        self.assertEqual(len(tensors), N)

    def test_text(self):
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", self.trace],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(": %d findings" % N, r.stdout)
        self.assertEqual(r.stdout.count("[silent_storage_write]"), N)
        self.assertIn("[%d] " % N, r.stdout)


if __name__ == "__main__":
    unittest.main()
