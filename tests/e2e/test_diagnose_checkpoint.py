"""diagnose on checkpointed code and custom autograd.Functions, from real
recordings of scenarios/diag_ckpt_cases.py (each case its own failing
backward call) and scenarios/diag_outside.py (a forward that ran before
recording started).

For each case: the kind, the variable names, the three lines (the call
that saved the tensor: "saved at"; the line inside the called function
that used it: node.inner_location, "used inside"; the write: mutations),
exactly one first-to-fail finding agreeing with PyTorch's message (dtype,
shape, versions), and no duplicate findings (a checkpoint input sits on
every node of its region: one finding per input and checkpointed call).

Env: GRADTRACE, GT_SOURCE_DIR, PYTHONPATH (set by ctest).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("diag_ckpt_cases.py")
OUTSIDE = gtutil.scenario("diag_outside.py")
ERR_RE = re.compile(r"\[torch\.(\w+) \[([\d, ]*)\]\], which is output \d+ of (\w+), "
                    r"is at version (\d+); expected version (\d+) instead")


def marker(tag, script=SCRIPT):
    return gtutil.marker(script, tag)


def diagnose(trace, *opts):
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", *opts, trace], capture_output=True,
                       text=True, timeout=120)
    return r


class Checkpoint(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace, cls.cp = gtutil.record(SCRIPT)
        cls.plain = gtutil.run_plain(SCRIPT)
        r = diagnose(cls.trace, "--json")
        assert r.returncode == 1, (r.returncode, r.stderr)
        cls.doc = json.loads(r.stdout)
        cls.text = diagnose(cls.trace).stdout
        cls.db = gtutil.connect(cls.trace)

    def findings(self, case):
        line = marker(case + "-bw")
        return [f for f in self.doc["findings"]
                if f["backward"] and f["backward"]["location"]["line"] == line]

    def error_of(self, case):
        rows = gtutil.rows(self.db, "SELECT e.message FROM errors e"
                                    " JOIN backward_calls b ON b.id = e.backward"
                                    " JOIN stacks s ON s.id = b.stack"
                                    " JOIN frames f ON f.id = s.user_frame WHERE f.line = ?",
                           marker(case + "-bw"))
        self.assertEqual(len(rows), 1, (case, rows))
        return rows[0][0]

    def error_text(self, case):
        return gtutil.one(self.db, "SELECT e.message FROM errors e"
                                   " JOIN backward_calls b ON b.id = e.backward"
                                   " JOIN stacks s ON s.id = b.stack"
                                   " JOIN frames f ON f.id = s.user_frame WHERE f.line = ?",
                          marker(case + "-bw"))

    def check(self, case, slot, names, node=None, n=1, inner=None, call=None, role="used"):
        """The case's findings: n of them, all inplace_invalidated_saved,
        one first to fail that matches PyTorch's message, with its lines."""
        fs = self.findings(case)
        self.assertEqual(len(fs), n, (case, fs))
        for f in fs:
            self.assertEqual(f["kind"], "inplace_invalidated_saved", f)
        # no duplicates: one finding per (tensor, call)
        keys = [(f["saved"]["tensor"], f["node"]["location"]["line"]) for f in fs]
        self.assertEqual(len(set(keys)), len(keys), keys)
        first = [f for f in fs if f["first_to_fail"]]
        self.assertEqual(len(first), 1, fs)
        f = first[0]
        self.assertTrue(f["matches_error"], f)
        self.assertEqual(f["saved"]["slot"], slot)
        for name in names:
            self.assertIn(name, f["saved"]["names"])
        if node:
            self.assertEqual(f["node"]["name"], node)
        self.assertEqual(f["node"]["location"]["line"], call or marker(case + "-call"), f)
        self.assertEqual(f["node"]["inner_location"]["line"],
                         inner or marker(case + "-inner"), f)
        self.assertEqual(f["node"]["inner_role"], role, f)
        with open(SCRIPT) as src:
            has_mut = "# @%s-mut\n" % case in src.read()
        if has_mut:
            self.assertEqual([m["location"]["line"] for m in f["mutations"]],
                             [marker(case + "-mut")])
        m = ERR_RE.search(self.error_of(case))
        self.assertIsNotNone(m, self.error_of(case))
        self.assertEqual(f["saved"]["dtype"],
                         {"FloatTensor": "float32", "DoubleTensor": "float64"}[m.group(1)])
        self.assertEqual(f["saved"]["shape"], [int(x) for x in m.group(2).split(",")])
        self.assertEqual((f["saved"]["version_at_backward"], f["saved"]["saved_version"]),
                         (int(m.group(4)), int(m.group(5))))
        return f

    def test_same_errors_as_plain_run(self):
        self.assertEqual(self.cp.stdout, self.plain.stdout)
        self.assertEqual(self.cp.stdout.count("error:"), 8)

    def test_nonreentrant_input_changed_after(self):
        self.check("nr_after", "checkpoint_input[0]", ["hid"], inner=marker("mlp-inner"))

    def test_reentrant_input_changed_after(self):
        self.check("r_after", "saved_tensors[0]", ["hid"], "CheckpointFunctionBackward",
                   inner=marker("mlp-inner"))

    def test_nonreentrant_input_changed_inside(self):
        f = self.check("nr_inside", "checkpoint_input[0]", ["hid", "h"],
                       inner=marker("scale-inner"))
        self.assertEqual([m["location"]["line"] for m in f["mutations"]],
                         [marker("scale-mut")])
        self.assertEqual(f["mutations"][0]["location"]["function"], "scale_in_place")

    def test_reentrant_input_changed_inside(self):
        # PyTorch recomputes with detached inputs: the in-place change
        # inside the function raises the leaf error during backward
        # (the forward ran it with the real input): raised at the line
        # inside the function, the checkpointed call as the node
        fs = self.findings("r_inside")
        self.assertEqual([f["kind"] for f in fs], ["leaf_inplace"], fs)
        f = fs[0]
        self.assertIs(f["first_to_fail"], True)
        self.assertEqual(f["location"]["line"], marker("scale-mut"))
        self.assertEqual([m["location"]["line"] for m in f["mutations"]],
                         [marker("scale-mut")])
        self.assertEqual(f["node"]["name"], "CheckpointFunctionBackward")
        self.assertEqual(f["node"]["location"]["line"], marker("r_inside-call"))
        self.assertIn("h", f["leaf"]["names"])
        self.assertIn("checkpointed function", f["suggestion"])
        self.assertIn("h = h.mul(2)", f["suggestion"])
        self.assertIn("leaf Variable", self.error_text("r_inside"))

    def test_two_calls_on_one_input(self):
        # the later call's nodes run first: its finding is the first to fail
        self.check("nr_two", "checkpoint_input[0]", ["hid"], n=2, inner=marker("mlp-inner"),
                   call=marker("nr_two-call2"))
        calls = sorted(f["node"]["location"]["line"] for f in self.findings("nr_two"))
        self.assertEqual(calls, [marker("nr_two-call"), marker("nr_two-call2")])

    def test_function_saving_output(self):
        # "saved by": the ctx.save_for_backward line, read from the file
        f = self.check("fn_out", "saved_tensors[0]", ["act"], "SaveOutBackward",
                       inner=marker("saveout-save"), role="saved")
        self.assertEqual(f["node"]["inner_location"]["function"], "SaveOut.forward")

    def test_function_saving_input(self):
        self.check("fn_in", "saved_tensors[1]", ["k"], "SaveInBackward",
                   inner=marker("savein-save"), role="saved")

    def test_function_mark_dirty(self):
        self.check("fn_dirty", "saved_tensors[0]", ["v", "y"], "DirtyBackward",
                   inner=marker("dirty-save"), role="saved")

    def test_no_unexplained(self):
        # a forward recorded whole is never reported as outside the recording
        self.assertEqual(self.doc["outside_recording"], [])
        self.assertNotIn("unexplained", [f["kind"] for f in self.doc["findings"]])
        self.assertFalse([f for f in self.doc["findings"] if f.get("outside_recording")])

    def test_text_shows_three_lines(self):
        block = self.text.split("[1] ")[1].split("\n[2] ")[0]
        base = os.path.basename(SCRIPT)
        self.assertRegex(block, r"saved at +\S*%s:%d" % (base, marker("nr_after-call")))
        self.assertRegex(block, r"used inside +\S*%s:%d +in mlp" % (base, marker("mlp-inner")))
        self.assertRegex(block, r"modified at +\S*%s:%d" % (base, marker("nr_after-mut")))


