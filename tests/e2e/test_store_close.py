"""The closed trace is what the user gets: at most --max-size bytes, its
close-time indexes included, and one self-contained file whatever readers
are open when recording ends; or a clear one-line error and a non-zero exit
when another process keeps it from being finished.
"""
import fcntl
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
import unittest

import gtutil

LOOP = os.path.join(gtutil.SOURCE, "bench", "longtrace_loop.py")

# A training loop that, halfway, waits for a reader to be attached to its
# own trace (argv[1] appears), then runs as many steps again.
WAIT_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import torch
    ready = sys.argv[1]
    w = torch.ones(4, requires_grad=True)
    def steps(n):
        for _ in range(n):
            (w * 2).sum().backward()
    steps(200)
    for _ in range(6000):
        if os.path.exists(ready):
            break
        time.sleep(0.01)
    else:
        sys.exit("no reader")
    steps(200)
    print("done")
""")

# A reader of a live trace: opens it once it has a backward call (the ops
# are in the recorder's row log until close), reads inside a read
# transaction (or also holds SQLite's SHARED lock byte range, as a process
# in the middle of a rollback-journal read does), says so by creating
# argv[2], and holds on until its stdin closes.
READER = textwrap.dedent("""
    import fcntl, os, sqlite3, sys, time
    trace, ready, mode = sys.argv[1:4]
    for _ in range(6000):
        try:
            db = sqlite3.connect("file:%s?mode=ro" % trace, uri=True, isolation_level=None)
            db.execute("BEGIN")
            if db.execute("SELECT count(*) FROM backward_calls").fetchone()[0] > 0:
                break
            db.execute("COMMIT")
            db.close()
        except sqlite3.Error:
            pass
        time.sleep(0.01)
    else:
        sys.exit("no trace")
    if mode == "lock":
        fd = os.open(trace, os.O_RDONLY)
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 510, 0x40000002, 0)
    open(ready, "w").close()
    sys.stdin.read()
    db.execute("COMMIT")
    print(db.execute("SELECT count(*) FROM ops").fetchone()[0])
