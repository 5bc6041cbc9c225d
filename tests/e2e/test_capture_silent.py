"""Writes autograd cannot see: a tensor a node saved, swapped to other memory
with `.data =` (spectral norm's power iteration), is reported as a
silent_storage_swap with where it was saved, the backward that read the new
memory and the line of the assignment (recorded where it happens, inside a
helper function too), or only the interval in which the swap happened when
it went past the watched `.data` setter; the same swap before the forward,
and a set_() that PyTorch itself catches, are not.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("cap_swap.py")


def marker(tag):
    with open(SCRIPT) as f:
        hits = [i + 1 for i, l in enumerate(f) if l.rstrip().endswith("# @" + tag)]
    return hits


def run(case):
    trace, cp = gtutil.record(SCRIPT, case)
    plain = gtutil.run_plain(SCRIPT, case)
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace], capture_output=True,
                       text=True, timeout=60)
    return trace, cp, plain, r.returncode, json.loads(r.stdout)


class Swap(unittest.TestCase):
    def check_swap(self, case, save, swap, names, at_assignment=True, noticed_line=None):
        trace, cp, plain, rc, doc = run(case)
        self.assertEqual(cp.stdout, plain.stdout)  # same (silently wrong) gradient
        self.assertEqual(rc, 1)
        swaps = [f for f in doc["findings"] if f["kind"] == "silent_storage_swap"]
        self.assertEqual(len(swaps), len(doc["findings"]), doc["findings"])
        self.assertGreaterEqual(len(swaps), 1)
        for f in swaps:
            self.assertTrue(set(names) & set(f["saved"]["names"]), f["saved"])
            self.assertEqual(f["node"]["location"]["line"], save)
            self.assertEqual(f["backward"]["location"]["line"], marker("backward")[0])
            if at_assignment:
                # the line that swapped, as the finding's location, as its
                # one write (no op: `.data =` is none) and in the fix
                self.assertEqual(f["location"]["line"], swap, f)
                self.assertEqual([(m["location"]["line"], m["op"], m["attempted"])
                                  for m in f["mutations"]], [(swap, None, False)])
                self.assertRegex(f["suggestion"], r"by `\.data =` at .*cap_swap\.py:%d:" % swap)
                continue
            # the interval: from the last op that saw u on its old memory (on
            # or after the save, at the latest the swapping line itself, whose
            # right side reads u) to where the swap was noticed
            m = re.search(r"after .*cap_swap\.py:(\d+) and before .*cap_swap\.py:(\d+)",
                          f["suggestion"])
            self.assertTrue(m, f["suggestion"])
            self.assertTrue(save <= int(m.group(1)) <= swap, m.group(0))
            self.assertEqual(int(m.group(2)), noticed_line)
            self.assertEqual([m["location"]["line"] for m in f["mutations"]],
                             [noticed_line] if noticed_line != marker("backward")[0] else [])
        text = subprocess.run([gtutil.GRADTRACE, "diagnose", trace], capture_output=True,
                              text=True, timeout=60).stdout
        if at_assignment:
            self.assertRegex(text, r"swapped at +\S*cap_swap\.py:%d" % swap)
        db = gtutil.connect(trace)
        rows = gtutil.rows(db, "SELECT old_storage != new_storage, op IS NULL, backward IS NULL"
                               " FROM storage_swaps")
        return rows

    def this_swap(self, tag="swap", save_tag="save"):
        save = marker(save_tag)[0]
        return save, min(l for l in marker(tag) if l > save)

    def test_after_save_named_at_the_assignment(self):
        save, swap = self.this_swap()
        rows = self.check_swap("after_save", save, swap, ["u"])
        self.assertEqual(rows, [(1, 1, 1)])

    def test_used_by_an_op_after_the_swap(self):
        save, swap = self.this_swap()
        rows = self.check_swap("by_op", save, swap, ["u"])
        self.assertEqual(rows, [(1, 1, 1)])

    def test_module_parameter_in_a_helper(self):
        save, swap = self.this_swap("swap-param", "save-param")
        rows = self.check_swap("param", save, swap, ["norm.weight", "weight"])
        self.assertEqual(rows, [(1, 1, 1)])

    def test_past_the_watch_only_the_interval(self):
        save, swap = self.this_swap("swap-raw")
        rows = self.check_swap("raw", save, swap, ["u"], at_assignment=False,
                               noticed_line=marker("backward")[0])
        self.assertEqual(rows, [(1, 1, 0)])

    def test_past_the_watch_after_earlier_saves(self):
        # u was saved, and watched, by three earlier backward calls: the
        # swap is still seen, once, with its interval
        save, swap = self.this_swap("swap-steps", "save-steps")
        rows = self.check_swap("raw_steps", save, swap, ["u"], at_assignment=False,
                               noticed_line=marker("backward")[0])
        self.assertEqual(rows, [(1, 1, 0)])

    def test_before_save_is_correct(self):
        trace, cp, plain, rc, doc = run("before_save")
        self.assertEqual(cp.stdout, plain.stdout)
        self.assertEqual((rc, doc["findings"]), (0, []))

    def test_set_is_seen_by_autograd(self):
        trace, cp, plain, rc, doc = run("set_op")
        self.assertEqual(cp.stdout, plain.stdout)
        self.assertIn("error:", cp.stdout)
        self.assertEqual({f["kind"] for f in doc["findings"]}, {"inplace_invalidated_saved"})
        self.assertEqual(gtutil.rows(gtutil.connect(trace), "SELECT * FROM storage_swaps"), [])


if __name__ == "__main__":
    unittest.main()