class CustomFnSaved(unittest.TestCase):
    """scenarios/diag_custom_fn_bug.py: "saved by" names the forward's
    ctx.save_for_backward line (no op: read from the source file), in the
    column of the other labels ("saved inside" was one wider), and
    falls back to "used inside" (the op that used the tensor) once the file
    no longer holds the recorded lines."""

    SCRIPT = gtutil.scenario("diag_custom_fn_bug.py")

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(dir=gtutil.tmpdir())
        cls.copy = os.path.join(cls.dir, "custom_fn_bug.py")
        shutil.copy(cls.SCRIPT, cls.copy)
        cls.trace, _ = gtutil.record(cls.copy, expect_fail=True)

    def finding(self):
        r = diagnose(self.trace, "--json")
        self.assertEqual(r.returncode, 1, r.stderr)
        fs = json.loads(r.stdout)["findings"]
        self.assertEqual(len(fs), 1, fs)
        return fs[0]

    def test_saved_inside_is_the_save_for_backward_line(self):
        f = self.finding()
        self.assertEqual(f["node"]["name"], "ClampSTBackward")
        self.assertEqual(f["node"]["location"]["line"], marker("call", self.SCRIPT))
        inner = f["node"]["inner_location"]
        self.assertEqual((inner["line"], inner["function"], f["node"]["inner_role"]),
                         (marker("save", self.SCRIPT), "ClampST.forward", "saved"), f)
        self.assertEqual(inner["code"], "ctx.save_for_backward(x)")
        text = diagnose(self.trace).stdout
        self.assertRegex(text, r"\n    saved by    \S*custom_fn_bug.py:%d +in ClampST.forward\n"
                               r" +%d \| ctx.save_for_backward\(x\)" %
                         ((marker("save", self.SCRIPT),) * 2))
        self.assertNotIn("used inside", text)
        # every label's location starts in one column
        cols = {len(m.group(1)) for m in re.finditer(r"\n(    [a-z][a-z ]*[a-z] +)\S+\.py:\d",
                                                     text)}
        self.assertEqual(cols, {16}, text)

    def test_changed_file_falls_back_to_used_inside(self):
        with open(self.SCRIPT) as f:
            src = f.read()
        try:
            with open(self.copy, "w") as f:
                f.write("# one line more: every recorded line moved down\n" + src)
            f = self.finding()
            self.assertEqual(f["node"]["inner_location"]["line"], marker("use", self.SCRIPT))
            self.assertEqual(f["node"]["inner_role"], "used", f)
            self.assertRegex(diagnose(self.trace).stdout, r"used inside +\S*custom_fn_bug.py:%d"
                             % marker("use", self.SCRIPT))
        finally:
            with open(self.copy, "w") as f:
                f.write(src)


