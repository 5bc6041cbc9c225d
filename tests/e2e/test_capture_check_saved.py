"""--check-saved: the bytes of every saved CPU tensor are fingerprinted at
save and when its node runs; a write through a NumPy view into a custom
Function's saved output (no version bump, no error, wrong gradient) is a
silent_saved_write naming where it was saved, the backward that used it and
the recorded ops that touched that memory in between. The same run without
the write has no finding, and without --check-saved no fingerprint is taken.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("cap_numpy.py")


def marker(tag):
    return gtutil.marker(SCRIPT, tag)


def diagnose(trace):
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace], capture_output=True,
                       text=True, timeout=60)
    return r.returncode, json.loads(r.stdout)


class CheckSaved(unittest.TestCase):
    def test_numpy_write_found(self):
        trace, cp = gtutil.record(SCRIPT, "numpy", options=["--check-saved"])
        plain = gtutil.run_plain(SCRIPT, "numpy")
        self.assertEqual(cp.stdout, plain.stdout)  # the same wrong gradient
        self.assertIn("grad [0.0, 0.0, 0.0, 0.0]", cp.stdout)
        rc, doc = diagnose(trace)
        self.assertEqual(rc, 1)
        self.assertEqual([f["kind"] for f in doc["findings"]], ["silent_saved_write"])
        f = doc["findings"][0]
        self.assertEqual(f["node"]["location"]["line"], marker("save"))
        self.assertEqual(f["backward"]["location"]["line"], marker("backward"))
        self.assertIn("y", f["saved"]["names"])
        self.assertIn(marker("touch"), [m["location"]["line"] for m in f["mutations"]])
        db = gtutil.connect(trace)
        prints = gtutil.rows(db, "SELECT at_use, nbytes FROM saved_fingerprints ORDER BY seq")
        self.assertEqual(prints, [(0, 16), (1, 16)])

    def test_clean_run_no_finding(self):
        trace, cp = gtutil.record(SCRIPT, "clean", options=["--check-saved"])
        rc, doc = diagnose(trace)
        self.assertEqual((rc, doc["findings"]), (0, []))
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.one(db, "SELECT count(DISTINCT hash) FROM saved_fingerprints"),
                         1)
        options = json.loads(gtutil.one(db, "SELECT options FROM run"))
        self.assertEqual(options["check_saved"], True)
        # recorded by the adapter asked for: the engine takes fingerprints too
        self.assertEqual(options["adapter"], gtutil.adapter())

    def test_off_by_default(self):
        trace, cp = gtutil.record(SCRIPT, "numpy")
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.one(db, "SELECT count(*) FROM saved_fingerprints"), 0)


if __name__ == "__main__":
    unittest.main()
