"""`gradtrace record` input errors (one line, exit 2, nothing created or
overwritten), --force, --backward-calls windows and the --max-size cap.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import stat
import subprocess
import sys
import unittest

import gtutil
from gtutil import one, rows


def gradtrace(*args, **kw):
    return subprocess.run([gtutil.GRADTRACE, *args], capture_output=True, text=True,
                          timeout=300, **kw)


class BadInput(unittest.TestCase):
    def setUp(self):
        self.dir = gtutil.tmpdir()
        self.script = gtutil.scenario("rec_window.py")

    def assertOneLineError(self, cp, *parts):
        self.assertEqual(cp.returncode, 2, cp.stderr)
        self.assertEqual(cp.stdout, "")
        lines = cp.stderr.splitlines()
        self.assertEqual(len(lines), 1, cp.stderr)
        self.assertTrue(lines[0].startswith("gradtrace: "), lines[0])
        for p in parts:
            self.assertIn(p, lines[0])

    def test_missing_script(self):
        out = os.path.join(self.dir, "missing.db")
        cp = gradtrace("record", "-o", out, "--", os.path.join(self.dir, "nope.py"))
        self.assertOneLineError(cp, "nope.py", "No such file or directory")
        self.assertFalse(os.path.exists(out))

    def test_existing_output_is_kept(self):
        out = os.path.join(self.dir, "exists.db")
        with open(out, "w") as f:
            f.write("precious")
        cp = gradtrace("record", "-o", out, "--", self.script)
        self.assertOneLineError(cp, out, "--force")
        with open(out) as f:
            self.assertEqual(f.read(), "precious")

    def test_empty_file_is_replaced(self):
        out = os.path.join(self.dir, "empty.db")
        open(out, "w").close()
        trace, cp = gtutil.record(self.script, 1, out=out)
        self.assertEqual(one(gtutil.connect(trace), "SELECT status FROM run"), "ok")
        self.assertFalse(os.path.exists(out + ".old"))
        self.assertNotIn("kept", cp.stderr)

    def test_output_directory_missing(self):
        out = os.path.join(self.dir, "no", "such", "dir", "x.db")
        cp = gradtrace("record", "-o", out, "--", self.script)
        self.assertOneLineError(cp, "does not exist")

    def test_output_parent_is_a_file(self):
        parent = os.path.join(self.dir, "plain-file")
        with open(parent, "w") as f:
            f.write("x")
        cp = gradtrace("record", "-o", os.path.join(parent, "x.db"), "--", self.script)
        self.assertOneLineError(cp, "is not a directory")

    @unittest.skipIf(os.geteuid() == 0, "root can write anywhere")
    def test_output_directory_unwritable(self):
        d = os.path.join(self.dir, "ro")
        os.mkdir(d)
        os.chmod(d, stat.S_IRUSR | stat.S_IXUSR)
        try:
            cp = gradtrace("record", "-o", os.path.join(d, "x.db"), "--", self.script)
            self.assertOneLineError(cp, "Permission denied")
        finally:
            os.chmod(d, stat.S_IRWXU)

    def test_interpreter_without_torch(self):
        wrapper = os.path.join(self.dir, "python-no-site")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec "%s" -S "$@"\n' % gtutil.PYTHON)
        os.chmod(wrapper, stat.S_IRWXU)
        out = os.path.join(self.dir, "notorch.db")
        cp = gradtrace("record", "--python", wrapper, "-o", out, "--", self.script)
        self.assertOneLineError(cp, "cannot import torch", "--python", "GRADTRACE_PYTHON")
        self.assertFalse(os.path.exists(out))
        # the same through the environment variable
        env = dict(os.environ, GRADTRACE_PYTHON=wrapper)
        cp = gradtrace("record", "-o", out, "--", self.script, env=env)
        self.assertOneLineError(cp, "cannot import torch")
        self.assertFalse(os.path.exists(out))

    def test_interpreter_missing(self):
        out = os.path.join(self.dir, "nopy.db")
        cp = gradtrace("record", "--python", "/nonexistent/python9", "-o", out, "--",
                       self.script)
        self.assertOneLineError(cp, "/nonexistent/python9", "--python")
        self.assertFalse(os.path.exists(out))

    def test_bad_options(self):
        out = os.path.join(self.dir, "opts.db")
        for opt in (["--backward-calls", "3-1"], ["--backward-calls", "x"],
                    ["--backward-calls", "0-2"], ["--max-size", "lots"],
                    ["--max-size", "-5"]):
            cp = gradtrace("record", "-o", out, *opt, "--", self.script)
            self.assertOneLineError(cp, opt[1])
        self.assertFalse(os.path.exists(out))

    def test_help(self):
        cp = gradtrace("record", "--help")
        self.assertEqual(cp.returncode, 0)
        for opt in ("--output", "--force", "--python", "--backward-calls", "--max-size"):
            self.assertIn(opt, cp.stdout)


class UnknownOption(unittest.TestCase):
    """Every command answers an option it does not know with one line that
    names it and points at its --help (not the whole help)."""

    def test_every_command(self):
        for cmd in ("record", "diagnose", "graph", "sql", "info", "history", "memory"):
            for opt in ("--bogus", "-Z"):
                cp = gradtrace(cmd, opt, "x.db")
                self.assertEqual(cp.returncode, 2, cp.stderr)
                self.assertEqual(cp.stderr, "gradtrace: %s: unknown option '%s' (see "
                                            "gradtrace %s --help)\n" % (cmd, opt, cmd))
        cp = gradtrace("--bogus")
        self.assertEqual((cp.returncode, cp.stderr),
                         (2, "gradtrace: unknown option '--bogus' (see gradtrace --help)\n"))
        cp = gradtrace("record", "-o")
        self.assertEqual(cp.stderr, "gradtrace: record: option '-o' needs a value (see "
                                    "gradtrace record --help)\n")


class Again(unittest.TestCase):
    """Recording again to a path that holds a trace keeps the previous one
    as PATH.old (the one before is replaced) and records, as perf record
    keeps perf.data.old."""

    def test_previous_trace_kept(self):
        out = os.path.join(gtutil.tmpdir(), "again.db")
        script = gtutil.scenario("rec_window.py")
        for steps in (1, 2, 3):
            trace, cp = gtutil.record(script, steps, out=out)
            self.assertEqual(cp.stdout, "done %d\n" % steps)
            kept = [l for l in cp.stderr.splitlines() if "kept" in l]
            self.assertEqual(kept, [] if steps == 1 else
                             ["gradtrace: kept the previous trace as %s.old" % out])
            self.assertEqual(one(gtutil.connect(out), "SELECT count(*) FROM backward_calls"),
                             steps)
            if steps > 1:
                self.assertEqual(one(gtutil.connect(out + ".old"),
                                     "SELECT count(*) FROM backward_calls"), steps - 1)
        self.assertEqual(sorted(f for f in os.listdir(os.path.dirname(out))
                                if f.startswith("again")), ["again.db", "again.db.old"])

    def test_force_replaces_without_keeping(self):
        out = os.path.join(gtutil.tmpdir(), "forced.db")
        script = gtutil.scenario("rec_window.py")
        gtutil.record(script, 1, out=out)
        trace, cp = gtutil.record(script, 2, out=out, options=("--force",))
        self.assertNotIn("kept", cp.stderr)
        self.assertFalse(os.path.exists(out + ".old"))


class StartUp(unittest.TestCase):
    """Starting to record imports nothing a script does not: torch.func.grad
    (the engine adapter's wrapper check once used it) imports torch._dynamo,
    about 800 modules and a second of CPU before the script's first line.
    Measured with `time gradtrace record -o t.db -- s.py` against `time
    python3 s.py` for s.py = `import torch`."""

    def test_no_dynamo_at_start(self):
        script = os.path.join(gtutil.tmpdir(), "dynamo_loaded.py")
        with open(script, "w") as f:
            f.write("import sys\nimport torch\n"
                    "print('torch._dynamo' in sys.modules)\n"
                    "if len(sys.argv) > 1:\n"
                    "    import gradtrace\n"
                    "    with gradtrace.record(sys.argv[1]):\n"
                    "        print('torch._dynamo' in sys.modules)\n")
        trace, cp = gtutil.record(script)
        self.assertEqual(cp.stdout, "False\n")
        api = subprocess.run([gtutil.PYTHON, script, os.path.join(gtutil.tmpdir(), "su.db")],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(api.returncode, 0, api.stderr)
        self.assertEqual(api.stdout, "False\nFalse\n")


class Window(unittest.TestCase):
    def test_backward_calls_2_to_3_with_force(self):
        out = os.path.join(gtutil.tmpdir(), "window.db")
        with open(out, "w") as f:
            f.write("old")
        script = gtutil.scenario("rec_window.py")
        trace, cp = gtutil.record(script, 4, out=out,
                                  options=("--force", "--backward-calls", "2-3"))
        self.assertEqual(cp.stdout, "done 4\n")
        db = gtutil.connect(trace)
        self.assertEqual(rows(db, "SELECT id, status FROM backward_calls"),
                         [(1, "ok"), (2, "ok")])
        # the forward passes of steps 2 and 3 (two Linear layers each), nothing else
        self.assertEqual(one(db, "SELECT count(*) FROM ops o JOIN strings s ON s.id = o.name"
                                 " WHERE s.text = 'aten::addmm' AND o.phase = 0"), 4)
        self.assertEqual(one(db, "SELECT count(*) FROM ops o JOIN strings s ON s.id = o.name"
                                 " WHERE s.text = 'aten::pow.Tensor_Scalar' AND o.phase = 0"), 2)
        self.assertEqual(json.loads(one(db, "SELECT options FROM run"))["backward_calls"],
                         [2, 3])
        self.assertEqual(rows(db, "SELECT status, exit_code FROM run"), [("ok", 0)])


class SizeCap(unittest.TestCase):
    def test_max_size_stops_recording_not_the_run(self):
        script = gtutil.scenario("rec_window.py")
        trace, cp = gtutil.record(script, 300, options=("--max-size", "200K"))
        self.assertEqual(cp.stdout, "done 300\n")
        self.assertEqual(cp.stderr.count("recording stopped"), 1, cp.stderr)
        db = gtutil.connect(trace)
        ops = one(db, "SELECT count(*) FROM ops")
        self.assertGreater(ops, 100)
        self.assertLess(os.path.getsize(trace), 400 * 1024)
        # a run of 300 steps has far more ops than were kept
        self.assertLess(one(db, "SELECT count(*) FROM backward_calls"), 300)
        # the run row says where and why it stopped, and is completed
        # the last event of any kind (the events view has them all but names)
        last = one(db, "SELECT max(seq) FROM (SELECT seq FROM events"
                       " UNION ALL SELECT seq FROM names)")
        self.assertEqual(one(db, "SELECT stopped_seq FROM run"), last)
        self.assertRegex(one(db, "SELECT stopped_reason FROM run"),
                         r"^size cap: \d+ bytes > max_bytes 204800$")
        self.assertEqual(rows(db, "SELECT status, exit_code, end_ns IS NOT NULL FROM run"),
                         [("ok", 0, 1)])
        self.assertEqual(one(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                                 " AND name = 'op_args_written'"), 1)
        db.close()
        self.assertFalse(os.path.exists(trace + "-wal"))
        cp = gradtrace("info", trace)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("recording stopped early, after event %d (size cap: " % last, cp.stdout)
        cp = gradtrace("diagnose", trace)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertTrue(cp.stdout.startswith(
            "note: recording stopped early, after event %d (size cap: " % last), cp.stdout)
        self.assertIn("); what came after is not in the trace\n", cp.stdout)
        doc = json.loads(gradtrace("diagnose", "--json", trace).stdout)
        self.assertEqual((doc["partial"], doc["stopped"]["seq"]), (True, last))


if __name__ == "__main__":
    unittest.main()
