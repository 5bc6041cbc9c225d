"""End-to-end tests of `gradtrace diagnose` on one recorded run of many
in-place mistakes (tests/e2e/scenarios/diag_mixed.py): each scenario has its
own backward call, found by the line of that call, and every finding is
checked for kind, node, slot, lines, versions and names. Every finding marked
first_to_fail must agree with the message PyTorch raised in that backward
call (dtype, shape, versions), read from the trace's errors table.

Env: GRADTRACE (the built command), GT_SOURCE_DIR, GT_BUILD_DIR.
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("diag_mixed.py")
HELPER = gtutil.scenario("diag_helper.py")


def marker(tag, path=SCRIPT):
    """Line number of the line ending in `# @tag`."""
    with open(path) as f:
        hits = [i + 1 for i, l in enumerate(f) if l.rstrip().endswith("# @" + tag)]
    assert len(hits) == 1, (tag, hits)
    return hits[0]


def pytorch_versions(message):
    m = re.search(r"\[torch\.(\w+) \[([\d, ]*)\]\].*? is at version (\d+); "
                  r"expected version (\d+) instead", message)
    assert m, message
    dtype = {"FloatTensor": "float32", "DoubleTensor": "float64"}[m.group(1)]
    shape = [int(x) for x in m.group(2).split(",") if x.strip()]
    return dtype, shape, int(m.group(3)), int(m.group(4))


class DiagnoseScenarios(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace, cp = gtutil.record(SCRIPT)
        cls.log = cp.stdout
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", cls.trace],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, (r.returncode, r.stderr)
        cls.doc = json.loads(r.stdout)
        cls.db = gtutil.connect(cls.trace)

    def by_backward(self, tag):
        """Findings of the backward call made on the line tagged `tag`."""
        line = marker(tag)
        return [f for f in self.doc["findings"]
                if f["backward"] and f["backward"]["location"]["line"] == line
                and os.path.basename(f["backward"]["location"]["file"]) == "diag_mixed.py"]

    def error_of(self, f):
        rows = gtutil.rows(self.db, "SELECT message FROM errors WHERE backward = ?",
                           f["backward"]["index"])
        return rows[0][0] if rows else None

    def check_raised(self, f):
        """first_to_fail, matching PyTorch's message for its backward call."""
        self.assertIs(f["first_to_fail"], True)
        self.assertIs(f["matches_error"], True)
        s = f["saved"]
        self.assertEqual(pytorch_versions(self.error_of(f)),
                         (s["dtype"], s["shape"], s["version_at_backward"],
                          s["saved_version"]))

    def one_inplace(self, tag, node, slot, save_tag, versions=(0, 1)):
        fs = self.by_backward(tag)
        self.assertEqual(len(fs), 1, fs)
        f = fs[0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved")
        self.assertEqual(f["node"]["name"], node)
        self.assertEqual(f["saved"]["slot"], slot)
        self.assertEqual(f["node"]["location"]["line"], marker(save_tag))
        self.assertEqual((f["saved"]["saved_version"], f["saved"]["version_at_backward"]),
                         versions)
        self.check_raised(f)
        return f

    def test_every_scenario_ran(self):
        for name in ("relu_inplace", "residual", "optimizer_step", "slice_assign",
                     "view_write", "detach_write", "backward_twice", "two_saved",
                     "helper_module"):
            self.assertIn(name + " raised:", self.log)
        self.assertIn("data_write ok", self.log)
        self.assertIn("control_unsaved ok", self.log)
        self.assertIn("clean_training ok", self.log)
        self.assertEqual(len(self.doc["findings"]), 11, [
            (f["kind"], f["node"]["name"]) for f in self.doc["findings"]])
        self.assertEqual(gtutil.one(self.db, "SELECT count(*) FROM backward_calls"), 15)

    def test_relu_inplace_after_sigmoid(self):
        f = self.one_inplace("relu_backward", "SigmoidBackward0", "result", "relu_save")
        self.assertEqual(f["saved"]["names"][0], "s")
        self.assertEqual([(m["op"], m["version_after"], m["location"]["line"])
                          for m in f["mutations"]],
                         [("aten::relu_", 1, marker("relu_mutate"))])
        self.assertTrue(f["suggestion"].startswith("use inplace=False"), f["suggestion"])

    def test_residual_add(self):
        f = self.one_inplace("residual_backward", "TanhBackward0", "result", "residual_save")
        self.assertEqual(f["saved"]["names"], ["h"])
        self.assertEqual([(m["op"], m["version_after"], m["location"]["line"], m["names"])
                          for m in f["mutations"]],
                         [("aten::add_.Tensor", 1, marker("residual_mutate"), ["h"])])
        self.assertIn("`h = h + (x)`", f["suggestion"])

    def test_optimizer_step_between_forward_and_backward(self):
        # nn.Linear's init writes the weight once (version 1); the step
        # writes it again; AddmmBackward0 saved weight.t() as mat2.
        f = self.one_inplace("opt_backward", "AddmmBackward0", "mat2", "opt_save", (1, 2))
        self.assertEqual(f["saved"]["shape"], [3, 2])
        self.assertEqual([(m["op"], m["version_after"], m["location"]["line"])
                          for m in f["mutations"]],
                         [("aten::add_.Tensor", 2, marker("opt_mutate"))])
        self.assertTrue(f["suggestion"].startswith(
            "move optimizer.step() after the last backward() that uses this graph, or "
            "recompute the forward"), f["suggestion"])

    def test_slice_assignment(self):
        f = self.one_inplace("slice_backward", "SigmoidBackward0", "result", "slice_save")
        self.assertEqual(f["saved"]["names"], ["h"])
        self.assertEqual(len(f["mutations"]), 1)
        m = f["mutations"][0]
        self.assertTrue(m["op"].startswith("aten::fill_"), m["op"])
        self.assertEqual((m["version_after"], m["location"]["line"]),
                         (1, marker("slice_mutate")))
        self.assertEqual(m["location"]["code"], "h[:, 0] = 0  # @slice_mutate")
        self.assertIn("h = h.clone()", f["suggestion"])

    def test_write_through_view(self):
        f = self.one_inplace("view_backward", "ExpBackward0", "result", "view_save")
        self.assertIn("e", f["saved"]["names"])
        self.assertEqual([(m["op"], m["version_after"], m["location"]["line"])
                          for m in f["mutations"]],
                         [("aten::mul_.Tensor", 1, marker("view_mutate"))])
        self.assertIn("first", f["mutations"][0]["names"])

    def test_write_through_detach(self):
        # detach() shares the version counter: PyTorch sees this one.
        f = self.one_inplace("detach_backward", "ExpBackward0", "result", "detach_save")
        self.assertEqual([(m["op"], m["version_after"], m["location"]["line"])
                          for m in f["mutations"]],
                         [("aten::zero_", 1, marker("detach_mutate"))])
        self.assertIn("d", f["mutations"][0]["names"])
        # d is a view (alias) of e: named as such, not among e's names
        self.assertEqual(f["mutations"][0]["view_of"], ["e"])
        self.assertEqual(f["saved"]["names"], ["e"])

    def test_write_through_data_is_silent(self):
        fs = self.by_backward("data_backward")
        self.assertEqual(len(fs), 1, fs)
        f = fs[0]
        self.assertEqual(f["kind"], "silent_storage_write")
        self.assertIs(f["first_to_fail"], False)
        self.assertIsNone(f["matches_error"])  # PyTorch raised nothing
        self.assertIsNone(self.error_of(f))
        self.assertEqual(f["node"]["name"], "ExpBackward0")
        self.assertEqual(f["node"]["location"]["line"], marker("data_save"))
        self.assertEqual((f["saved"]["saved_version"], f["saved"]["version_at_backward"]),
                         (0, 0))
        self.assertEqual([(m["op"], m["location"]["line"]) for m in f["mutations"]],
                         [("aten::mul_.Tensor", marker("data_mutate"))])
        self.assertIn("silently wrong", f["suggestion"])

    def test_backward_twice(self):
        fs = self.by_backward("twice_second")
        self.assertEqual(len(fs), 1, fs)
        f = fs[0]
        self.assertEqual(f["kind"], "backward_twice")
        self.assertEqual(f["node"]["name"], "ExpBackward0")
        self.assertEqual(f["node"]["location"]["line"], marker("twice_save"))
        self.assertEqual(f["freed_by"]["location"]["line"], marker("twice_first"))
        self.assertEqual(f["freed_by"]["index"], f["backward"]["index"] - 1)
        self.assertEqual(f["mutations"], [])
        self.assertIs(f["first_to_fail"], True)
        self.assertIs(f["matches_error"], True)
        self.assertIn("second time", self.error_of(f))
        self.assertIn("retain_graph=True", f["suggestion"])
        self.assertIn("diag_mixed.py:%d" % marker("twice_first"), f["suggestion"])
        self.assertEqual(self.by_backward("twice_first"), [])

    def test_two_saved_tensors_both_reported(self):
        fs = self.by_backward("two_backward")
        self.assertEqual(len(fs), 2, fs)
        # The engine runs CosBackward0 (higher sequence number) first: that
        # is the one PyTorch names; SinBackward0's is reported too.
        first, second = fs
        self.assertEqual((first["node"]["name"], first["saved"]["slot"],
                          first["saved"]["names"]), ("CosBackward0", "self", ["b"]))
        self.assertEqual([(m["op"], m["location"]["line"]) for m in first["mutations"]],
                         [("aten::mul_.Tensor", marker("two_mutate_b"))])
        self.check_raised(first)
        self.assertEqual((second["node"]["name"], second["saved"]["slot"],
                          second["saved"]["names"]), ("SinBackward0", "self", ["a"]))
        self.assertEqual([(m["op"], m["location"]["line"]) for m in second["mutations"]],
                         [("aten::add_.Tensor", marker("two_mutate_a"))])
        self.assertEqual(second["node"]["location"]["line"], marker("two_save_a"))
        self.assertIs(second["first_to_fail"], False)
        # Same dtype, shape and versions as b's; PyTorch's message names b's
        # grad_fn (MulBackward0 after b.mul_), not a's.
        self.assertIs(second["matches_error"], False)

    def test_mutation_in_helper_module(self):
        f = self.one_inplace("helper_backward", "ExpBackward0", "result", "helper_save")
        self.assertEqual(len(f["mutations"]), 1)
        m = f["mutations"][0]
        self.assertEqual(m["op"], "aten::div_.Tensor")
        self.assertEqual(os.path.basename(m["location"]["file"]), "diag_helper.py")
        self.assertEqual(m["location"]["line"], marker("helper_div", HELPER))
        self.assertEqual(m["location"]["function"], "normalize_")
        # t: bound in the helper at the mutation; e: the caller's name for
        # the same tensor, bound when backward was called
        self.assertEqual(m["names"], ["t", "e"])

    def calls_at(self, tag):
        """Ids of the backward calls made on the line tagged `tag`."""
        return [r[0] for r in gtutil.rows(
            self.db, "SELECT b.id FROM backward_calls b JOIN stacks s ON s.id = b.stack"
            " JOIN frames f ON f.id = s.user_frame WHERE f.line = ? ORDER BY b.id",
            marker(tag))]

    def test_control_clean_training_loop(self):
        # Three steps of a real loop with safe in-place ops: nothing.
        self.assertEqual(len(self.calls_at("clean_backward")), 3)
        self.assertEqual(self.by_backward("clean_backward"), [])

    def test_control_inplace_on_unsaved_tensor(self):
        self.assertEqual(self.by_backward("control_backward"), [])
        lines = {marker("control_mutate"), marker("control_backward")}
        for f in self.doc["findings"]:
            for m in f["mutations"]:
                self.assertNotIn(m["location"]["line"], lines)

    def test_backward_filter_and_text(self):
        f = self.by_backward("two_backward")[0]
        idx = f["backward"]["index"]
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", "--backward", str(idx),
                            self.trace], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        only = json.loads(r.stdout)["findings"]
        self.assertEqual([(g["node"]["name"], g["first_to_fail"]) for g in only],
                         [("CosBackward0", True), ("SinBackward0", False)])
        [ctl] = self.calls_at("control_backward")
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--backward", str(ctl), self.trace],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertIn("no findings", r.stdout)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--color=always", self.trace],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("\033[", r.stdout)
        self.assertIn("11 findings", r.stdout)
        self.assertIn("diag_helper.py:%d" % marker("helper_div", HELPER), r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
