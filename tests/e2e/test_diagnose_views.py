"""End-to-end tests of the errors PyTorch raises at the in-place op itself
(leaf, view of a leaf, a module parameter, outputs of split/chunk/unbind,
views made under no_grad or inference_mode, views returned by a custom
Function) and of an in-place error the replay cannot pin (a checkpointed
function): each scenario is recorded, diagnosed, and the finding checked
for its kind, its lines, the view's origin and its agreement with PyTorch's
message. Then the fix the finding suggests is applied to a copy of the
script (the suggested line replaces the raising one, or the suggested
`x = x.clone()` goes before it) and the copy must run without the error.

Env: GRADTRACE (the built command), GT_SOURCE_DIR, GT_BUILD_DIR.
"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402


marker = gtutil.marker
diagnose = gtutil.diagnose_both


def apply_fix(script, line, suggestion, args=()):
    """Apply the suggestion at `line` of a copy of `script`; run the copy.
    Returns the CompletedProcess."""
    with open(script) as f:
        lines = f.read().split("\n")
    old = lines[line - 1]
    indent = old[:len(old) - len(old.lstrip())]
    snippets = [s for s in re.findall(r"`([^`]+)`", suggestion)
                if s.strip() != "with torch.no_grad():"]
    clone = re.search(r"\b([A-Za-z_][\w.]*(?:\[[^\]]*\])*) = \1\.clone\(\)", suggestion)
    if suggestion.startswith("use inplace=False"):
        lines[line - 1] = old.replace("inplace=True", "inplace=False")
    elif snippets and "inside that block" not in suggestion:
        lines[line - 1] = indent + snippets[0]
    elif clone:
        lines.insert(line - 1, indent + clone.group(0))
    else:
        raise AssertionError("no fix to apply in: " + suggestion)
    path = os.path.join(gtutil.tmpdir(), "fixed_" + os.path.basename(script))
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return gtutil.run_plain(path, *args)


class RaisedAtOp(unittest.TestCase):
    def run_case(self, name, args=(), kind=None, origin_op=None, fix=True, view=None,
                 tag="inplace"):
        script = gtutil.scenario(name)
        trace, cp = gtutil.record(script, *args, expect_fail=True)
        status, doc, text = diagnose(trace)
        self.assertEqual(status, 1, text)
        self.assertEqual(len(doc["findings"]), 1, doc["findings"])
        f = doc["findings"][0]
        self.assertEqual(f["kind"], kind)
        self.assertIn("[%s, first to fail]" % kind, text)
        self.assertIs(f["first_to_fail"], True)
        line = marker(script, tag)
        self.assertEqual(f["location"]["line"], line)
        self.assertEqual(doc["error"]["location"]["line"], line)
        # The refused write is in mutations[], like every kind's writes.
        self.assertEqual(len(f["mutations"]), 1)
        self.assertIs(f["mutations"][0]["attempted"], True)
        self.assertEqual(f["mutations"][0]["location"]["line"], line)
        if origin_op:
            o = f["view"]["origin"]
            self.assertTrue(o["op"].startswith(origin_op), o)
            self.assertEqual(o["location"]["line"], marker(script, view))
            self.assertIn("view from   ", text)
            self.assertTrue(f["view"]["names"], f["view"])
        # Suggestion paths are shown like every other path: relative.
        self.assertNotIn(gtutil.SOURCE + "/", f["suggestion"])
        self.assertNotIn(gtutil.SOURCE + "/", text)
        if fix:
            cp = apply_fix(script, line, f["suggestion"], args)
            self.assertEqual(cp.returncode, 0, f["suggestion"] + "\n" + cp.stderr)
            self.assertIn("ok", cp.stdout)
        return f, doc, text

    def test_multi_output_views(self):
        for how, op in (("chunk", "aten::split"), ("split", "aten::split"),
                        ("unbind", "aten::unbind")):
            with self.subTest(how=how):
                f, doc, _ = self.run_case("diag_view_multi.py", (how,),
                                          "view_multi_output_inplace", op,
                                          view="view_" + how)
                self.assertIn("returns multiple views", doc["error"]["message"])
                self.assertIs(f["matches_error"], True)
                self.assertEqual(f["view"]["variable"], "right")
                self.assertIn("right = right.clamp(min=0)", f["suggestion"])
        # The fixed script runs clean.
        self.assertEqual(gtutil.run_plain(gtutil.scenario("diag_view_multi.py"),
                                          "fixed").returncode, 0)

    def test_no_grad_view(self):
        f, doc, _ = self.run_case("diag_view_nograd.py", ("no_grad",), "view_no_grad_inplace",
                                  "aten::slice", fix=False,
                                  view="view_no_grad")
        self.assertIs(f["view"]["origin"]["grad_mode"], False)
        self.assertIn("created in no_grad mode", doc["error"]["message"])
        self.assertIn("outside the torch.no_grad() block", f["suggestion"])
        self.assertIn(":%d)" % marker(gtutil.scenario("diag_view_nograd.py"), "view_no_grad"),
                      f["suggestion"])
        # The fix: the view made outside the block.
        self.assertEqual(gtutil.run_plain(gtutil.scenario("diag_view_nograd.py"),
                                          "fixed").returncode, 0)

    def test_inference_mode_view(self):
        f, doc, _ = self.run_case("diag_view_nograd.py", ("inference",),
                                  "view_inference_inplace", "aten::view", fix=False,
                                  view="view_inference")
        self.assertIn("created in inference mode", doc["error"]["message"])
        self.assertIn("outside the torch.inference_mode() block", f["suggestion"])

    def test_custom_function_view(self):
        # The view's origin is the op inside forward that made it.
        f, doc, _ = self.run_case("diag_view_custom.py", (), "view_custom_function_inplace",
                                  "aten::view", view="view_inner")
        self.assertIn("created inside a custom Function", doc["error"]["message"])
        self.assertEqual(f["view"]["origin"]["location"]["function"], "Identity.forward")
        self.assertIn("out = out.clone()", f["suggestion"])

    def test_leaf_named_as_written(self):
        """The leaf or its view named the way the raising line writes it
        (`v1[0]`, `x[:, 1]`, `lin.weight[0]`, `seq[0].weight`), also inside a
        functional in-place call; the fix applied runs clean."""
        script = gtutil.scenario("diag_leaf_expr.py")
        cases = (  # case, expression, the leaf's own name, a view of it
            ("list", "v1[0]", "w", False), ("slice", "x[:, 1]", "x", True),
            ("param_row", "lin.weight[0]", "lin.weight", True),
            ("submodule", "seq[0].weight", None, False),
            ("relu_list", "v1[0]", "w", False), ("relu_slice", "x[:, 1]", "x", True))
        for case, expr, leaf, view in cases:
            with self.subTest(case=case):
                line = marker(script, "inplace-" + case)
                f, doc, text = self.run_case("diag_leaf_expr.py", (case,), "leaf_inplace",
                                             tag="inplace-" + case)
                self.assertEqual(f["leaf"]["expression"], expr, f)
                if view:  # an unnamed view, made on the raising line
                    o = f["view"]["origin"]
                    self.assertEqual((o["op"], o["location"]["line"]),
                                     ("aten::select.int", line), o)
                    self.assertIn("a view of", doc["error"]["message"])
                    self.assertIn("in-place operation on %s, a view of %s, a leaf"
                                  % (expr, leaf), text)
                else:
                    self.assertRegex(text, r"in-place operation on %s( \([^)]*\))?, a leaf"
                                     % re.escape(expr))
                if leaf and not view and leaf in f["leaf"]["names"]:
                    self.assertIn("on %s (%s" % (expr, leaf), text)
                # the fix names the expression too where it rebinds one
                if case == "list":
                    self.assertIn("v1[0] = v1[0].clone()", f["suggestion"])
                # a module's parameter is never rebound to a plain tensor
                self.assertNotRegex(f["suggestion"], r"\.weight = ")
                if case.startswith("relu"):
                    self.assertIn("(%s.clone())" % expr, f["suggestion"])

    def test_module_parameter(self):
        f, doc, text = self.run_case("diag_leaf_param.py", (), "leaf_inplace")
        self.assertEqual(f["leaf"]["names"][0], "self.embedding.weight")
        # Never rebind a Parameter attribute to a plain tensor.
        self.assertNotIn("self.embedding.weight = ", f["suggestion"])
        self.assertIn("with torch.no_grad(): self.embedding.weight[PAD] = 0.0", f["suggestion"])
        self.assertIn("padding_idx", f["suggestion"])

    def test_view_of_leaf(self):
        f, doc, text = self.run_case("diag_view_leaf.py", (), "leaf_inplace")
        self.assertIn("a view of a leaf Variable", doc["error"]["message"])
        script = gtutil.scenario("diag_view_leaf.py")
        self.assertTrue(f["view"]["origin"]["op"].startswith("aten::select"), f["view"])
        self.assertEqual(f["view"]["origin"]["location"]["line"], marker(script, "view"))
        self.assertEqual(f["view"]["variable"], "row")
        self.assertIn("view from   ", text)
        self.assertIn("with torch.no_grad(): row.fill_(1.0)", f["suggestion"])


class Unexplained(unittest.TestCase):
    def test_checkpoint(self):
        """A checkpoint's input changed after the call: once unexplained,
        now pinned (checkpoint_input slots), one finding at the call's line."""
        script = gtutil.scenario("diag_checkpoint.py")
        trace, _ = gtutil.record(script, expect_fail=True)
        status, doc, text = diagnose(trace)
        self.assertEqual(status, 1, text)
        self.assertIn("modified by an inplace operation", doc["error"]["message"])
        self.assertEqual(len(doc["findings"]), 1, doc["findings"])
        f = doc["findings"][0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved")
        self.assertIs(f["first_to_fail"], True)
        self.assertIs(f["matches_error"], True)
        self.assertEqual(f["backward"]["location"]["line"], marker(script, "backward"))
        self.assertEqual(f["node"]["location"]["line"], marker(script, "checkpoint"))
        self.assertIn("h", f["saved"]["names"])
        self.assertEqual(f["mutations"][0]["location"]["line"], marker(script, "inplace"))
        cp = apply_fix(script, marker(script, "inplace"), f["suggestion"])
        self.assertEqual(cp.returncode, 0, f["suggestion"] + "\n" + cp.stderr)

    def test_custom_function_saved_output(self):
        """ctx.save_for_backward(result), then result changed by the caller:
        whatever the replay sees of the Function, diagnose is not silent."""
        script = gtutil.scenario("diag_custom_saved.py")
        trace, _ = gtutil.record(script, expect_fail=True)
        status, doc, text = diagnose(trace)
        self.assertEqual(status, 1, text)
        self.assertIn("which is output 0 of MyExp", doc["error"]["message"])
        f = doc["findings"][0]
        if f["kind"] == "unexplained":
            self.assertEqual([c["names"][0] for c in f["candidates"]], ["y"])
            self.assertEqual(f["mutations"][0]["location"]["line"], marker(script, "inplace"))
            cp = apply_fix(script, marker(script, "inplace"), f["suggestion"])
            self.assertEqual(cp.returncode, 0, f["suggestion"] + "\n" + cp.stderr)
        else:  # the Function's saved tensors recorded: pinned, at the caller's line
            self.assertEqual(f["kind"], "inplace_invalidated_saved")
            self.assertIs(f["matches_error"], True)
            self.assertEqual(f["node"]["location"]["line"], marker(script, "call"))
            self.assertEqual(f["mutations"][0]["location"]["line"], marker(script, "inplace"))


if __name__ == "__main__":
    unittest.main()
