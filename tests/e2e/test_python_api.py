"""The Python API's manners: a public namespace that is the API (__all__,
no os/sys/json/socket), record()'s keyword parameters typed and documented,
Trace.sql() rows with column names, dataframe=True without pandas naming
pandas, recording again keeping the previous trace, and a failed `with`
block whose traceback has no gradtrace frame and whose diagnosis does not
repeat PyTorch's message.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import subprocess
import sys
import unittest

import gtutil

sys.path.insert(0, os.path.join(gtutil.SOURCE, "recorder", "python"))
import gradtrace  # noqa: E402


def python(code, *args):
    cp = subprocess.run([gtutil.PYTHON, "-c", code, *args], capture_output=True, text=True,
                        timeout=300)
    return cp


class Namespace(unittest.TestCase):
    def test_public_names(self):
        public = sorted(n for n in dir(gradtrace) if not n.startswith("_"))
        self.assertEqual(public, sorted(gradtrace.__all__))
        self.assertEqual(sorted(gradtrace.__all__),
                         ["Recording", "Result", "Trace", "TraceError", "open", "record"])
        for mod in ("os", "sys", "json", "socket", "signal", "threading"):
            self.assertNotIn(mod, dir(gradtrace))

    def test_record_parameters(self):
        import inspect
        sig = inspect.signature(gradtrace.record)
        params = sig.parameters
        self.assertEqual(list(params), ["path", "overwrite", "max_size", "backward_calls",
                                        "keep_last", "check_saved", "per_rank", "argv",
                                        "quiet"])
        for name in list(params)[1:]:
            self.assertEqual(params[name].kind, inspect.Parameter.KEYWORD_ONLY, name)
            self.assertIsNot(params[name].annotation, inspect.Parameter.empty, name)
            self.assertIn(name + ":", gradtrace.record.__doc__)
        with self.assertRaises(TypeError):
            gradtrace.record("x.db", overwrit=True)

    def test_check_saved_modes(self):
        # None (the default) samples; True and False are full and off
        for value, mode in ((None, "sampled"), (True, "full"), (False, "off"),
                            ("sampled", "sampled"), ("full", "full"), ("off", "off")):
            self.assertEqual(gradtrace.record("x.db", check_saved=value).check_saved, mode)
        for bad in ("on", 1, "FULL"):
            with self.assertRaises(ValueError):
                gradtrace.record("x.db", check_saved=bad)


class Sql(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace, _ = gtutil.record(gtutil.scenario("rec_window.py"), 2)

    def test_rows_carry_column_names(self):
        cp = python("import sys, gradtrace\n"
                    "r = gradtrace.open(sys.argv[1]).sql("
                    "'SELECT id, status, 1 + 1 FROM backward_calls ORDER BY id')\n"
                    "print(r.columns)\n"
                    "print([(row.id, row.status, row[2]) for row in r])\n"
                    "print(r == [(1, 'ok', 2), (2, 'ok', 2)])", self.trace)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout.splitlines(), [
            "('id', 'status', '1 + 1')", "[(1, 'ok', 2), (2, 'ok', 2)]", "True"])

    def test_dataframe_without_pandas(self):
        # pandas hidden from the import system: the error names it
        cp = python("import sys\n"
                    "sys.modules['pandas'] = None\n"
                    "import gradtrace\n"
                    "try:\n"
                    "    gradtrace.open(sys.argv[1]).sql('SELECT 1', dataframe=True)\n"
                    "except ImportError as e:\n"
                    "    print(type(e).__name__, e.name)\n"
                    "    print(e)\n", self.trace)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        kind, msg = cp.stdout.splitlines()
        self.assertEqual(kind, "ModuleNotFoundError pandas")
        self.assertIn("needs pandas", msg)
        self.assertIn("pip install pandas", msg)


FAIL = """
import sys, torch, gradtrace
x = torch.ones(4, requires_grad=True)
with gradtrace.record(sys.argv[1]):
    h = torch.sigmoid(x)
    h.relu_()
    h.sum().backward()
"""


class FailedBlock(unittest.TestCase):
    def test_traceback_and_message_once(self):
        trace = os.path.join(gtutil.tmpdir(), "fail.db")
        first = python(FAIL, trace)
        cp = python(FAIL, trace)  # again: the first trace is kept
        self.assertEqual(cp.returncode, 1)
        self.assertIn("gradtrace: kept the previous trace as %s.old\n" % trace, cp.stderr)
        self.assertTrue(os.path.exists(trace + ".old"), first.stderr)
        # PyTorch's message once, in the traceback; the header names the error
        self.assertEqual(cp.stderr.count("one of the variables needed for gradient"), 1,
                         cp.stderr)
        self.assertIn("%s: the run raised RuntimeError (its message is in the traceback)"
                      % trace, cp.stderr)
        self.assertIn("h modified in place after SigmoidBackward0", cp.stderr)
        tb = cp.stderr[cp.stderr.index("Traceback"):]
        self.assertIn('line 7, in <module>', tb)
        self.assertNotIn(os.sep + "gradtrace" + os.sep, tb)


if __name__ == "__main__":
    unittest.main()
