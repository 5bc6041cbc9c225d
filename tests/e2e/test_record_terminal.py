"""What `gradtrace record` says on a terminal, and how a signal ends it.

On a terminal (a pty here) stderr carries a status line redrawn in place
(elapsed time, backward calls, events, trace size), cleared before each of
the script's own lines, so that the screen shows the script's output as
without recording; with -q, or when stderr is not a terminal, there is none.
SIGINT and SIGTERM sent to a recorded run end it as they end the script
(killed by the signal) with one line saying the trace holds the run up to
the signal, not that the run failed. Closing says what it does when it takes
more than a second.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import io
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import unittest

import gtutil
from gtutil import one

SLOW = gtutil.scenario("rec_slow.py")
CLEAR = "\r\x1b[K"


def on_pty(args, timeout=300):
    """Run args with stdin, stdout and stderr on a new pty; returns (exit
    status, everything written to the terminal, as text)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([master], [], [], 1.0)
        if not r:
            if p.poll() is not None:
                break
            continue
        try:
            d = os.read(master, 65536)
        except OSError:  # EIO: the last holder of the slave side is gone
            break
        if not d:
            break
        out += d
    os.close(master)
    return p.wait(timeout=60), out.decode("utf-8", "replace")


def screen(text):
    """The lines a terminal shows for text: a carriage return and erase-line
    (CLEAR) blanks the line being written."""
    lines = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        lines.append(raw.rsplit(CLEAR, 1)[-1])
    return [l for l in lines if l]


def record_cmd(out, *args, options=()):
    return [gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-o", out, *options,
            "--", SLOW, *map(str, args)]


class StatusLine(unittest.TestCase):
    def test_status_on_a_terminal(self):
        out = os.path.join(gtutil.tmpdir(), "tty.db")
        rc, text = on_pty(record_cmd(out, 60))
        self.assertEqual(rc, 0, text)
        statuses = re.findall(r"\r\x1b\[K(gradtrace: recording [^\r\n]*)", text)
        self.assertTrue(statuses, text)
        for s in statuses:
            self.assertRegex(s, r"^gradtrace: recording \d+:\d\d · \d+ backward calls? · "
                                r"[\d.]+ k? ?events · [\d.]+ [KM]?B$")
        # the status counts up
        calls = [int(re.search(r"(\d+) backward call", s).group(1)) for s in statuses]
        self.assertEqual(calls, sorted(calls))
        self.assertGreater(calls[-1], 0)
        # the screen shows the script's lines as without recording, and the
        # status is gone at the end
        # (the dispatch adapter's own line, under GRADTRACE_ADAPTER=dispatch, aside)
        shown = [l for l in screen(text) if not l.startswith(gtutil.FALLBACK)]
        self.assertEqual(shown, ["step %d" % i for i in range(0, 60, 10)] +
                         ["done", "gradtrace: trace written to %s" % out])
        self.assertEqual(one(gtutil.connect(out), "SELECT count(*) FROM backward_calls"), 60)

    def test_quiet_on_a_terminal(self):
        out = os.path.join(gtutil.tmpdir(), "quiet.db")
        rc, text = on_pty(record_cmd(out, 30, options=("-q",)))
        self.assertEqual(rc, 0, text)
        self.assertNotIn("\x1b", text)
        self.assertNotIn("recording", text)

    def test_none_on_a_pipe(self):
        trace, cp = gtutil.record(SLOW, 30)
        self.assertNotIn("\x1b", cp.stderr)
        self.assertNotIn("recording", cp.stderr)
        self.assertEqual(cp.stdout, "".join("step %d\n" % i for i in range(0, 30, 10)) +
                         "done\n")


