"""No fixed array bounds what a trace holds (issue 14, item 5): a variable
name of thousands of characters, and error messages and exception type
names of hundreds of thousands, are recorded whole by both adapters.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("long_texts.py")
PIECE = "%07d \u00e9\u00e8 piece|"


def text(n):
    """The scenario's text(n)."""
    return "".join(PIECE % i for i in range(n // len(PIECE % 0) + 1))[:n]


def long_name(n):
    """The scenario's long_name(n)."""
    return ("v" + text(n).replace(" ", "_").replace("|", "_"))[:n]


def record(case, n, adapter):
    env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
    trace, cp = gtutil.record(SCRIPT, case, n, expect_fail=True, env=env)
    return trace, cp


class LongNames(gtutil.BothAdapters, unittest.TestCase):
    """A name just over what the engine adapter once kept (4,000 bytes), and
    one of several capture records (each of two-byte characters too)."""

    def check(self, adapter):
        for n in (5000, 150000):
            with self.subTest(n=n):
                name = long_name(n)
                self.assertEqual(len(name), n)
                trace, cp = record("name", n, adapter)
                db = gtutil.connect(trace)
                got = [r[0] for r in db.execute(
                    "SELECT DISTINCT s.text FROM names n JOIN strings s ON s.id = n.name"
                    " WHERE length(s.text) > 100")]
                self.assertEqual([len(g) for g in got], [n])
                self.assertTrue(got[0] == name, "the name differs")
                f = gtutil.only_finding(self, trace, "inplace_invalidated_saved")
                self.assertTrue(name in f["saved"]["names"], "whole name not named")


class LongErrors(gtutil.BothAdapters, unittest.TestCase):
    """An error message of 200,000 characters raised in backward, and an
    exception type name of as many ending the run, each in several capture
    records."""

    def check_rows(self, trace, type_name, message):
        db = gtutil.connect(trace)
        rows = [(r[0], r[1]) for r in db.execute(
            "SELECT s.text, e.message FROM errors e JOIN strings s ON s.id = e.type"
            " WHERE s.text = ?", (type_name,))]
        self.assertTrue(rows, "no %s error row" % type_name[:40])
        for t, m in rows:
            self.assertEqual(len(m), len(message))
            self.assertTrue(m == message, "the message differs")
        self.assertEqual(gtutil.one(db, "SELECT count(*) FROM errors WHERE length(message)"
                                    " NOT IN (0, ?)", len(message)), 0)

    def check(self, adapter):
        n = 200000
        trace, cp = record("error", n, adapter)
        self.check_rows(trace, "RuntimeError", text(n))
        self.assertEqual(gtutil.one(gtutil.connect(trace), "SELECT count(*) FROM errors"
                                    " WHERE backward IS NOT NULL"), 1)
        tname = text(n).replace(" ", "_").replace("|", "_")
        trace, cp = record("errtype", n, adapter)
        self.check_rows(trace, tname, text(n))


class OddTexts(gtutil.BothAdapters, unittest.TestCase):
    """A NUL in an error message, a NUL and a lone surrogate in another, and
    a lone surrogate in a file name: recorded whole, as Python's backslashreplace writes
    them (the message was cut at the NUL, or recorded empty; the frames of
    the file were lost)."""

    def check(self, adapter):
        env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
        trace, cp = gtutil.record(SCRIPT, "oddtext", expect_fail=True, env=env)
        db = gtutil.connect(trace)
        got = {r[0]: r[1] for r in db.execute(
            "SELECT s.text, e.message FROM errors e JOIN strings s ON s.id = e.type")}
        self.assertEqual(got.get("RuntimeError"), "nul\\x00inside")
        self.assertEqual(got.get("ValueError"), "before\\x00after \\udc80 end")
        files = [r[0] for r in db.execute(
            "SELECT DISTINCT s.text FROM frames f JOIN strings s ON s.id = f.file")]
        self.assertIn("odd\\udc80name.py", files)
        # the op run from that file is attributed to it
        self.assertGreater(gtutil.one(db, "SELECT count(*) FROM ops o"
                                   " JOIN stacks k ON k.id = o.stack"
                                   " JOIN frames f ON f.id = k.frame"
                                   " JOIN strings s ON s.id = f.file"
                                   " WHERE s.text = 'odd\\udc80name.py'"), 0)


if __name__ == "__main__":
    unittest.main()
