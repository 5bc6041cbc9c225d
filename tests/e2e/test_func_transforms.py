"""torch.func transforms in eager mode, recorded and diagnosed: inside
grad, vjp, jacrev and vmap(grad) the dispatch mode sees the unwrapped
tensors while the graph and its saved tensors hold functorch's wrappers
(GradTrackingTensor, BatchedTensor). The recorder must look through them so
that the tensor an op saved, the tensor written in place and its version
bumps are one tensor of the trace, named as in the user's code, with the
line of the write. Correct transformed functions get no finding. Each case of
scenarios/func_transforms.py runs its own transform.

On PyTorch 1.13 the transforms come from the separate functorch package.
A recorded run there once failed transforms that followed a print(tensor):
the recorder's cached stack frame kept the frame of Tensor.__repr__ alive,
and with it the _DisableFuncTorch guard in its locals, so functorch's
dispatch keys stayed excluded. The scenario prints tensors between its
transforms, so this runs that pattern on either release.

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

SCRIPT = gtutil.scenario("func_transforms.py")


def have_transforms():
    """torch.func, or 1.13's separate functorch package."""
    return subprocess.run([gtutil.PYTHON, "-c", "try:\n import torch.func\n"
                           "except ImportError:\n import functorch"],
                          capture_output=True).returncode == 0


def marker(tag):
    with open(SCRIPT) as f:
        hits = [i + 1 for i, l in enumerate(f) if l.rstrip().endswith("# @" + tag)]
    assert len(hits) == 1, (tag, hits)
    return hits[0]


