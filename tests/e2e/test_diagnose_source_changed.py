"""What diagnose reads from the user's source files (the line that built an
nn.Dropout with inplace=True, the lines after a failing write, a custom
Function's ctx.save_for_backward line) it reads only while the file still
holds every line the run recorded of it (trace.h's gt_trace_source, the one
reader). When the file changed since the run, diagnose says so in one line
("note: FILE changed since the run") and JSON's sources_changed names it,
instead of quoting a line number of the new file: the fix for
tests/e2e/realbugs/dropout_inplace_6.py said "built with inplace=True at
drop.py:21" after two lines were added at the top, where the run's line was
19 and every other location the run's.

A change that keeps the recorded lines (a comment edited in place) reads on.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import shutil
import subprocess
import unittest

import gtutil

SCRIPT = os.path.join(gtutil.HERE, "realbugs", "dropout_inplace_6.py")
NOTE = " changed since the run: no line is read from it (the lines shown are the recorded ones)"


def built_line():
    with open(SCRIPT) as f:
        return [i for i, l in enumerate(f, 1) if "inplace=True)," in l][0]


class SourceChanged(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(gtutil.tmpdir(), "srcchanged")
        os.makedirs(cls.dir)
        cls.copy = os.path.join(cls.dir, "drop.py")
        shutil.copy(SCRIPT, cls.copy)
        cls.trace, _ = gtutil.record("drop.py", cwd=cls.dir, expect_fail=True,
                                     options=("-q",))
        with open(SCRIPT) as f:
            cls.src = f.read()

    def diagnose(self, *opts):
        cp = subprocess.run([gtutil.GRADTRACE, "diagnose", *opts, self.trace],
                            capture_output=True, text=True, cwd=self.dir, timeout=120)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        return cp.stdout

    def write(self, text):
        with open(self.copy, "w") as f:
            f.write(text)

    def tearDown(self):
        self.write(self.src)

    def test_unchanged_reads_the_line(self):
        out = self.diagnose()
        self.assertIn("was built with inplace=True at drop.py:%d," % built_line(), out)
        self.assertNotIn("changed since the run", out)
        self.assertEqual(json.loads(self.diagnose("--json"))["sources_changed"], [])

    def test_lines_moved(self):
        self.write("# one\n# two\n" + self.src)
        out = self.diagnose()
        self.assertNotIn("built with inplace=True at", out)
        self.assertIn("was built with inplace=True, so its", out)
        self.assertEqual(out.count("\nnote: drop.py" + NOTE + "\n"), 1, out)
        self.assertEqual(json.loads(self.diagnose("--json"))["sources_changed"], [self.copy])

    def test_comment_edited_in_place(self):
        lines = self.src.splitlines(True)
        lines[0] = "# an edited comment\n"
        self.write("".join(lines))
        out = self.diagnose()
        self.assertIn("was built with inplace=True at drop.py:%d," % built_line(), out)
        self.assertNotIn("changed since the run", out)


if __name__ == "__main__":
    unittest.main()
