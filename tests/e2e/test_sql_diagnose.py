"""The invalidations view agrees with `gradtrace diagnose --json` on every
diagnose scenario of tests/e2e/scenarios (and the recorder scenarios that
break a backward): the same (backward call, node, slot, saved tensor) pairs,
the same saved and current versions, the same mutations (bump seq) on the
same user lines.

Env: GRADTRACE (the built command), GT_SOURCE_DIR.
"""
import json
import os
import subprocess
import unittest

import gtutil

# script -> does it exit non-zero when run
SCENARIOS = {
    "diag_mixed.py": False,    # many mistakes, each in its own caught backward
    "diag_killed.py": True,    # SIGKILL after the mistake: a partial trace
    "diag_leaf.py": True,      # in-place on a leaf: no saved tensor involved
    "rec_relu_inplace.py": True,
    "rec_view_write.py": True,
    "rec_gan_step.py": True,
    "rec_data_write.py": False,  # a .data write: silent, not a version bump
}


def diagnose_pairs(trace):
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace],
                       capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    pairs = set()
    findings = 0
    for f in doc["findings"]:
        if f["kind"] != "inplace_invalidated_saved":
            continue
        findings += 1
        for m in f["mutations"]:
            loc = m["location"]
            pairs.add((f["backward"]["index"], f["node"]["id"], f["saved"]["slot"],
                       f["saved"]["tensor"], f["saved"]["saved_version"],
                       f["saved"]["version_at_backward"], m["bump_seq"],
                       os.path.basename(loc["file"]) if loc else None,
                       loc["line"] if loc else None))
    return pairs, findings


def view_pairs(trace):
    r = subprocess.run([gtutil.GRADTRACE, "sql", "--json", trace, """
        SELECT backward, node, slot, tensor, saved_version, version_at_backward,
               mutation_seq, file, line FROM invalidations"""],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    pairs = {(x["backward"], x["node"], x["slot"], x["tensor"], x["saved_version"],
              x["version_at_backward"], x["mutation_seq"],
              os.path.basename(x["file"]) if x["file"] else None, x["line"])
             for x in rows}
    r = subprocess.run([gtutil.GRADTRACE, "sql", "--no-header", trace,
                        "SELECT count(*) FROM (SELECT DISTINCT backward, saved_seq "
                        "FROM invalidations)"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return pairs, int(r.stdout)


class AgreesWithDiagnose(unittest.TestCase):
    def check(self, script):
        trace, _ = gtutil.record(gtutil.scenario(script), expect_fail=SCENARIOS[script])
        want, findings = diagnose_pairs(trace)
        got, invalidated = view_pairs(trace)
        self.assertEqual(got, want, script)
        self.assertEqual(invalidated, findings, script)
        return got, invalidated

    def test_diag_mixed(self):
        got, n = self.check("diag_mixed.py")
        self.assertGreaterEqual(n, 5)
        # the helper module's in-place div_ is located in the helper's file
        self.assertIn("diag_helper.py", {p[7] for p in got})

    def test_diag_killed(self):
        got, n = self.check("diag_killed.py")
        self.assertEqual(n, 1)
        self.assertEqual({p[8] for p in got},
                         {line_tagged("diag_killed.py", "@killed_mutate")})

    def test_diag_leaf(self):
        self.assertEqual(self.check("diag_leaf.py")[1], 0)

    def test_recorder_scenarios(self):
        for script in ("rec_relu_inplace.py", "rec_view_write.py", "rec_gan_step.py"):
            self.assertEqual(self.check(script)[1], 1, script)
        self.assertEqual(self.check("rec_data_write.py")[1], 0)


def line_tagged(script, tag):
    with open(gtutil.scenario(script), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith(tag):
                return n
    raise AssertionError(f"{tag} not in {script}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
