"""A loop that saves and writes one tensor in each round gives one finding,
not one per round: tests/e2e/realbugs/recurrence_slice_36470.py computes
f[i] = f[i - 1] * x into rows of one tensor f, and each round's
MulBackward0 saves f at its own version (1, 3, ..., 17), all then changed by
the same two lines. They were 9 findings, each listing the writes after its
version (9 to 1 of them, 90 'modified at' blocks in all), because the
versions made each say something else; now they are one finding at one site,
repeated 9 times: the first to fail shown, its JSON with "repeats", "nodes"
and "saved_versions" (in the nodes' order), and the text says the range.

Findings that differ in what was written (the lines that wrote) stay apart.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import subprocess
import unittest

import gtutil

TWO_SITES = r'''
import torch

x = torch.ones(1, requires_grad=True)
f = torch.zeros(6)
for i in range(1, 6):
    f[i] = f[i - 1] * x
    if i % 2:
        f[i] = f[i] + 1
    else:
        f[i] = f[i] * 2
f.sum().backward()
'''


def diagnose(trace, *opts):
    return subprocess.run([gtutil.GRADTRACE, "diagnose", *opts, trace], capture_output=True,
                          text=True, timeout=120)


class LoopVersions(gtutil.BothAdapters, unittest.TestCase):
    def check(self, adapter):
        env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
        script = os.path.join(gtutil.HERE, "realbugs", "recurrence_slice_36470.py")
        trace, _ = gtutil.record(script, env=env, expect_fail=True, options=("-q",))
        d = json.loads(diagnose(trace, "--json").stdout)
        self.assertEqual(len(d["findings"]), 1, d["findings"])
        f = d["findings"][0]
        self.assertTrue(f["first_to_fail"])
        self.assertTrue(f["matches_error"])
        self.assertEqual(f["repeats"], 9)
        self.assertEqual(len(set(f["nodes"])), 9)
        self.assertEqual(sorted(f["saved_versions"]), list(range(1, 18, 2)))
        self.assertEqual(f["saved"]["saved_version"], 17)
        self.assertEqual([m["version_after"] for m in f["mutations"]], [18, 19])
        text = diagnose(trace).stdout
        self.assertIn(": 1 finding\n", text)
        self.assertIn("repeated    9 times: 9 MulBackward0 nodes made at this line saved f at "
                      "versions 1 to 17, changed later by the same lines (version 17 shown)",
                      text)
        self.assertEqual(text.count("modified at"), 2)

    def test_other_writes_stay_apart(self):
        path = os.path.join(gtutil.tmpdir(), "two_sites.py")
        with open(path, "w") as fh:
            fh.write(TWO_SITES)
        trace, _ = gtutil.record(path, expect_fail=True, options=("-q",))
        fs = json.loads(diagnose(trace, "--json").stdout)["findings"]
        line = {code: n for n, code in enumerate(TWO_SITES.splitlines(), 1)}
        mul, plus, times = (line[c] for c in ("    f[i] = f[i - 1] * x",
                                              "        f[i] = f[i] + 1",
                                              "        f[i] = f[i] * 2"))
        # the last round's product (version 8) sees the + line's write only;
        # the four before it (versions 0 to 6) both lines', so one site
        got = [(f.get("repeats", 1), sorted(f.get("saved_versions") or []),
                sorted({m["location"]["line"] for m in f["mutations"]})) for f in fs]
        self.assertEqual(got, [(1, [], [mul, plus]), (4, [0, 2, 4, 6], [mul, plus, times])])


if __name__ == "__main__":
    unittest.main()
