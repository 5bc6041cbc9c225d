"""End-to-end tests of backward() of a tensor with no grad_fn ("element 0
of tensors does not require grad and does not have a grad_fn",
scenarios/diag_cut.py): the graph cut by detach(), .data, a forward under
torch.no_grad() (a block, a decorated function) or inference_mode, argmax or
a comparison; a loss rebuilt from .item() numbers; a frozen model; data that
never required grad. Each is recorded and diagnosed; the finding must name
the cut (its reason, line and op, the input that had a graph) or what the
loss comes from, and its fix, applied to a copy of the script where it is
an edit, must make the script run through.

Env: GRADTRACE (the built command), GT_SOURCE_DIR, GT_BUILD_DIR.
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("diag_cut.py")


def marker(tag):
    return gtutil.marker(SCRIPT, tag)


def run_fixed(case, old, new):
    """Run a copy of the script for `case` with `old` (a whole line's code,
    or a piece of one) replaced by `new`."""
    with open(SCRIPT) as f:
        text = f.read()
    assert old in text, old
    path = os.path.join(gtutil.tmpdir(), "fixed_%s.py" % case)
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))
    return gtutil.run_plain(path, case)


class Cut(unittest.TestCase):
    def check_input(self, case, reason, name):
        """The one grad_input_unreachable finding of `case`, checked."""
        trace, _ = gtutil.record(SCRIPT, case, expect_fail=True)
        status, doc, text = gtutil.diagnose_both(trace)
        self.assertEqual(status, 1, text)
        self.assertIn("differentiated Tensor", doc["error"]["message"])
        self.assertEqual(len(doc["findings"]), 1, text)
        f = doc["findings"][0]
        self.assertEqual(f["kind"], "grad_input_unreachable", text)
        self.assertEqual(f["target"]["names"][0], name, f["target"])
        self.assertEqual(f["target"]["cut"]["reason"], reason, text)
        self.assertIn("autograd.grad input %s" % name, text)
        made = f["target"]["cut"]["made_at"]
        self.assertEqual(made["line"], marker(case + "_made"), made)
        return f, text

    def test_grad_input_unused(self):
        f, _ = self.check_input("grad_unused", "unused", "aux.weight")
        self.assertIn("allow_unused=True", f["suggestion"])
        cp = run_fixed("grad_unused", "torch.autograd.grad(loss, params)",
                       "torch.autograd.grad(loss, params, allow_unused=True)")
        self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_grad_input_without_grad(self):
        f, _ = self.check_input("grad_no_req", "input_does_not_require_grad", "inp")
        self.assertIn("`inp.requires_grad_()` after", f["suggestion"])
        cp = run_fixed("grad_no_req", "    inp = torch.randn(6, 4)  # @grad_no_req_made",
                       "    inp = torch.randn(6, 4)\n    inp.requires_grad_()")
        self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_grad_input_requires_grad_too_late(self):
        f, _ = self.check_input("grad_late", "requires_grad_too_late", "interp")
        self.assertEqual(f["target"]["cut"]["location"]["line"], marker("grad_late_cut"))
        self.assertIn("`interp.requires_grad_()` before the ops that use it", f["suggestion"])
        cp = run_fixed("grad_late", "    d = model(interp)  # @grad_late_cut\n"
                       "    interp.requires_grad_(True)",
                       "    interp.requires_grad_(True)\n    d = model(interp)")
        self.assertEqual(cp.returncode, 0, cp.stderr)

    def check(self, case, reason, op=None, took=None, line_tag=None):
        trace, _ = gtutil.record(SCRIPT, case, expect_fail=True)
        self.trace = trace
        status, doc, text = gtutil.diagnose_both(trace)
        self.assertEqual(status, 1, text)
        self.assertIn("does not require grad", doc["error"]["message"])
        self.assertEqual(len(doc["findings"]), 1, text)
        f = doc["findings"][0]
        self.assertEqual(f["kind"], "root_without_grad", text)
        self.assertIs(f["first_to_fail"], True)
        self.assertEqual(f["target"]["names"][0], "loss")
        cut = f["target"]["cut"]
        self.assertEqual(cut["reason"], reason, text)
        self.assertIn("backward() of loss, which has no grad_fn", text)
        if op:
            self.assertTrue(cut["op"].startswith(op), cut)  # op: a prefix, or several
            self.assertEqual(cut["location"]["line"], marker(line_tag or case + "_cut"), cut)
        if took:
            self.assertEqual(cut["input"]["names"][0], took, cut)
            self.assertIn("took %s" % took, text)
        self.assertNotIn(gtutil.SOURCE + "/", f["suggestion"])
        return f, text

    def test_detach(self):
        f, _ = self.check("detach", "detach", "aten::detach")
        self.assertEqual(f["target"]["cut"]["input"]["dtype"], "float32")
        fixed = "probs = F.softmax(out, dim=1)"
        self.assertIn("`%s`" % fixed, f["suggestion"])
        cp = run_fixed("detach", "probs = F.softmax(out, dim=1).detach()", fixed)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        # graph draws the graph the loss was cut from: the softmax's
        dot = os.path.join(gtutil.tmpdir(), "cut.dot")
        r = subprocess.run([gtutil.GRADTRACE, "graph", self.trace, "-o", dot],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(dot) as fh:
            self.assertIn("SoftmaxBackward0", fh.read())

    def test_data(self):
        f, _ = self.check("data", "data", None, "out")
        self.assertEqual(f["target"]["cut"]["location"]["line"], marker("data_cut"))
        fixed = "loss = F.cross_entropy(out, target)"
        self.assertIn("`%s`" % fixed, f["suggestion"])
        cp = run_fixed("data", "loss = F.cross_entropy(out.data, target)", fixed)
        self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_no_grad_block(self):
        f, text = self.check("no_grad", "no_grad", ("aten::addmm", "aten::linear"))
        self.assertIs(f["target"]["cut"]["grad_mode"], False)
        # the op nearest the loss: the last layer's
        self.assertTrue(f["target"]["cut"]["input"]["names"][0].startswith("model.2."))
        self.assertIn("with grad mode off", text)
        self.assertIn("torch.no_grad()", f["suggestion"])
        cp = run_fixed("no_grad", "    with torch.no_grad():\n        out = model(x)",
                       "    if True:\n        out = model(x)")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        # no graph was built at all: graph says so in one line
        r = subprocess.run([gtutil.GRADTRACE, "graph", self.trace, "-o",
                            os.path.join(gtutil.tmpdir(), "none.dot")],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("has no recorded graph to draw", r.stderr)

    def test_no_grad_decorated_function(self):
        f, _ = self.check("no_grad_fn", "no_grad", ("aten::addmm", "aten::linear"))
        self.assertEqual(f["target"]["cut"]["location"]["function"], "predict")
        cp = run_fixed("no_grad_fn", "@torch.no_grad()\ndef predict", "def predict")
        self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_inference_mode(self):
        # under inference mode a dispatch mode sees aten::linear itself
        f, _ = self.check("inference", "no_grad", ("aten::addmm", "aten::linear"))
        self.assertIn("torch.inference_mode()", f["suggestion"])

    def test_argmax(self):
        f, _ = self.check("argmax", "not_differentiable", "aten::argmax", "out")
        self.assertIn("softmax rather than argmax", f["suggestion"])

    def test_comparison(self):
        f, _ = self.check("compare", "not_differentiable", "aten::gt", None)
        self.assertIn("integer or bool", f["suggestion"])

    def test_loss_from_item(self):
        f, text = self.check("item", "item", "aten::_local_scalar_dense", "loss_i")
        self.assertEqual(f["target"]["cut"]["made_at"]["line"], marker("item_made"))
        self.assertIn("made at", text)
        self.assertIn("use .item() only for logging", f["suggestion"])

    def test_loss_from_numpy(self):
        f, text = self.check("numpy", "item", "aten::detach", "probs")
        self.assertEqual(f["target"]["cut"]["made_at"]["line"], marker("numpy_made"))
        self.assertIn("left at", text)
        self.assertIn("compute the loss with torch ops on probs itself", f["suggestion"])

    def test_frozen_model(self):
        f, text = self.check("frozen", "no_input_requires_grad")
        names = {s["names"][0] for s in f["target"]["cut"]["sources"] if s["names"]}
        self.assertTrue({"model.0.weight", "model.2.weight"} <= names, names)
        self.assertIn("comes from", text)
        self.assertIn("p.requires_grad_(True)", f["suggestion"])
        cp = run_fixed("frozen", "        p.requires_grad = False",
                       "        p.requires_grad = True")
        self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_plain_data(self):
        f, _ = self.check("plain", "no_input_requires_grad")
        names = {s["names"][0] for s in f["target"]["cut"]["sources"] if s["names"]}
        self.assertTrue({"w", "b", "x"} <= names, names)


if __name__ == "__main__":
    unittest.main()
