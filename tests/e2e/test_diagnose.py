"""End-to-end tests of `gradtrace diagnose` on real recorded PyTorch runs:
the seed (examples/seed_class_weights.py) and its --fixed control, an
in-place update of a leaf that requires grad, and a run killed with SIGKILL
(a partial trace). The four recordings run two at a time.

Every finding is checked for kind, lines, versions and names, and the
first_to_fail one against PyTorch's own message (dtype, shape, versions).

Env: GRADTRACE (the built command), GT_SOURCE_DIR, GT_BUILD_DIR.
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SEED = gtutil.example("seed_class_weights.py")


def line_of(path, text):
    """1-based number of the line of `path` containing `text` (exactly one)."""
    with open(path) as f:
        hits = [i + 1 for i, l in enumerate(f) if text in l]
    assert len(hits) == 1, (path, text, hits)
    return hits[0]


def diagnose(trace, *args):
    """(exit status, parsed JSON) of `gradtrace diagnose --json trace`."""
    cp = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", *args, trace],
                        capture_output=True, text=True, timeout=60)
    assert cp.stderr == "", cp.stderr
    return cp.returncode, json.loads(cp.stdout)


def text(trace, *args):
    cp = subprocess.run([gtutil.GRADTRACE, "diagnose", *args, trace], capture_output=True,
                        text=True, timeout=60)
    return cp.returncode, cp.stdout, cp.stderr


def pytorch_versions(message):
    """(dtype, shape, version, expected) from PyTorch's version message."""
    m = re.search(r"\[torch\.(\w+) \[([\d, ]*)\]\].*? is at version (\d+); "
                  r"expected version (\d+) instead", message)
    assert m, message
    dtype = {"FloatTensor": "float32", "DoubleTensor": "float64",
             "LongTensor": "int64"}[m.group(1)]
    shape = [int(x) for x in m.group(2).split(",") if x.strip()]
    return dtype, shape, int(m.group(3)), int(m.group(4))


def record_all():
    jobs = {
        "seed": (SEED, (), True),
        "fixed": (SEED, ("--fixed",), False),
        "leaf": (gtutil.scenario("diag_leaf.py"), (), True),
        "killed": (gtutil.scenario("diag_killed.py"), (), True),
    }
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        futs = {k: ex.submit(gtutil.record, s, *a, expect_fail=f)
                for k, (s, a, f) in jobs.items()}
        return {k: f.result()[0] for k, f in futs.items()}