class Signals(unittest.TestCase):
    """A signal sent to a recorded run from outside, once it is under way."""

    def stop_with(self, signum):
        out = os.path.join(gtutil.tmpdir(), "sig%d.db" % signum)
        p = subprocess.Popen(record_cmd(out, 100000, 1), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(3):  # a few backward calls recorded
                self.assertTrue(p.stdout.readline().startswith("step"))
            p.send_signal(signum)
            _, err = p.communicate(timeout=300)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        return out, p.returncode, err

    def check(self, signum, name):
        out, rc, err = self.stop_with(signum)
        self.assertEqual(rc, -signum, err)  # as a killed process: 128 + signum to a shell
        self.assertEqual(err.strip().splitlines()[-1],
                         "gradtrace: stopped by %s; the trace holds everything up to it: %s"
                         % (name, out))
        self.assertNotIn("the run failed", err)
        db = gtutil.connect(out)
        self.assertEqual(tuple(db.execute("SELECT status, signal FROM run").fetchone()),
                         ("signal", signum))
        self.assertGreaterEqual(one(db, "SELECT count(*) FROM backward_calls"), 3)

    def test_sigint(self):
        self.check(signal.SIGINT, "SIGINT")

    def test_sigterm(self):
        self.check(signal.SIGTERM, "SIGTERM")


class SqlPrompt(unittest.TestCase):
    """`gradtrace sql TRACE` with no query, on a terminal: a prompt that runs
    statements as they end (';'), and sqlite3's .tables, .schema, .help and
    .quit; an error is said and the prompt goes on."""

    def test_prompt(self):
        trace, _ = gtutil.record(SLOW, 2)
        master, slave = pty.openpty()
        p = subprocess.Popen([gtutil.GRADTRACE, "sql", trace], stdin=slave, stdout=slave,
                             stderr=slave, close_fds=True)
        os.close(slave)
        lines = [".tables", "SELECT status,", "  exit_code FROM run;", ".schema run",
                 "SELECT nope;", ".bogus", "SELECT count(*) AS calls FROM backward_calls;",
                 ".quit"]
        os.write(master, ("\n".join(lines) + "\n").encode())
        out = b""
        while True:
            r, _, _ = select.select([master], [], [], 60)
            if not r:
                break
            try:
                d = os.read(master, 65536)
            except OSError:
                break
            if not d:
                break
            out += d
        os.close(master)
        self.assertEqual(p.wait(timeout=60), 0)
        text = out.decode().replace("\r\n", "\n")
        self.assertIn("gradtrace> ", text)
        self.assertIn("      ...> ", text)  # the statement's second line
        names = re.findall(r"\b(backward_calls|op_log|mutations|run|saved)\b", text)
        for name in ("backward_calls", "op_log", "mutations", "run", "saved"):
            self.assertIn(name, names)
        self.assertRegex(text, r"status\s+exit_code\n-+\s+-+\nok\s+0\n")
        self.assertIn("CREATE TABLE run (", text)
        self.assertIn("gradtrace: sql: no such column: nope\n", text)
        self.assertIn("gradtrace: sql: unknown command .bogus (see .help)\n", text)
        self.assertRegex(text, r"calls\n-+\n\s*2\n")


class CloseNote(unittest.TestCase):
    """The note on a close that takes more than a second, and none on a
    quick one (gradtrace/_status.py's CloseNote, around a stand-in close)."""

    def note(self, seconds):
        sys.path.insert(0, os.path.join(gtutil.SOURCE, "recorder", "python"))
        from gradtrace import _status
        err, sys.stderr = sys.stderr, io.StringIO()
        try:
            with _status.CloseNote(1234567, "run.db"):
                time.sleep(seconds)
            return sys.stderr.getvalue()
        finally:
            sys.stderr = err

    def test_slow_close_is_said(self):
        self.assertEqual(self.note(_status_after() + 0.5),
                         "gradtrace: closing the trace run.db: writing 1.2 M events and its "
                         "indexes...\n")

    def test_quick_close_is_not(self):
        self.assertEqual(self.note(0), "")


def _status_after():
    sys.path.insert(0, os.path.join(gtutil.SOURCE, "recorder", "python"))
    from gradtrace import _status
    return _status.CLOSE_NOTE_AFTER


if __name__ == "__main__":
    unittest.main()
