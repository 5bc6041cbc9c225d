"""torch.compile while recording: TorchDynamo does not compile under the
dispatch mode gradtrace records with, so a compiled function runs eagerly.
Recording must not change what runs without saying so: one line on stderr
says it (once, however many calls), the trace holds the region's aten ops,
and a run that compiles nothing gets no such line.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("cap_compile.py")
NOTICE = "gradtrace: torch.compile ran eagerly while recording"


class Compile(unittest.TestCase):
    def test_compiled_says_so_once(self):
        trace, cp = gtutil.record(SCRIPT, "compiled", timeout=600)
        plain = gtutil.run_plain(SCRIPT, "compiled", timeout=600)
        self.assertIn("captured True", plain.stdout)  # it does compile unrecorded
        self.assertIn("captured False", cp.stdout)
        self.assertEqual(cp.stderr.count(NOTICE), 1, cp.stderr)
        self.assertNotIn(NOTICE, plain.stderr)
        # same gradients, and the region's ops are in the trace, twice
        self.assertEqual(cp.stdout.splitlines()[0], plain.stdout.splitlines()[0])
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.one(db, "SELECT count(*) FROM ops o JOIN strings s"
                                        " ON s.id = o.name WHERE s.text = 'aten::sin'"), 2)

    def test_nothing_compiled_no_line(self):
        trace, cp = gtutil.record(SCRIPT, "plain")
        self.assertNotIn(NOTICE, cp.stderr)


if __name__ == "__main__":
    unittest.main()
