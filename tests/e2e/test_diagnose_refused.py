"""End-to-end tests of the in-place ops PyTorch refuses for what the written
tensor is, not for what autograd saved (scenarios/diag_refused.py): an
expanded tensor (by an operator, a method, an in-place ReLU module), an input
overlapping the written tensor, an inference tensor changed outside
inference mode, an int64 or bool tensor given a float result, a tensor
smaller than the broadcast result, detach_() of a view, resize_() of a
tensor that requires grad. Each case is recorded and diagnosed, and the
finding checked as a user reads it: its kind, the variable, the raising
line, the line and op that made the tensor, its agreement with PyTorch's
message; then the fix it suggests is applied to a copy of the script, which
must run through. A run whose error is outside the family says so.

Env: GRADTRACE (the built command), GT_SOURCE_DIR, GT_BUILD_DIR.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("diag_refused.py")


def marker(tag):
    return gtutil.marker(SCRIPT, tag)


def run_fixed(case, edit):
    """Run a copy of the script with edit(lines) applied, for `case`."""
    with open(SCRIPT) as f:
        lines = f.read().split("\n")
    edit(lines)
    path = os.path.join(gtutil.tmpdir(), "fixed_%s.py" % case)
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return gtutil.run_plain(path, case)


def replace_line(line, text):
    """An edit putting `text` in place of line `line`, at its indentation."""
    def edit(lines):
        old = lines[line - 1]
        lines[line - 1] = old[:len(old) - len(old.lstrip())] + text
    return edit


def insert_after(line, text, before=False):
    """An edit inserting `text` after line `line` (before it if `before`),
    at that line's indentation."""
    def edit(lines):
        old = lines[line - 1]
        lines.insert(line - 1 if before else line, old[:len(old) - len(old.lstrip())] + text)
    return edit


def replace_in_line(line, old, new):
    def edit(lines):
        assert old in lines[line - 1], (lines[line - 1], old)
        lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return edit


