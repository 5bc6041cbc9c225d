"""No fixed buffer cuts what a trace holds (issue 14, item 5): a saved
tensor of 70 dimensions, variable names of over 200 characters and source
lines of over 700 characters reach the diagnosis whole, in the text and in
--json, the suggestion included; the finding still matches PyTorch's error.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("diag_bounds.py")
END = "END-OF-THE-LONG-LINE"


def tagged(case, tag):
    """(line number, text without indentation and comment) of the line
    tagged `# @tag` in the branch of `case`."""
    with open(SCRIPT) as f:
        lines = f.read().split("\n")
    start = next(i for i, l in enumerate(lines) if '"%s"' % case in l and "case ==" in l)
    for i in range(start, len(lines)):
        if "# @" + tag in lines[i]:
            return i + 1, lines[i].split("  # @")[0].strip()
    raise AssertionError((case, tag))


def diagnose(trace, *opts):
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", *opts, trace], capture_output=True,
                       text=True, timeout=300)
    return r


def record(case, adapter=None):
    env = dict(os.environ)
    if adapter:
        env["GRADTRACE_ADAPTER"] = adapter
    return gtutil.record(SCRIPT, case, expect_fail=True, env=env)


def error_line(stdout):
    error = [l for l in stdout.splitlines() if l.startswith("error:")]
    return error[0] if error else ""


class ManyDims(unittest.TestCase):
    def check(self, adapter):
        trace, cp = record("dims", adapter)
        msg = gtutil.one(gtutil.connect(trace), "SELECT message FROM errors")
        m = re.search(r"\[torch\.FloatTensor \[([\d, ]*)\]\]", msg)
        self.assertIsNotNone(m, msg)
        shape = [int(x) for x in m.group(1).split(",")]
        self.assertEqual(len(shape), 70)
        f = gtutil.only_finding(self, trace, "inplace_invalidated_saved")
        self.assertTrue(f["first_to_fail"])
        self.assertTrue(f["matches_error"])
        self.assertEqual(f["saved"]["shape"], shape)
        self.assertNotIn("error_shape", f["saved"])
        self.assertEqual([x["location"]["line"] for x in f["mutations"]],
                         [tagged("dims", "mutation")[0]])
        text = diagnose(trace).stdout
        self.assertIn("(float32 [%s])" % ",".join(map(str, shape)), text)
        self.assertIn("matches the error PyTorch raised", text)

    def test_dispatch_adapter(self):
        self.check("dispatch")

    @unittest.skipUnless(gtutil.adapter() == "engine", "engine adapter not built")
    def test_engine_adapter(self):
        self.check("engine")


class LongNamesAndLines(unittest.TestCase):
    def run_case(self, case, kind):
        trace, cp = record(case)
        f = gtutil.only_finding(self, trace, kind)
        self.assertTrue(f["first_to_fail"])
        line, code = tagged(case, "mutation")
        self.assertGreater(len(code), 700)
        self.assertTrue(code.endswith(END + '"))'), code[-40:])
        name = code.split(".")[0]
        self.assertGreater(len(name), 200)
        text = diagnose(trace).stdout
        return f, name, line, code, text

    def test_saved_tensor(self):
        f, name, line, code, text = self.run_case("long", "inplace_invalidated_saved")
        self.assertTrue(f["matches_error"])
        self.assertIn(name, f["saved"]["names"])
        self.assertEqual(f["mutations"][0]["location"]["line"], line)
        self.assertEqual(f["mutations"][0]["location"]["code"].strip().split("  # @")[0],
                         code)
        # the whole line, rewritten out of place, in the suggestion
        fix = "%s = %s" % (name, code.replace(".mul_(", ".mul(", 1))
        self.assertIn("`%s`" % fix, f["suggestion"])
        self.assertIn(fix, text)
        self.assertIn("%s (float32 [4])" % name, text)

    def test_leaf(self):
        f, name, line, code, text = self.run_case("leaf", "leaf_inplace")
        self.assertIn(name, f["leaf"]["names"])
        self.assertEqual(f["mutations"][0]["location"]["line"], line)
        self.assertIn("`with torch.no_grad(): %s`" % code, f["suggestion"])
        self.assertIn("%s = %s.clone()" % (name, name), f["suggestion"])
        self.assertIn(code, text)

    def test_view(self):
        f, name, line, code, text = self.run_case("view", "view_multi_output_inplace")
        self.assertTrue(f["matches_error"])
        fix = "%s = %s" % (name, code.replace(".mul_(", ".mul(", 1))
        self.assertIn("`%s`" % fix, f["suggestion"])
        self.assertIn("%s = %s.clone()" % (name, name), f["suggestion"])
        self.assertIn(fix, text)


if __name__ == "__main__":
    unittest.main()
