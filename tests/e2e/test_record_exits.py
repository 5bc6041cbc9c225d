"""However a recorded script ends, the trace is readable and says how:
sys.exit, SIGTERM, SIGINT, kill -9 (the committed part), a forked child
(never writes the parent's trace), a thread (recorded with its thread), and
the Python API (`with gradtrace.record(...)`, start/stop).

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import glob
import os
import signal
import subprocess
import unittest

import gtutil
from gtutil import one, rows

SCRIPT = gtutil.scenario("rec_exits.py")


def footer(cp):
    return cp.stderr.strip().splitlines()[-1]


class Exits(unittest.TestCase):
    def test_sys_exit(self):
        trace, cp = gtutil.record(SCRIPT, "exit3", expect_fail=True)
        self.assertEqual(cp.returncode, 3)
        db = gtutil.connect(trace)
        self.assertEqual(rows(db, "SELECT status, exit_code FROM run"), [("ok", 3)])
        self.assertIn("diagnose it with", footer(cp))
        self.assertEqual(one(db, "SELECT count(*) FROM backward_calls WHERE status = 'ok'"), 1)

    def test_sigterm(self):
        trace, cp = gtutil.record(SCRIPT, "sigterm", expect_fail=True)
        self.assertEqual(cp.returncode, -signal.SIGTERM)
        db = gtutil.connect(trace)
        self.assertEqual(rows(db, "SELECT status, signal FROM run"),
                         [("signal", signal.SIGTERM)])
        self.assertIsNotNone(one(db, "SELECT end_ns FROM run"))
        self.assertEqual(footer(cp), "gradtrace: stopped by SIGTERM; the trace holds "
                                     "everything up to it: %s" % trace)

    def test_sigint(self):
        trace, cp = gtutil.record(SCRIPT, "sigint", expect_fail=True)
        plain = gtutil.run_plain(SCRIPT, "sigint")
        self.assertEqual(cp.returncode, plain.returncode)
        self.assertEqual(cp.returncode, -signal.SIGINT)
        self.assertIn("KeyboardInterrupt", cp.stderr)
        self.assertEqual(footer(cp), "gradtrace: stopped by SIGINT; the trace holds "
                                     "everything up to it: %s" % trace)
        db = gtutil.connect(trace)
        self.assertEqual(rows(db, "SELECT status, signal FROM run"),
                         [("signal", signal.SIGINT)])

    def test_kill9_keeps_committed_part(self):
        trace, cp = gtutil.record(SCRIPT, "kill9", expect_fail=True)
        self.assertEqual(cp.returncode, -signal.SIGKILL)
        # the trace and its row log: the first gradtrace command folds the
        # log's complete commits into the trace and removes it
        self.assertTrue(os.path.exists(trace + "-gtlog"))
        info = subprocess.run([gtutil.GRADTRACE, "info", trace], capture_output=True,
                              text=True, timeout=300)
        self.assertEqual(info.returncode, 0, info.stderr)
        self.assertFalse(os.path.exists(trace + "-gtlog"))
        db = gtutil.connect(trace)
        self.assertEqual(one(db, "PRAGMA integrity_check"), "ok")
        self.assertEqual(one(db, "SELECT status FROM run"), "running")
        self.assertGreater(one(db, "SELECT count(*) FROM ops o JOIN strings s"
                                   " ON s.id = o.name WHERE s.text = 'aten::add_.Tensor'"), 10)
        self.assertEqual(one(db, "SELECT count(*) FROM backward_calls"), 1)

    def test_fork(self):
        trace, cp = gtutil.record(SCRIPT, "fork")
        self.assertIn("child ok", cp.stdout)
        self.assertIn("parent ok 0", cp.stdout)
        db = gtutil.connect(trace)
        names = {r[0] for r in db.execute(
            "SELECT s.text FROM ops o JOIN strings s ON s.id = o.name")}
        self.assertIn("aten::sub_.Tensor", names)  # the parent, after the fork
        self.assertNotIn("aten::arange", names)  # the child never wrote
        self.assertNotIn("aten::arange.start", names)
        self.assertEqual(glob.glob(trace + ".*"), [])
        self.assertEqual(rows(db, "SELECT status, exit_code FROM run"), [("ok", 0)])

    def test_thread(self):
        trace, cp = gtutil.record(SCRIPT, "thread")
        db = gtutil.connect(trace)
        main = one(db, "SELECT thread FROM backward_calls")
        worker = rows(db, "SELECT o.thread FROM ops o JOIN strings s ON s.id = o.name"
                          " WHERE s.text = 'aten::mul_.Tensor'")
        self.assertEqual(len(worker), 1)
        self.assertNotEqual(worker[0][0], main)
        self.assertEqual(one(db, "SELECT count(*) FROM threads"), 2)


class Api(unittest.TestCase):
    def test_with_and_start_stop(self):
        d = gtutil.tmpdir()
        api = os.path.join(d, "api")
        os.mkdir(api)
        cp = subprocess.run([gtutil.PYTHON, gtutil.scenario("rec_api.py"), api],
                            capture_output=True, text=True, timeout=300)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout.splitlines(), [
            "caught RuntimeError", "propagated KeyError", "refused to overwrite True",
            "kept True", "backward restored True"])
        self.assertIn("gradtrace: kept the previous trace as %s.old\n"
                      % os.path.join(api, "startstop.db"), cp.stderr)
        db = gtutil.connect(os.path.join(api, "with.db"))
        self.assertEqual(rows(db, "SELECT status FROM run"), [("ok",)])
        self.assertEqual(rows(db, "SELECT status FROM backward_calls"), [("error",)])
        self.assertEqual(gtutil.saved(db, "ExpBackward0")[0][2:], (0, 1))
        # the first start/stop trace, kept when the second was recorded
        db = gtutil.connect(os.path.join(api, "startstop.db.old"))
        self.assertEqual(rows(db, "SELECT status FROM backward_calls"), [("ok",)])
        self.assertEqual(len(gtutil.saved(db, "MulBackward0")), 2)
        db = gtutil.connect(os.path.join(api, "raise.db"))
        self.assertEqual(rows(db, "SELECT status, exit_code FROM run"), [("exception", 1)])
        self.assertEqual(rows(db, "SELECT s.text, e.message FROM errors e JOIN strings s"
                                  " ON s.id = e.type"), [("KeyError", "'boom'")])


if __name__ == "__main__":
    unittest.main()
