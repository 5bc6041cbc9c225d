"""No fixed array bounds a Python stack (issue 14, item 5): a 600-deep
recursion is recorded whole, every frame of it, by both adapters, and the
diagnosis names the line at depth 450 that wrote in place; two stacks equal
in their inner 300 frames and different beyond them are two stacks.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("deep_stacks.py")
DEPTH, MUTATE_AT, TWIN_DEPTH = 600, 450, 300


def line_where(test, what):
    """The number of the first line of the scenario for which test(line
    stripped) holds."""
    with open(SCRIPT) as f:
        for i, line in enumerate(f, 1):
            if test(line.strip()):
                return i
    raise AssertionError("no %s in %s" % (what, SCRIPT))


def line_of(tag):
    """The line tagged `# @tag`."""
    return line_where(lambda l: l.endswith("# @" + tag), "@" + tag)


def call_line():
    """The line of `down`'s recursive call."""
    return line_where(lambda l: l.startswith("return down(d + 1, y)"), "call of down")


def inner_call_line():
    """The line of `inner`'s recursive call."""
    return line_where(lambda l: l == "inner(d + 1, t)", "call of inner")


def chain(db, stack):
    """The frames of a stack, innermost first: (file basename, function,
    line), following stacks.parent up to the root."""
    return [(os.path.basename(r[0]), r[1], r[2]) for r in db.execute(
        "WITH RECURSIVE c(id, parent, frame, n) AS ("
        " SELECT id, parent, frame, 0 FROM stacks WHERE id = ?"
        " UNION ALL SELECT s.id, s.parent, s.frame, c.n + 1"
        " FROM stacks s JOIN c ON s.id = c.parent)"
        " SELECT f.text, fn.text, fr.line FROM c JOIN frames fr ON fr.id = c.frame"
        " JOIN strings f ON f.id = fr.file JOIN strings fn ON fn.id = fr.function"
        " ORDER BY c.n", (stack,))]


def op_stacks(db, tag):
    """The stacks of the mul_ ops whose user frame is the line tagged tag,
    in the order they ran."""
    return [r[0] for r in db.execute(
        "SELECT o.stack FROM ops o JOIN strings s ON s.id = o.name"
        " JOIN stacks st ON st.id = o.stack JOIN frames fr ON fr.id = st.user_frame"
        " WHERE s.text LIKE 'aten::mul\\_%' ESCAPE '\\' AND fr.line = ? ORDER BY o.seq",
        (line_of(tag),))]


def record(case, adapter, *args):
    env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
    return gtutil.record(SCRIPT, case, *args, expect_fail=case == "deep", env=env)


NAME = os.path.basename(SCRIPT)


class DeepRecursion(gtutil.BothAdapters, unittest.TestCase):
    def check(self, adapter):
        trace, cp = record("deep", adapter)
        db = gtutil.connect(trace)
        top = (NAME, "<module>", line_of("top"))
        rec = (NAME, "down", call_line())
        # the op that wrote in place, 450 frames down: all 451 frames
        stacks = op_stacks(db, "mutation")
        self.assertEqual(len(stacks), 1, stacks)
        frames = chain(db, stacks[0])
        self.assertEqual(len(frames), MUTATE_AT + 1)
        self.assertEqual(frames, [(NAME, "down", line_of("mutation"))] +
                         [rec] * (MUTATE_AT - 1) + [top])
        # the backward call at the bottom, and its error: all 601 frames
        want = [(NAME, "down", line_of("backward"))] + [rec] * (DEPTH - 1) + [top]
        bstack = gtutil.one(db, "SELECT stack FROM backward_calls")
        self.assertEqual(chain(db, bstack), want)
        estack = gtutil.one(db, "SELECT stack FROM errors")
        self.assertEqual([f for f in chain(db, estack) if f[0] == NAME], want)
        # the diagnosis names the line that wrote, and where backward ran
        f = gtutil.only_finding(self, trace, "inplace_invalidated_saved")
        self.assertTrue(f["matches_error"])
        self.assertEqual([m["location"]["line"] for m in f["mutations"]],
                         [line_of("mutation")])
        text = subprocess.run([gtutil.GRADTRACE, "diagnose", trace], capture_output=True,
                              text=True, timeout=300).stdout
        self.assertIn("y.mul_(2)", text)


class TwinStacks(gtutil.BothAdapters, unittest.TestCase):
    def check(self, adapter):
        trace, cp = record("twin", adapter)
        db = gtutil.connect(trace)
        stacks = op_stacks(db, "twin")
        self.assertEqual(len(stacks), 2, stacks)
        self.assertNotEqual(stacks[0], stacks[1])
        rec = [(NAME, "inner", inner_call_line())] * (TWIN_DEPTH - 1)
        bottom = [(NAME, "inner", line_of("twin"))]
        for stack, via in zip(stacks, ("via_a", "via_b")):
            frames = chain(db, stack)
            self.assertEqual(frames[:TWIN_DEPTH], bottom + rec)
            self.assertEqual(frames[TWIN_DEPTH], (NAME, via, line_of(via)), via)
            self.assertEqual(len(frames), TWIN_DEPTH + 2)


class WideFrame(gtutil.BothAdapters, unittest.TestCase):
    """A frame larger than a capture record: the stack is kept, every
    frame of it; the engine adapter cuts the source line's text to fit (at
    a character's start), the dispatch adapter keeps it whole."""

    def check(self, adapter):
        d = tempfile.mkdtemp(dir=gtutil.tmpdir())
        trace, cp = record("wide", adapter, d)
        with open(os.path.join(d, "wide_line_module.py"), encoding="utf-8") as f:
            line = f.read().split("\n")[1].strip()
        db = gtutil.connect(trace)
        stack = gtutil.one(db, "SELECT o.stack FROM ops o JOIN strings s ON s.id = o.name"
                           " WHERE s.text LIKE 'aten::mul\\_%' ESCAPE '\\'")
        frames = chain(db, stack)
        self.assertEqual(frames, [("wide_line_module.py", "scale", 2),
                                  (NAME, "<module>", line_of("wide"))])
        code = gtutil.one(db, "SELECT c.text FROM stacks s JOIN frames fr ON fr.id = s.frame"
                          " JOIN strings c ON c.id = fr.code WHERE s.id = ?", stack)
        self.assertTrue(line.startswith(code), code[:40])
        if adapter == "dispatch":
            self.assertEqual(code, line)
        else:
            self.assertGreater(len(code.encode()), 60000)


if __name__ == "__main__":
    unittest.main()