class DiagnoseRecorded(unittest.TestCase):
    traces = None

    @classmethod
    def setUpClass(cls):
        cls.traces = record_all()

    def test_seed(self):
        trace = self.traces["seed"]
        status, doc = diagnose(trace)
        self.assertEqual(status, 1)
        self.assertEqual(doc["trace"], trace)
        self.assertIs(doc["partial"], False)
        err = doc["error"]
        self.assertEqual(err["type"], "RuntimeError")
        self.assertEqual(err["location"]["line"], line_of(SEED, "loss.backward()"))
        self.assertEqual(len(doc["findings"]), 1, doc["findings"])
        f = doc["findings"][0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved")
        self.assertIs(f["first_to_fail"], True)
        self.assertIs(f["matches_error"], True)
        self.assertEqual(f["backward"]["index"], 1)
        self.assertEqual(f["backward"]["location"]["line"], line_of(SEED, "loss.backward()"))
        self.assertEqual(os.path.basename(f["backward"]["location"]["file"]),
                         "seed_class_weights.py")
        self.assertEqual(f["node"]["name"], "NllLossBackward0")
        self.assertEqual(f["node"]["location"]["line"], line_of(SEED, "loss = F.nll_loss("))
        self.assertEqual(f["node"]["location"]["code"],
                         "loss = F.nll_loss(log_probs, target, weight=class_weights)")
        s = f["saved"]
        self.assertEqual((s["slot"], s["dtype"], s["shape"], s["names"]),
                         ("weight", "float32", [3], ["class_weights"]))
        self.assertEqual((s["saved_version"], s["version_at_backward"]), (0, 6))
        # PyTorch's message agrees with the finding PyTorch raised on.
        self.assertEqual(pytorch_versions(err["message"]),
                         (s["dtype"], s["shape"], s["version_at_backward"],
                          s["saved_version"]))
        # class_weights[i] *= ...: per class a mul_ on the select view, then
        # the copy_ of __setitem__ writing it back: 3 classes, 6 writes.
        muts = f["mutations"]
        self.assertEqual([m["op"] for m in muts], ["aten::mul_.Tensor", "aten::copy_"] * 3)
        self.assertEqual([m["version_after"] for m in muts], [1, 2, 3, 4, 5, 6])
        mline = line_of(SEED, "class_weights[i] *= 1.0 + share")
        for m in muts:
            self.assertEqual(m["location"]["line"], mline)
            self.assertEqual(m["location"]["code"], "class_weights[i] *= 1.0 + share")
            self.assertEqual(m["names"], ["class_weights"])
            self.assertEqual(m["phase"], "forward")
        self.assertEqual([m["seq"] for m in muts], sorted(m["seq"] for m in muts))
        self.assertEqual(f["suggestion"],
                         "update a copy: class_weights = class_weights.clone().detach() "
                         "before changing it, or move the update after backward()")

        # --backward 1 gives the same; there is no backward 2.
        self.assertEqual(diagnose(trace, "--backward", "1"), (status, doc))
        st, out, errtext = text(trace, "--backward", "2")
        self.assertEqual((st, out), (2, ""))
        self.assertIn("no backward call 2", errtext)

        # Text: leads with the pair, clickable file:line, no colour off a TTY.
        st, out, errtext = text(trace)
        self.assertEqual(st, 1)
        self.assertIn("class_weights modified in place after NllLossBackward0 saved it as "
                      "weight (version 0 -> 6)", out)
        self.assertIn("seed_class_weights.py:%d" % mline, out)
        self.assertIn("seed_class_weights.py:%d" % line_of(SEED, "loss = F.nll_loss("), out)
        self.assertIn("backward #1 found version 6, expected 0", out)
        self.assertIn("matches the error PyTorch raised", out)
        self.assertNotIn("\033[", out)
        self.assertNotIn("partial", out)

    def test_seed_fixed_reports_nothing(self):
        trace = self.traces["fixed"]
        status, doc = diagnose(trace)
        self.assertEqual(status, 0)
        self.assertEqual(doc["findings"], [])
        self.assertIsNone(doc["error"])
        st, out, _ = text(trace)
        self.assertEqual(st, 0)
        self.assertIn("no findings", out)
        # Two training steps, two backward calls, both replayed.
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.one(db, "SELECT count(*) FROM backward_calls"), 2)

    def test_leaf_inplace(self):
        trace = self.traces["leaf"]
        script = gtutil.scenario("diag_leaf.py")
        status, doc = diagnose(trace)
        self.assertEqual(status, 1)
        self.assertEqual(len(doc["findings"]), 1, doc["findings"])
        f = doc["findings"][0]
        self.assertEqual(f["kind"], "leaf_inplace")
        self.assertIs(f["first_to_fail"], True)
        self.assertIsNone(f["backward"])
        # The refused write is in mutations[] like every kind's writes.
        self.assertEqual(len(f["mutations"]), 1, f["mutations"])
        m = f["mutations"][0]
        self.assertIs(m["attempted"], True)
        self.assertEqual(m["location"]["line"], line_of(script, "# @leaf_mutate"))
        self.assertEqual(m["tensor"], f["leaf"]["tensor"])
        self.assertEqual(f["location"]["line"], line_of(script, "# @leaf_mutate"))
        self.assertEqual(doc["error"]["location"]["line"], line_of(script, "# @leaf_mutate"))
        self.assertEqual(f["leaf"]["names"], ["w"])
        self.assertEqual((f["leaf"]["dtype"], f["leaf"]["shape"]), ("float32", [3]))
        self.assertIn("torch.no_grad()", f["suggestion"])
        self.assertIn("w = w.clone()", f["suggestion"])
        self.assertIn("leaf Variable that requires grad", doc["error"]["message"])

    def test_killed_run_is_partial(self):
        trace = self.traces["killed"]
        script = gtutil.scenario("diag_killed.py")
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.one(db, "SELECT status FROM run"), "running")
        status, doc = diagnose(trace)
        self.assertEqual(status, 1)
        self.assertIs(doc["partial"], True)
        self.assertEqual(len(doc["findings"]), 1, doc["findings"])
        f = doc["findings"][0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved")
        self.assertEqual(f["node"]["name"], "NllLossBackward0")
        self.assertEqual(f["node"]["location"]["line"], line_of(script, "# @killed_save"))
        self.assertEqual(f["saved"]["slot"], "weight")
        self.assertEqual(f["saved"]["names"], ["weights"])
        self.assertEqual((f["saved"]["saved_version"], f["saved"]["version_at_backward"]),
                         (0, 1))
        self.assertEqual([(m["op"], m["version_after"], m["location"]["line"])
                          for m in f["mutations"]],
                         [("aten::mul_.Tensor", 1, line_of(script, "# @killed_mutate"))])
        self.assertIs(f["first_to_fail"], True)
        self.assertIs(f["matches_error"], True)
        self.assertIn("weights = weights.clone().detach()", f["suggestion"])
        st, out, _ = text(trace)
        self.assertEqual(st, 1)
        self.assertIn("the trace is partial", out)


class DiagnoseInput(unittest.TestCase):
    def test_bad_input_exits_2(self):
        d = gtutil.tmpdir()
        junk = os.path.join(d, "junk.db")
        with open(junk, "w") as f:
            f.write("not a trace")
        for args in ([junk], [os.path.join(d, "missing.db")], [], ["--backward", "x", junk],
                     ["--nope", junk]):
            cp = subprocess.run([gtutil.GRADTRACE, "diagnose", *args], capture_output=True,
                                text=True, timeout=60)
            self.assertEqual(cp.returncode, 2, args)
            self.assertEqual(cp.stdout, "", args)
            self.assertTrue(cp.stderr.startswith("gradtrace: "), cp.stderr)
        cp = subprocess.run([gtutil.GRADTRACE, "diagnose", junk], capture_output=True,
                            text=True, timeout=60)
        self.assertIn("not a gradtrace trace", cp.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