class Refused(unittest.TestCase):
    def check(self, case, kind, name, made_op, snippet, how, matches=True):
        """Record `case`, check its one finding, and that applying `snippet`
        (which the suggestion must hold between backquotes) the way `how`
        says ("line": in place of the raising line, "after_made": after the
        line that made the tensor, "before": before the raising line, (old,
        new): within the raising line)
        makes the script run through."""
        trace, _ = gtutil.record(SCRIPT, case, expect_fail=True)
        status, doc, text = gtutil.diagnose_both(trace)
        self.assertEqual(status, 1, text)
        self.assertEqual(len(doc["findings"]), 1, text)
        f = doc["findings"][0]
        line, made = marker(case), marker(case + "_made")
        self.assertEqual(f["kind"], kind, text)
        self.assertIn("[%s, first to fail]" % kind, text)
        self.assertIs(f["first_to_fail"], True)
        self.assertEqual(f["location"]["line"], line)
        self.assertEqual(doc["error"]["location"]["line"], line)
        # the refused write, attempted, at the raising line
        self.assertEqual(len(f["mutations"]), 1)
        self.assertIs(f["mutations"][0]["attempted"], True, f["mutations"])
        self.assertEqual(f["mutations"][0]["location"]["line"], line)
        self.assertNotIn("modified at", text)
        t = f["target"]
        self.assertIn(name, [t["variable"], t["expression"]] + t["names"], t)
        self.assertTrue(t["origin"]["op"].startswith(made_op), t["origin"])
        self.assertEqual(t["origin"]["location"]["line"], made, t["origin"])
        self.assertIn("made at     scenarios/diag_refused.py:%d" % made,
                      text.replace(os.path.join("tests", "e2e", ""), ""))
        if matches == "unknown":
            # nothing in the trace says what PyTorch checked
            self.assertIs(f["matches_error"], None, text)
        else:
            self.assertIs(f["matches_error"], matches, text)
        if matches is True:
            self.assertIn("matches the error PyTorch raised", text)
        self.assertIn("`%s`" % snippet, f["suggestion"])
        self.assertNotIn(gtutil.SOURCE + "/", f["suggestion"])
        if how == "line":
            edit = replace_line(line, snippet)
        elif how == "after_made":
            edit = insert_after(made, snippet)
        elif how == "before":
            edit = insert_after(line, snippet, before=True)
        else:
            edit = replace_in_line(line, how[0], how[1])
        cp = run_fixed(case, edit)
        self.assertEqual(cp.returncode, 0, f["suggestion"] + "\n" + cp.stderr)
        self.assertIn("ok", cp.stdout)
        return f, doc, text

    def test_expanded_tensor_operator(self):
        f, doc, text = self.check("expand_op", "inplace_overlap", "bias", "aten::expand",
                                  "bias = bias + (h)", "line")
        self.assertIn("bias = bias.clone()", f["suggestion"])
        self.assertIn("in-place operation on bias, whose elements share memory "
                      "(aten::expand)", text)
        # the other fix works too
        cp = run_fixed("expand_op", insert_after(marker("expand_op_made"),
                                                 "bias = bias.clone()"))
        self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_expanded_tensor_method(self):
        self.check("broadcast_method", "inplace_overlap", "scale", "aten::expand",
                   "scale = scale.mul(2)", "line")

    def test_expanded_tensor_inplace_module(self):
        # nn.ReLU(inplace=True) writes it inside torch: the user's line is
        # the module call, and the fix is a copy where the tensor is made
        self.check("relu_module", "inplace_overlap", "pos", "aten::expand",
                   "pos = pos.clone()", "after_made")

    def test_expanded_buffer(self):
        # the module's buffer, written through self.running_wm in forward,
        # made by the expand in __init__
        f, _, _ = self.check("buffer", "inplace_overlap", "self.running_wm", "aten::expand",
                             "self.running_wm = self.running_wm.clone()", "after_made")
        self.assertEqual(f["target"]["origin"]["location"]["function"], "IterNorm.__init__")
        self.assertIn("add .clone() after the expand", f["suggestion"])

    def test_mask_indexing_its_own_tensor(self):
        f, _, _ = self.check("mask_self_index", "inplace_input_overlap", "indices",
                             "aten::ones", "indices.clone()",
                             ("indices[indices]", "indices[indices.clone()]"))
        self.assertEqual(f["target"]["other"]["names"][0], "indices")

    def test_input_overlapping_written_tensor(self):
        f, _, text = self.check("input_overlap", "inplace_input_overlap", "x[1:]",
                                "aten::slice", "shifted.clone()", ("shifted", "shifted.clone()"))
        self.assertEqual(f["target"]["other"]["names"][0], "shifted")
        self.assertIn("reading shifted, an input that shares its memory", text)
        self.assertIn("`x[1:] = x[1:] + (shifted)`", f["suggestion"])
        cp = run_fixed("input_overlap", replace_line(marker("input_overlap"),
                                                     "x[1:] = x[1:] + (shifted)"))
        self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_inference_tensor(self):
        f, _, text = self.check("inference", "inplace_inference_tensor", "cache",
                                "aten::", "cache = cache.clone()", "before")
        self.assertIs(f["target"]["origin"]["grad_mode"], False)
        self.assertIn("with grad mode off", text)

    def test_int_tensor_float_result(self):
        f, _, text = self.check("dtype_long", "inplace_dtype", "labels", "aten::lift_fresh",
                                "labels = labels * (0.9)", "line")
        self.assertIn("labels is int64", f["suggestion"])
        self.assertIn("gives float32", f["suggestion"])
        self.assertIn("in-place operation on labels (int64)", text)

    def test_bool_tensor_float_result(self):
        f, _, _ = self.check("dtype_bool", "inplace_dtype", "mask", "aten::gt",
                             "mask = mask * (2.5)", "line")
        self.assertIn("mask is bool", f["suggestion"])

    def test_broadcast_larger_than_written(self):
        f, _, text = self.check("shape", "inplace_shape", "acc", "aten::zeros",
                                "acc = acc + (delta)", "line")
        self.assertEqual(f["target"]["other"]["names"][0], "delta")
        self.assertEqual(f["target"]["shape"], [3])
        self.assertIn("in-place operation on acc (shape [3])", text)

    def test_broadcast_method(self):
        self.check("shape_method", "inplace_shape", "total", "aten::zeros",
                   "total = total.add(losses)", "line")

    def test_detach_of_view(self):
        f, _, text = self.check("detach_view", "detach_view_inplace", "v", "aten::select",
                                "v = v.detach()", "line")
        self.assertIn("detach_() on v, a view", text)

    def test_resize_of_tensor_requiring_grad(self):
        # torch.randn(..., requires_grad=True) sets requires_grad after the
        # op the engine adapter records: whether it did is not in the trace
        f, _, text = self.check("resize", "resize_requires_grad", "w", "aten::randn",
                                "w = w.reshape(2, 2)", "line",
                                matches=True if gtutil.adapter() == "dispatch" else "unknown")
        self.assertIn("resize_() on w, a tensor that requires grad", text)

    def test_error_outside_the_family(self):
        path = os.path.join(gtutil.tmpdir(), "no_grad_fn.py")
        with open(path, "w") as f:
            f.write("import torch\nw = torch.randn(3, 4, requires_grad=True)\n"
                    "y = w @ torch.randn(3, 4)\n")
        trace, _ = gtutil.record(path, expect_fail=True)
        status, doc, text = gtutil.diagnose_both(trace)
        self.assertEqual(status, 0, text)
        self.assertEqual(doc["findings"], [])
        self.assertIn("the run's error is not one of the in-place errors diagnose explains",
                      text)


if __name__ == "__main__":
    unittest.main()
