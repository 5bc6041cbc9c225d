"""Error text names the program once: the recorder library's messages carry
no `gradtrace:` and the Python layer (or the command) adds it, once.

Checked through the Python API for each way of failing to create a trace
(an existing file, a directory, a missing directory, a path under a file)
and through `gradtrace record` for the size-cap warning.
"""
import os
import subprocess
import sys
import unittest

import gtutil

PROBE = r"""
import sys
import gradtrace
try:
    gradtrace.record(sys.argv[1]).start()
except OSError as e:
    print(type(e).__name__)
    print(str(e))
else:
    print("no error")
"""


class ErrorText(unittest.TestCase):
    def probe(self, path):
        cp = subprocess.run([gtutil.PYTHON, "-c", PROBE, path], capture_output=True,
                            text=True, timeout=120)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        kind, msg = cp.stdout.splitlines()[:2]
        return kind, msg

    def assert_once(self, msg):
        self.assertEqual(msg.count("gradtrace:"), 1, msg)
        self.assertTrue(msg.startswith("gradtrace: "), msg)

    def test_existing_file(self):
        d = gtutil.tmpdir()
        path = os.path.join(d, "exists.db")
        with open(path, "w") as f:
            f.write("x")
        kind, msg = self.probe(path)
        self.assertEqual(kind, "FileExistsError")
        self.assert_once(msg)
        # a file that is not a trace: the message names the parameter that
        # replaces it
        self.assertEqual(msg, "gradtrace: cannot create trace %s: the file exists and is "
                              "not a gradtrace trace; overwrite=True replaces it, or choose "
                              "another path" % path)
        self.assertEqual(msg.count("cannot create trace"), 1)

    def test_other_failures(self):
        d = gtutil.tmpdir()
        plain = os.path.join(d, "plain")
        with open(plain, "w") as f:
            f.write("x")
        sub = os.path.join(d, "adir")
        os.mkdir(sub)
        for path, why in ((os.path.join(d, "no", "such", "t.db"), "no such file"),
                          (os.path.join(plain, "t.db"), "not a directory")):
            with self.subTest(path=path):
                kind, msg = self.probe(path)
                self.assertEqual(kind, "OSError")
                self.assert_once(msg)
                self.assertIn(why, msg)
                self.assertEqual(msg.count("cannot create trace"), 1)

    def test_cap_warning_once(self):
        script = os.path.join(gtutil.SOURCE, "bench", "longtrace_loop.py")
        out, cp = gtutil.record(script, 300, options=("--max-size", "200K"))
        lines = [l for l in cp.stderr.splitlines() if "recording stopped" in l]
        self.assertEqual(len(lines), 1, cp.stderr)
        self.assert_once(lines[0])
        self.assertEqual(lines[0].count("recording stopped"), 1, lines[0])

    def test_cap_too_small_refused_once(self):
        script = os.path.join(gtutil.SOURCE, "bench", "longtrace_loop.py")
        out, cp = gtutil.record(script, 3, options=("--max-size", "64K"), expect_fail=True)
        self.assertEqual(cp.returncode, 2)
        lines = cp.stderr.splitlines()
        self.assertEqual(len(lines), 1, cp.stderr)
        self.assert_once(lines[0])
        self.assertRegex(lines[0], r"^gradtrace: cannot create trace .*: a size cap of 65536 "
                                   r"bytes is below the smallest trace \(\d+ bytes\)$")
        self.assertFalse(os.path.exists(out))

if __name__ == "__main__":
    unittest.main()