""")


def parse_size(s):
    return int(s[:-1]) * {"K": 1024, "M": 1024 * 1024}[s[-1]]


class SizeCap(unittest.TestCase):
    def test_closed_file_within_cap(self):
        for cap, steps in (("200K", 300), ("1M", 2000), ("4M", 6000)):
            with self.subTest(cap=cap):
                out, cp = gtutil.record(LOOP, steps, options=("--max-size", cap))
                size = os.path.getsize(out)
                limit = parse_size(cap)
                self.assertLessEqual(size, limit, "%s: %d bytes" % (cap, size))
                # it used the room it had, not stopping absurdly early
                self.assertGreater(size, limit * 0.75, "%s: %d bytes" % (cap, size))
                self.assertFalse(os.path.exists(out + "-wal"))
                self.assertEqual(cp.stderr.count("recording stopped"), 1, cp.stderr)
                self.assertIn("gradtrace: trace written to " + out, cp.stderr)
                db = sqlite3.connect("file:%s?mode=ro" % out, uri=True)
                self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
                self.assertEqual(db.execute("SELECT count(*) FROM sqlite_master WHERE "
                                            "type = 'index'").fetchone()[0], 9)
                self.assertGreater(db.execute("SELECT count(*) FROM ops").fetchone()[0], 50)
                db.close()
                info = subprocess.run([gtutil.GRADTRACE, "info", out], capture_output=True,
                                      text=True, timeout=120)
                self.assertEqual(info.returncode, 0, info.stderr)
                self.assertIn("recording stopped early", info.stdout)


class ReaderAtClose(unittest.TestCase):
    def run_with_reader(self, mode, blocked=False):
        d = gtutil.tmpdir()
        script = os.path.join(d, "wait_%s.py" % mode)
        with open(script, "w") as f:
            f.write(WAIT_SCRIPT)
        out = os.path.join(d, "reader_%s%s.db" % (mode, "_blocked" if blocked else ""))
        ready = out + ".ready"
        if blocked:
            # the name of the finished copy is taken: no copy can be written
            os.mkdir(out + ".gt-finish")
            open(os.path.join(out + ".gt-finish", "x"), "w").close()
        reader = subprocess.Popen([sys.executable, "-c", READER, out, ready, mode],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            cp = subprocess.run([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON,
                                 "-o", out, "--", script, ready], capture_output=True,
                                text=True, timeout=300)
            copy = out + ".copy"
            shutil.copyfile(out, copy)  # the trace file alone, reader still there
        finally:
            seen, _ = reader.communicate("", timeout=60)
        self.assertEqual(reader.returncode, 0)
        return out, copy, cp, int(seen)

    def check_finished(self, mode):
        out, copy, cp, seen = self.run_with_reader(mode)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("gradtrace: trace written to " + out, cp.stderr)
        self.assertFalse(os.path.exists(out + "-wal"))
        # the file alone, copied while the reader was still attached, holds
        # every event, and the reader (once its transaction ends) saw them
        db = sqlite3.connect(copy)
        self.assertEqual(db.execute("PRAGMA journal_mode").fetchone()[0], "delete")
        self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        full = db.execute("SELECT count(*) FROM ops").fetchone()[0]
        self.assertEqual(db.execute("SELECT status FROM run").fetchone()[0], "ok")
        self.assertEqual(db.execute("SELECT count(*) FROM sqlite_master WHERE "
                                    "type = 'index'").fetchone()[0], 9)
        self.assertEqual(seen, full)
        self.assertGreater(full, 400 * 5)

    def test_reader_in_transaction_across_close(self):
        self.check_finished("txn")

    def test_reader_holding_a_lock_across_close(self):
        self.check_finished("lock")

    def test_trace_that_cannot_be_finished_fails_loudly(self):
        out, copy, cp, seen = self.run_with_reader("lock", blocked=True)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        self.assertEqual(cp.stdout, "done\n")
        self.assertNotIn("trace written", cp.stderr)
        # (the line saying what closing does, when it takes over a second, aside)
        lines = [l for l in gtutil.without_fallback(cp.stderr).splitlines()
                 if l.startswith("gradtrace:")
                 and not l.startswith("gradtrace: closing the trace")]
        self.assertEqual(len(lines), 1, cp.stderr)
        self.assertRegex(lines[0], r"^gradtrace: cannot finish trace %s: another process "
                                   r"held it open for \d+ ms, and writing a finished copy "
                                   r"failed \(" % out)
        # nothing is lost: every event is readable once that process is gone
        db = sqlite3.connect(out)
        self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        self.assertEqual(db.execute("SELECT status FROM run").fetchone()[0], "ok")
        self.assertEqual(db.execute("SELECT count(*) FROM ops").fetchone()[0], seen)
        self.assertGreater(seen, 400 * 5)


def gradtrace(*args):
    return subprocess.run([gtutil.GRADTRACE, *args], capture_output=True, text=True,
                          timeout=300)


def index_count(path):
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    n = db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name "
                   "NOT LIKE 'sqlite_%'").fetchone()[0]
    db.close()
    return n


class UnfinishedTraces(unittest.TestCase):
    """A real loop's trace without its close-time indexes: killed (SIGKILL
    before it could close) it is finished by the first command, with one
    note; live (the recording paused) it is read from a copy, untouched."""

    def test_killed_trace_finished_once(self):
        out, cp = gtutil.record(LOOP, 1500, "--kill", expect_fail=True)
        self.assertEqual(index_count(out), 0)
        # what it recorded: the trace and its row log (folded in by the first
        # command, which removes it)
        self.assertGreater(os.path.getsize(out) + os.path.getsize(out + "-gtlog"),
                           256 * 1024)
        d = gradtrace("diagnose", out)
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertEqual(d.stderr, "gradtrace: note: %s was left unfinished by its recording "
                                   "(killed?): created its 9 missing indexes, as closing it "
                                   "would have\n" % out)
        self.assertIn("partial", d.stdout)
        self.assertEqual(index_count(out), 9)
        self.assertFalse(os.path.exists(out + "-wal"))
        self.assertFalse(os.path.exists(out + "-gtlog"))
        for args in (("info", out), ("history", out, "loss"), ("sql", out, "SELECT 1"),
                     ("graph", out, "-f", "dot", "-o", os.devnull)):
            r = gradtrace(*args)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stderr, "", args)
        info = gradtrace("info", out).stdout
        self.assertRegex(info, r"\nbackward calls: \d+ \(\d+ ok")
        self.assertIn("partial trace: the recording did not finish", info)

    def test_live_trace_read_from_a_copy(self):
        d = gtutil.tmpdir()
        out = os.path.join(d, "live.db")
        go = os.path.join(d, "live.go")
        p = subprocess.Popen([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-o",
                              out, "--", LOOP, "1500", "--pause", go],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertTrue(p.stdout.readline().startswith("loss "))
            before = (os.path.getsize(out), index_count(out))
            self.assertEqual(before[1], 0)
            for args in (("info", out), ("diagnose", out), ("history", out, "loss"),
                         ("graph", out, "-f", "dot", "-o", os.devnull),
                         ("sql", out, "SELECT count(*) FROM op_log")):
                r = gradtrace(*args)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "", args)
            self.assertEqual(index_count(out), 0)
            info = gradtrace("info", out).stdout
            # every committed batch: all but at most one batch of 20,000
            # events (about 380 of this loop's steps) is in the file
            calls = re.search(r"\nbackward calls: (\d+) \(", info)
            self.assertIsNotNone(calls, info)
            self.assertGreaterEqual(int(calls.group(1)), 1500 - 400, info)
            self.assertLessEqual(int(calls.group(1)), 1500, info)
            self.assertIn("partial trace", info)
        finally:
            open(go, "w").close()
            p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0)
        self.assertEqual(index_count(out), 9)


if __name__ == "__main__":
    unittest.main()
