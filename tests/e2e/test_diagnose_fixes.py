"""Suggestions that work: for each in-place mistake of
tests/e2e/scenarios/diag_fixes.py (an in-place activation, an optimizer step
between forward and backward (a foreach one too), a parameter clipped or
lerped by hand, backward twice, a constant updated in place, an assignment
into a saved tensor, an in-place method with and without an out-of-place
form, an augmented assignment),
diagnose's suggestion is applied to a copy of the script, the way its text
says, and the copy must run without the error. The fixes of the errors
raised at the op and of unexplained errors are applied in
test_diagnose_views.py.

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

SCRIPT = gtutil.scenario("diag_fixes.py")

with open(SCRIPT) as _f:
    LINES = _f.read().split("\n")


def marker(mode, tag):
    """Line of `# @tag` inside the branch of `mode`."""
    start = [i for i, l in enumerate(LINES) if '"%s"' % mode in l and "mode ==" in l][0]
    for i in range(start + 1, len(LINES)):
        if "mode ==" in LINES[i]:
            break
        if LINES[i].rstrip().endswith("# @" + tag):
            return i + 1
    raise AssertionError((mode, tag))


def indent_of(line):
    return line[:len(line) - len(line.lstrip())]


def apply(mode, f):
    """The script with the suggestion of finding f applied, as its text says."""
    s = f["suggestion"]
    lines = list(LINES)
    mut = marker(mode, "mutate") if mode != "twice" else None
    if s.startswith("use inplace=False"):
        return [l.replace("inplace=True", "inplace=False") for l in lines]
    if s.startswith("move optimizer.step() after the last backward()") or \
            s.startswith("move the in-place update of "):
        step = lines.pop(mut - 1)
        bw = marker(mode, "backward") - 1  # shifted up by the pop
        lines.insert(bw, indent_of(step) + step.strip())
        return lines
    if s.startswith("pass retain_graph=True to the earlier backward()"):
        line = int(re.search(r"diag_fixes\.py:(\d+)", s).group(1))
        lines[line - 1] = lines[line - 1].replace("backward()", "backward(retain_graph=True)")
        return lines
    code = re.findall(r"`([^`]+)`", s)
    if code:
        lines[mut - 1] = indent_of(lines[mut - 1]) + code[0]
        return lines
    clone = re.search(r"\b(\w+) = \1\.clone\(\)(\.detach\(\))?", s)
    if clone:
        lines.insert(mut - 1, indent_of(lines[mut - 1]) + clone.group(0))
        return lines
    raise AssertionError("cannot apply: " + s)


class Fixes(unittest.TestCase):
    def check(self, mode, kind, must):
        trace, cp = gtutil.record(SCRIPT, mode, expect_fail=True)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace],
                           capture_output=True, text=True, timeout=120, cwd=gtutil.SOURCE)
        self.assertEqual(r.returncode, 1, r.stderr)
        fs = [f for f in json.loads(r.stdout)["findings"] if f["first_to_fail"]]
        self.assertEqual(len(fs), 1)
        f = fs[0]
        self.assertEqual(f["kind"], kind)
        self.assertIn(must, f["suggestion"])
        self.assertNotIn(gtutil.SOURCE + "/", f["suggestion"])
        path = os.path.join(gtutil.tmpdir(), "fixed_%s.py" % mode)
        with open(path, "w") as out:
            out.write("\n".join(apply(mode, f)))
        run = gtutil.run_plain(path, mode)
        self.assertEqual(run.returncode, 0, f["suggestion"] + "\n" + run.stderr)
        self.assertIn("ok", run.stdout)
        # And the fixed script records clean.
        trace, _ = gtutil.record(path, mode)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", trace], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_inplace_activation(self):
        self.check("relu", "inplace_invalidated_saved", "inplace=False")

    def test_optimizer_step(self):
        self.check("step", "inplace_invalidated_saved", "move optimizer.step()")

    def test_parameter_clipped(self):
        # weight clipping between forward and backward: an update by hand,
        # not the optimizer's step
        self.check("clip", "inplace_invalidated_saved",
                   "move the in-place update of model.weight "
                   "(with torch.no_grad(): model.weight.clamp_(-0.1, 0.1) at ")

    def test_foreach_optimizer_step(self):
        # Adam(foreach=True) updates through _foreach_ ops under torch/optim
        self.check("adam", "inplace_invalidated_saved", "move optimizer.step()")

    def test_foreach_update_by_hand(self):
        # an EMA's torch._foreach_lerp_ called by the script is no step
        self.check("ema", "inplace_invalidated_saved",
                   "(with torch.no_grad(): torch._foreach_lerp_(list(model.parameters()), ")

    def test_backward_twice(self):
        self.check("twice", "backward_twice", "retain_graph=True")

    def test_constant(self):
        self.check("constant", "inplace_invalidated_saved", "scale = scale.clone().detach()")

    def test_assignment(self):
        self.check("assign", "inplace_invalidated_saved", "y = y.clone()")

    def test_method(self):
        self.check("method", "inplace_invalidated_saved", "`y = y.add(1)`")

    def test_method_with_out_of_place_form(self):
        # masked_fill_ written as a method call: its out-of-place method,
        # not a clone
        self.check("masked", "inplace_invalidated_saved",
                   "`y = y.masked_fill(y > 0.4, 0.0)`")

    def test_method_without_out_of_place_form(self):
        # there is no Tensor.copy: a clone before the copy_
        self.check("copy", "inplace_invalidated_saved", "y = y.clone()")

    def test_augmented(self):
        self.check("augmented", "inplace_invalidated_saved", "`y = y * (2)`")


if __name__ == "__main__":
    unittest.main()
