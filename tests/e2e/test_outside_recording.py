"""A saved tensor made before recording started and changed while recording
gets the "outside the recording" note and an unexplained finding marked
outside_recording, in text and JSON, read by the command and by
gradtrace.open(); under the pytest plugin a forward in a fixture gets the
note in the failure's report, and --gradtrace-fixtures records the fixture
so that the write is found.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import subprocess
import sys
import textwrap
import unittest

import gtutil

SCRIPT = gtutil.scenario("diag_outside_saved.py")
NOTE = "ran 1 node whose forward ran before recording started (the first: SigmoidBackward0)"


def line_of(tag):
    with open(SCRIPT) as f:
        return [i + 1 for i, l in enumerate(f) if l.rstrip().endswith("# @" + tag)][0]


class Api(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace = os.path.join(gtutil.tmpdir(), "outside.db")
        cls.cp = subprocess.run([gtutil.PYTHON, SCRIPT, cls.trace], capture_output=True,
                                text=True, timeout=300)

    def test_run_fails_with_the_note(self):
        self.assertEqual(self.cp.returncode, 1, self.cp.stderr)
        # the diagnosis printed after the failed `with` block
        self.assertIn("note: backward #1 at %s:%d %s" % (SCRIPT, line_of("backward"), NOTE),
                      self.cp.stderr)

    def test_command_text(self):
        cp = subprocess.run([gtutil.GRADTRACE, "diagnose", "--color", "never", self.trace],
                            capture_output=True, text=True, timeout=300)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        self.assertIn(NOTE, cp.stdout)
        self.assertIn("outside the recording  [unexplained]", cp.stdout)
        self.assertIn("%s:%d" % (SCRIPT, line_of("changed")), cp.stdout)

    def check_json(self, d):
        self.assertEqual([(o["backward"], o["nodes"], o["first"], o["location"]["line"])
                          for o in d["outside_recording"]],
                         [(1, 1, "SigmoidBackward0", line_of("backward"))])
        self.assertEqual([(f["kind"], f["outside_recording"]) for f in d["findings"]],
                         [("unexplained", True)])

    def test_command_json(self):
        cp = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", self.trace],
                            capture_output=True, text=True, timeout=300)
        self.check_json(json.loads(cp.stdout))

    def test_python_open(self):
        cp = subprocess.run([gtutil.PYTHON, "-c", "import json, sys, gradtrace\n"
                             "print(json.dumps(gradtrace.open(sys.argv[1]).diagnose()))",
                             self.trace], capture_output=True, text=True, timeout=300)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.check_json(json.loads(cp.stdout))


TESTS = '''
import pytest
import torch

@pytest.fixture
def h():
    x = torch.ones(4, requires_grad=True)
    return torch.sigmoid(x)  # the forward, in the fixture

def test_changes_saved(h):
    h.mul_(2)
    h.sum().backward()
'''


HAS_PYTEST = subprocess.run([gtutil.PYTHON, "-c", "import pytest"],
                            capture_output=True).returncode == 0


@unittest.skipUnless(HAS_PYTEST, "pytest is not installed for %s" % gtutil.PYTHON)
class Pytest(unittest.TestCase):
    def run_pytest(self, *options):
        d = os.path.join(gtutil.tmpdir(), "pt%d" % len(options))
        os.makedirs(d)
        with open(os.path.join(d, "test_fix.py"), "w") as f:
            f.write(TESTS)
        cp = subprocess.run([gtutil.PYTHON, "-m", "pytest", "-p", "gradtrace.pytest_plugin",
                             "-p", "no:cacheprovider", "--gradtrace", *options, "test_fix.py"],
                            cwd=d, capture_output=True, text=True, timeout=300)
        self.assertEqual(cp.returncode, 1, cp.stdout + cp.stderr)
        return cp.stdout

    def test_fixture_outside_the_recording(self):
        out = self.run_pytest()
        self.assertIn(NOTE, out)
        self.assertIn("outside the recording  [unexplained]", out)
        # no gradtrace frame in the test's traceback
        self.assertNotIn("_mode.py", out)
        self.assertNotIn("gradtrace/pytest_plugin.py", out)

    def test_fixture_recorded(self):
        out = self.run_pytest("--gradtrace-fixtures")
        self.assertNotIn("before recording started", out)
        self.assertIn("h modified in place after SigmoidBackward0 saved it as result", out)


if __name__ == "__main__":
    unittest.main()