@unittest.skipUnless(have_transforms(), "neither torch.func nor functorch")
class FuncTransforms(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace, cls.cp = gtutil.record(SCRIPT)
        cls.plain = gtutil.run_plain(SCRIPT)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", cls.trace],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        cls.doc = json.loads(r.stdout)
        cls.text = subprocess.run([gtutil.GRADTRACE, "diagnose", cls.trace],
                                  capture_output=True, text=True, timeout=120).stdout
        cls.db = gtutil.connect(cls.trace)

    @classmethod
    def tearDownClass(cls):
        cls.db.close()

    def findings(self, case):
        line = marker(case + "-bw")
        return [f for f in self.doc["findings"]
                if f.get("backward") and f["backward"]["location"]["line"] == line]

    def error_of(self, case):
        m = re.search(r"^%s error: (.*)$" % re.escape(case), self.plain.stdout, re.M)
        self.assertIsNotNone(m, (case, self.plain.stdout))
        return m.group(1)

    def check(self, case, node, slot, name, match=True):
        """The case's one first-to-fail finding: an in-place invalidation of
        the tensor the user calls `name`, saved by `node` at the case's save
        line and written at its write line."""
        fs = self.findings(case)
        first = [f for f in fs if f["first_to_fail"]]
        self.assertEqual(len(first), 1, (case, fs))
        f = first[0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved", f)
        self.assertEqual(f["node"]["name"], node, f)
        self.assertEqual(f["saved"]["slot"], slot, f)
        self.assertIn(name, f["saved"]["names"], f)
        self.assertEqual(f["node"]["location"]["line"], marker(case + "-save"), f)
        self.assertEqual([m["location"]["line"] for m in f["mutations"]],
                         [marker(case + "-mut")], f)
        self.assertEqual((f["saved"]["saved_version"], f["saved"]["version_at_backward"]),
                         (0, 1), f)
        err = self.error_of(case)
        self.assertIn("modified by an inplace operation", err)
        if match:
            self.assertIs(f["matches_error"], True, f)
            m = re.search(r"\[torch\.\w+ \[([\d, ]*)\]\]", err)
            shown = [int(x) for x in m.group(1).split(",")]
            # the shape PyTorch shows: the tensor's own, or (vmap) one sample's
            self.assertEqual(f["saved"].get("error_shape", f["saved"]["shape"]), shown)
        return f

    def test_same_output_as_plain_run(self):
        # same errors, same results: recording changes nothing
        self.assertEqual(self.cp.stdout, self.plain.stdout)
        self.assertEqual(self.plain.stdout.count("error: one of the variables needed"), 5)

    def test_grad(self):
        self.check("grad", "SoftmaxBackward0", "result", "probs")

    def test_vjp(self):
        self.check("vjp", "SigmoidBackward0", "result", "act")

    def test_jacrev(self):
        self.check("jacrev", "TanhBackward0", "result", "hidden")

    def test_write_in_helper_function(self):
        # the write happens in a function the transformed one calls: the
        # graph is found through the caller's frame
        self.check("helper", "ExpBackward0", "result", "t")

    def test_vmap_of_grad(self):
        # the trace holds the batched tensor the ops ran on ([3, 4]); PyTorch's
        # message names the per-sample one ([4]): it matches, and both shapes
        # are shown, explained
        f = self.check("vmap", "LogSoftmaxBackward0", "result", "logp")
        self.assertEqual(f["saved"]["shape"], [3, 4])
        self.assertEqual(f["saved"]["error_shape"], [4])
        self.assertIn("matches the error PyTorch raised (its message shows [4], one vmap "
                      "sample; the trace holds the batched [3,4])", self.text)
        # no other finding gets one
        for case in ("grad", "vjp", "jacrev", "helper"):
            for g in self.findings(case):
                self.assertNotIn("error_shape", g["saved"], g)

    def test_text_names_the_line(self):
        for case, name, op in (("grad", "probs", "mul_"), ("vjp", "act", "clamp_"),
                               ("jacrev", "hidden", "add_"), ("vmap", "logp", "sub_")):
            line = marker(case + "-mut")
            self.assertIn("func_transforms.py:%d" % line, self.text)
            self.assertIn("%s modified in place" % name, self.text)
            self.assertIn("aten::%s" % op, self.text)

    def test_one_tensor_through_wrappers(self):
        # the tensor the node saved is the tensor the ops wrote (one id, one
        # counter) and the tensor the mode saw as the op's output
        for case, node in (("grad", "SoftmaxBackward0"), ("vmap", "LogSoftmaxBackward0")):
            f = self.check(case, node, "result", {"grad": "probs", "vmap": "logp"}[case])
            tensor = f["saved"]["tensor"]
            made = gtutil.one(self.db, "SELECT o.stack FROM tensors t JOIN ops o"
                                       " ON o.seq = t.created_by WHERE t.id = ?", tensor)
            self.assertEqual(gtutil.user_line(self.db, made)[1], marker(case + "-save"))
            counter = gtutil.counter_of(self.db, tensor)
            lines = [b[3] for b in gtutil.bumps(self.db, counter)]
            self.assertEqual(lines, [marker(case + "-mut")])

    def test_correct_functions_have_no_findings(self):
        for case in ("ok-grad", "ok-vjp", "ok-jacrev", "ok-vmap"):
            self.assertEqual(self.findings(case), [], case)
            self.assertRegex(self.cp.stdout, r"(?m)^%s: \(?tensor\(" % re.escape(case))
        # the correct transforms' backward calls were recorded, with their graphs
        n = gtutil.one(self.db, "SELECT count(*) FROM backward_calls WHERE status = 'ok'")
        self.assertGreaterEqual(n, 4)
        self.assertEqual(len(self.doc["findings"]),
                         sum(len(self.findings(c))
                             for c in ("grad", "vjp", "jacrev", "helper", "vmap")))
        # a transform runs its forward and its backward in one call: never
        # noted as a graph built before recording started
        self.assertEqual(self.doc["outside_recording"], [])



CAPTURED = gtutil.scenario("func_captured.py")


@unittest.skipUnless(have_transforms(), "neither torch.func nor functorch")
class CapturedTensor(unittest.TestCase):
    """torch.func's own in-place refusal (a captured tensor) is an error of
    the family: diagnose never answers "no findings" for it, names the
    raising line and suggests passing the tensor in, which runs clean."""

    def test_captured_tensor_is_explained(self):
        trace, cp = gtutil.record(CAPTURED, expect_fail=True)
        self.assertIn("would mutate a captured Tensor", cp.stderr)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 1, (r.stdout, r.stderr))
        fs = json.loads(r.stdout)["findings"]
        self.assertEqual([f["kind"] for f in fs], ["unexplained"], fs)
        with open(CAPTURED) as src:
            line = [i + 1 for i, l in enumerate(src) if l.rstrip().endswith("# @captured")][0]
        self.assertEqual(fs[0]["location"]["line"], line, fs[0])
        self.assertIn("captured from outside", fs[0]["suggestion"])
        self.assertIn("as an argument", fs[0]["suggestion"])

    def test_suggested_fix_runs_clean(self):
        trace, cp = gtutil.record(CAPTURED, "fixed")
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, (r.stdout, r.stderr))
        self.assertEqual(json.loads(r.stdout)["findings"], [])


if __name__ == "__main__":
    unittest.main()