class CompiledCall(unittest.TestCase):
    """scenarios/diag_compile_bug.py: a tensor saved inside a torch.compile'd
    function is never said to be saved at the decorator's line."""

    SCRIPT = gtutil.scenario("diag_compile_bug.py")

    @classmethod
    def setUpClass(cls):
        cls.trace, _ = gtutil.record(cls.SCRIPT, expect_fail=True)
        r = diagnose(cls.trace, "--json")
        assert r.returncode == 1, (r.returncode, r.stderr)
        cls.doc = json.loads(r.stdout)
        cls.text = diagnose(cls.trace).stdout

    def test_saved_inside_the_compiled_function(self):
        fs = [f for f in self.doc["findings"] if f["first_to_fail"]]
        self.assertEqual(len(fs), 1, self.doc["findings"])
        f = fs[0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved")
        self.assertEqual([m["location"]["line"] for m in f["mutations"]],
                         [marker("mut", self.SCRIPT)])
        self.assertNotIn("@torch.compile", self.text)
        if "compiled" in f["node"]:  # TorchDynamo compiled it: no line inside is recorded
            self.assertEqual(f["node"]["compiled"]["function"], "block", f)
            self.assertEqual(f["node"]["compiled"]["call_location"]["line"],
                             marker("call", self.SCRIPT), f)
            self.assertRegex(self.text, r"saved in +block, compiled by torch.compile: its lines"
                                        r" are not in the trace\n"
                                        r" +called at +\S*diag_compile_bug.py:%d"
                             % marker("call", self.SCRIPT))
        else:  # it ran eagerly (dispatch): the line inside
            self.assertEqual(f["node"]["location"]["line"], marker("save", self.SCRIPT), f)
            self.assertRegex(self.text, r"saved at +\S*diag_compile_bug.py:%d +in block"
                             % marker("save", self.SCRIPT))
        # the engine adapter records dynamo's compiled frame, dispatch the eager run
        self.assertEqual("compiled" in f["node"], gtutil.adapter() == "engine", f)


class Outside(unittest.TestCase):
    """gradtrace.record() opened between forward and backward."""

    @classmethod
    def setUpClass(cls):
        cls.trace = os.path.join(gtutil.tmpdir(), "outside.db")
        cls.cp = subprocess.run([gtutil.PYTHON, OUTSIDE, cls.trace], capture_output=True,
                                text=True, timeout=300)
        assert cls.cp.returncode == 0, cls.cp.stderr
        r = diagnose(cls.trace, "--json")
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        cls.doc = json.loads(r.stdout)
        cls.text = diagnose(cls.trace).stdout

    def test_reported_outside_the_recording(self):
        self.assertIn("error: one of the variables needed", self.cp.stdout)
        fs = self.doc["findings"]
        self.assertEqual([f["kind"] for f in fs], ["unexplained"], fs)
        f = fs[0]
        self.assertIs(f["outside_recording"], True)
        self.assertEqual(f["backward"]["location"]["line"], marker("outside-bw", OUTSIDE))
        self.assertEqual([m["location"]["line"] for m in f["mutations"]],
                         [marker("outside-mut", OUTSIDE)])
        self.assertIn("before recording started", f["suggestion"])
        self.assertIn("outside the recording", self.text)


def run_outside(case):
    trace = os.path.join(gtutil.tmpdir(), "outside-%s.db" % case)
    if os.path.exists(trace):
        os.unlink(trace)
    cp = subprocess.run([gtutil.PYTHON, OUTSIDE, trace, case], capture_output=True,
                        text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    plain = subprocess.run([gtutil.PYTHON, "-c", "import sys, runpy, gradtrace\n"
                            "class N:\n def __init__(s, *a, **k): pass\n"
                            " def __enter__(s): return s\n def __exit__(s, *a): return False\n"
                            "gradtrace.record = N\nsys.argv = sys.argv[1:]\n"
                            "runpy.run_path(sys.argv[0], run_name='__main__')",
                            OUTSIDE, trace + ".plain", case],
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    return trace, cp, plain


class OutsideSilent(unittest.TestCase):
    """A graph built before recording started, invalidated during it with
    no error: what the recording saw is still reported."""

    def test_swap_of_a_tensor_saved_before_recording(self):
        trace, cp, plain = run_outside("swap")
        self.assertEqual(cp.stdout, plain.stdout)  # same silently wrong gradient
        r = diagnose(trace, "--json")
        self.assertEqual(r.returncode, 1, r.stdout)
        fs = json.loads(r.stdout)["findings"]
        self.assertEqual([f["kind"] for f in fs], ["silent_storage_swap"], fs)
        f = fs[0]
        self.assertIn("u", f["saved"]["names"])
        swap = marker("outside-swap", OUTSIDE)
        self.assertEqual(f["location"]["line"], swap)
        self.assertEqual([m["location"]["line"] for m in f["mutations"]], [swap])
        self.assertEqual(f["backward"]["location"]["line"], marker("outside-bw", OUTSIDE))


class OutsideNoted(unittest.TestCase):
    """A graph built before recording started and used by a recorded
    backward with no error: a write the recording cannot see (through NumPy)
    or none at all. Diagnose finds nothing it can prove, and says which
    backward ran nodes it never saw made, so "no findings" is not taken for
    "checked"."""

    def check_noted(self, case):
        trace, cp, plain = run_outside(case)
        self.assertEqual(cp.stdout, plain.stdout)
        r = diagnose(trace, "--json")
        self.assertEqual(r.returncode, 0, r.stdout)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["findings"], [])
        notes = doc["outside_recording"]
        self.assertEqual(len(notes), 1, notes)
        n = notes[0]
        self.assertEqual(n["backward"], 1)
        self.assertEqual(n["location"]["line"], marker("outside-bw", OUTSIDE))
        # x * 2, h * h, x * u, two sums and the add: every node but the leaf's
        self.assertEqual(n["nodes"], 6, n)
        text = diagnose(trace).stdout
        self.assertRegex(text, r"note: backward #1 at \S*diag_outside\.py:%d ran 6 nodes "
                               r"whose forward ran before recording started"
                         % marker("outside-bw", OUTSIDE))
        self.assertIn("no saved tensor the recording saw was modified", text)

    def test_write_through_numpy_is_noted(self):
        self.check_noted("numpy")

    def test_clean_is_noted(self):
        self.check_noted("clean")

    def test_noted_per_rank(self):
        """Several traces (a distributed run's ranks): each rank's note, once
        for the ranks that share it, in the text and the JSON."""
        trace, _, _ = run_outside("clean")
        d = tempfile.mkdtemp(dir=gtutil.tmpdir())
        for name in ("a.db", "b.db"):
            shutil.copy(trace, os.path.join(d, name))
        line = marker("outside-bw", OUTSIDE)
        r = diagnose(d)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"note: ranks 0-1: backward #1 at \S*diag_outside\.py:%d"
                                   r" ran 6 nodes whose forward ran before recording"
                                   r" started" % line)
        self.assertEqual(r.stdout.count("before recording started (the first"), 1, r.stdout)
        self.assertIn("no saved tensor the recording saw was modified", r.stdout)
        doc = json.loads(diagnose(d, "--json").stdout)
        for t in doc["traces"]:
            self.assertEqual([n["location"]["line"] for n in
                              t["diagnosis"]["outside_recording"]], [line])
        self.assertEqual([(n["ranks"], n["kind"]) for n in doc["notes"]],
                         [([0, 1], "outside_recording")], doc["notes"])

    def test_swap_is_found_and_noted(self):
        trace, cp, plain = run_outside("swap")
        doc = json.loads(diagnose(trace, "--json").stdout)
        self.assertEqual([n["backward"] for n in doc["outside_recording"]], [1])


if __name__ == "__main__":
    unittest.main()
