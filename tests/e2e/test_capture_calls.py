"""Calls the engine makes into user code, recorded and diagnosed:
torch.utils.checkpoint with use_reentrant=False (saved-tensor hooks and
recomputation: the recorder must not unpack what the hooks packed) and True
(a custom Function recomputing inside backward), custom autograd.Functions
saving inputs, saving outputs and marking inputs dirty, and
torch.autograd.functional.jacobian/hessian. Each case of
scenarios/cap_calls.py runs its own failing backward call.

"saved at" of a custom Function's node or of a checkpointed call names the
line that made the call; the line inside the checkpointed function is the
op that made the node's output.

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

SCRIPT = gtutil.scenario("cap_calls.py")


def marker(tag):
    return gtutil.marker(SCRIPT, tag)


class Calls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace, cls.cp = gtutil.record(SCRIPT)
        cls.plain = gtutil.run_plain(SCRIPT)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", cls.trace],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, (r.returncode, r.stderr)
        cls.doc = json.loads(r.stdout)
        cls.db = gtutil.connect(cls.trace)

    def findings(self, case):
        line = marker(case + "-bw")
        return [f for f in self.doc["findings"]
                if f["backward"] and f["backward"]["location"]["line"] == line]

    def error_of(self, case):
        line = marker(case + "-bw")
        rows = gtutil.rows(self.db, "SELECT e.message FROM errors e"
                                    " JOIN backward_calls b ON b.id = e.backward"
                                    " JOIN stacks s ON s.id = b.stack"
                                    " JOIN frames f ON f.id = s.user_frame WHERE f.line = ?", line)
        self.assertEqual(len(rows), 1, (case, rows))
        return rows[0][0]

    def check_first(self, case, slot, names, saved_line, mut_line=None):
        """The first-to-fail finding of the case: its slot, names, where it
        was saved and modified, and agreement with PyTorch's message."""
        fs = self.findings(case)
        first = [f for f in fs if f["first_to_fail"]]
        self.assertEqual(len(first), 1, (case, fs))
        f = first[0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved")
        self.assertEqual(f["saved"]["slot"], slot)
        for n in names:
            self.assertIn(n, f["saved"]["names"])
        self.assertTrue(f["matches_error"], f)
        self.assertEqual(f["node"]["location"]["line"], saved_line, f)
        self.assertEqual([m["location"]["line"] for m in f["mutations"]],
                         [mut_line or marker(case + "-mut")])
        m = re.search(r"\[torch\.\w+ \[([\d, ]*)\]\]", self.error_of(case))
        self.assertEqual(f["saved"]["shape"], [int(x) for x in m.group(1).split(",")])
        return f

    def test_same_errors_as_plain_run(self):
        self.assertEqual(self.cp.stdout, self.plain.stdout)
        self.assertEqual(self.cp.stdout.count("error: one of the variables needed"), 8)

    def test_checkpoint_nonreentrant(self):
        f = self.check_first("ckpt0", "checkpoint_input[0]", ["h"], marker("ckpt0-call"))
        # every finding of this call is about the one input the hooks checked
        for g in self.findings("ckpt0"):
            self.assertEqual(g["saved"]["slot"], "checkpoint_input[0]")
            self.assertEqual(g["saved"]["tensor"], f["saved"]["tensor"])

    def test_checkpoint_nonreentrant_line_inside(self):
        # the nodes made in the region are attributed to the checkpoint call;
        # the op that made each one's output is the line inside the function
        rows = gtutil.rows(
            self.db, "SELECT sn.text, fo.line FROM nodes n JOIN strings sn ON sn.id = n.name"
            " JOIN ops c ON c.seq = n.op JOIN strings cn ON cn.id = c.name"
            " JOIN stacks cs ON cs.id = c.stack JOIN frames cf ON cf.id = cs.user_frame"
            " JOIN node_outputs no ON no.node = n.id JOIN tensors t ON t.id = no.tensor"
            " JOIN ops o ON o.seq = t.created_by JOIN stacks os ON os.id = o.stack"
            " JOIN frames fo ON fo.id = os.user_frame"
            " WHERE cn.text = 'torch.utils.checkpoint' AND cf.line = ?", marker("ckpt0-call"))
        self.assertIn(("MmBackward0", marker("block-inner")), rows)

    def test_checkpoint_nonreentrant_hooks_not_unpacked(self):
        # no saved slot of a node made inside the region was read (reading
        # one would have run the recomputation): only checkpoint inputs
        slots = gtutil.rows(
            self.db, "SELECT DISTINCT sl.text FROM saved_tensors st"
            " JOIN nodes n ON n.id = st.node JOIN strings sl ON sl.id = st.slot"
            " JOIN ops c ON c.seq = n.op JOIN strings cn ON cn.id = c.name"
            " WHERE cn.text = 'torch.utils.checkpoint'")
        self.assertEqual(slots, [("checkpoint_input[0]",)])

    def test_checkpoint_mutating_input_recorded(self):
        # the function changes its own input in place: the input was saved
        # at version 0 by the call, the write inside the function bumped it
        call = marker("mutating-call")
        saved = gtutil.rows(
            self.db, "SELECT DISTINCT st.tensor, st.version FROM saved_tensors st"
            " JOIN nodes n ON n.id = st.node JOIN ops c ON c.seq = n.op"
            " JOIN stacks cs ON cs.id = c.stack JOIN frames cf ON cf.id = cs.user_frame"
            " WHERE cf.line = ?", call)
        self.assertEqual(len(saved), 1, saved)
        tensor, version = saved[0]
        self.assertEqual(version, 0)
        lines = [b[3] for b in gtutil.bumps(self.db, gtutil.counter_of(self.db, tensor))]
        self.assertIn(marker("mutating-mut"), lines)

    def test_checkpoint_reentrant(self):
        f = self.check_first("ckpt1", "saved_tensors[0]", ["h"], marker("ckpt1-call"))
        self.assertEqual(f["node"]["name"], "CheckpointFunctionBackward")

    def test_function_saving_output(self):
        f = self.check_first("fnout", "saved_tensors[0]", ["result"], marker("fnout-call"))
        self.assertEqual(f["node"]["name"], "MyExpBackward")
        is_output = gtutil.one(self.db, "SELECT is_output FROM saved_tensors WHERE node = ?",
                               f["node"]["id"])
        self.assertEqual(is_output, 1)

    def test_function_saving_input(self):
        f = self.check_first("fnin", "saved_tensors[1]", ["b"], marker("fnin-call"))
        self.assertEqual(f["node"]["name"], "MyMulBackward")

    def test_function_mark_dirty(self):
        f = self.check_first("fndirty", "saved_tensors[0]", ["x", "y"], marker("fndirty-call"))
        self.assertEqual((f["saved"]["saved_version"], f["saved"]["version_at_backward"]),
                         (2, 3))

    def test_call_rows(self):
        # each apply is an ops row at the calling line, with its inputs and
        # outputs, and the Function's node is attributed to it
        rows = gtutil.rows(
            self.db, "SELECT cn.text, cf.line, sn.text FROM nodes n"
            " JOIN strings sn ON sn.id = n.name JOIN ops c ON c.seq = n.op"
            " JOIN strings cn ON cn.id = c.name JOIN stacks cs ON cs.id = c.stack"
            " JOIN frames cf ON cf.id = cs.user_frame WHERE cn.text LIKE '%.apply'")
        self.assertIn(("MyExp.apply", marker("fnout-call"), "MyExpBackward"), rows)
        self.assertIn(("MyMul.apply", marker("fnin-call"), "MyMulBackward"), rows)
        self.assertIn(("AddOne.apply", marker("fndirty-call"), "AddOneBackward"), rows)
        self.assertIn(("CheckpointFunction.apply", marker("ckpt1-call"),
                       "CheckpointFunctionBackward"), rows)

    def test_jacobian(self):
        self.check_first("jac", "result", ["h"], marker("jac-save"))

    def test_hessian(self):
        self.check_first("hess", "other", ["h"], marker("hess-save"))


if __name__ == "__main__":
    unittest.main()
