"""Hostile and broken recordings: the recorded script keeps its behaviour and
the trace stays readable when the run is killed, interrupted, runs out of
file size, cannot create its trace, races another recording for the same
path, or forks DataLoader workers that use tensors.

Each case runs `gradtrace record` on a small script written to a temporary
directory, then checks the exit status (against the same script run without
recording where it matters), stderr, and the trace through `gradtrace` and
sqlite3 (PRAGMA integrity_check).
"""
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

GRADTRACE = gtutil.GRADTRACE
PYTHON = gtutil.PYTHON

# A training loop that writes MARKER (argv[1]) once it is well into its
# work and then keeps going for a while; signals arrive after the marker.
TRAIN = """
import os, sys, time
import torch

marker = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 400
w = torch.randn(8, 8, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for step in range(steps):
    x = torch.randn(4, 8)
    loss = (x @ w).relu().sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 20:
        open(marker, "w").close()
    if step >= 20:
        time.sleep(0.02)
print("done", steps)
"""

# TRAIN that, once it wrote MARKER at step 20, holds its recording open until
# the file RELEASE exists (at most 300 s), so that a test can act on a live
# recording without racing it.
HOLD = """
import os, sys, time
import torch

marker, release, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
w = torch.randn(8, 8, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for step in range(steps):
    x = torch.randn(4, 8)
    loss = (x @ w).relu().sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 20:
        open(marker, "w").close()
        end = time.monotonic() + 300
        while not os.path.exists(release) and time.monotonic() < end:
            time.sleep(0.05)
print("done", steps)
"""

# A backward that runs for a long time: a custom Function whose backward
# does small ops in a loop (so the recorder keeps committing) and writes
# MARKER while it is inside the backward.
SLOW_BACKWARD = """
import sys, time
import torch

marker = sys.argv[1]

class Slow(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        acc = torch.zeros_like(x)
        for i in range(4000):
            acc = acc + x * 0.001
            if i == 30:
                open(marker, "w").close()
            time.sleep(0.01)
        return g * 2 + acc

w = torch.randn(5, requires_grad=True)
y = Slow.apply(w * 3)
loss = (y * y).sum()
loss.backward()
print("finished")
"""

# Many small ops: a trace of several MB unless a size limit stops it.
CHURN = """
import torch
w = torch.randn(16, 16, requires_grad=True)
total = 0.0
for step in range(1500):
    x = torch.randn(2, 16)
    loss = torch.tanh(x @ w).sum()
    loss.backward()
    with torch.no_grad():
        w -= 0.001 * w.grad
    w.grad = None
    total += float(loss)
print("trained", 1500)
"""

STARTED = """
import sys
open(sys.argv[1], "w").close()
import torch
print(torch.ones(2).sum())
"""

DATALOADER = """
import sys
import torch
from torch.utils.data import DataLoader, Dataset

class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        # workers use tensors, autograd included
        t = torch.full((4,), float(i), requires_grad=True)
        u = torch.cumprod(t, 0)
        u.sum().backward()
        return t.detach() + t.grad, torch.tensor(i % 2)

if __name__ == "__main__":
    w = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    n = 0
    for x, y in DataLoader(Data(), batch_size=8, num_workers=2):
        loss = ((x * w).sum(1) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += 1
    print("batches", n)
"""


def write_script(name, text):
    path = os.path.join(gtutil.tmpdir(), name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def new_trace_path():
    fd, path = tempfile.mkstemp(suffix=".db", dir=gtutil.tmpdir())
    os.close(fd)
    os.unlink(path)
    return path


def new_marker():
    path = new_trace_path() + ".marker"
    return path


def record_cmd(out, script, *args, options=()):
    return [GRADTRACE, "record", "--python", PYTHON, "-o", out, *options, "--", script,
            *map(str, args)]


def wait_for(path, proc, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def integrity(trace):
    db = sqlite3.connect("file:%s?mode=ro" % trace, uri=True)
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


def run_row(trace):
    db = gtutil.connect(trace)
    try:
        return tuple(db.execute("SELECT status, exit_code, signal FROM run").fetchone())
    finally:
        db.close()


def count(trace, sql):
    db = gtutil.connect(trace)
    try:
        return db.execute(sql).fetchone()[0]
    finally:
        db.close()


def gradtrace(*args):
    return subprocess.run([GRADTRACE, *args], capture_output=True, text=True, timeout=120)


class TestHostile(unittest.TestCase):

    def test_sigkill_mid_backward(self):
        script = write_script("slow_backward.py", SLOW_BACKWARD)
        out, marker = new_trace_path(), new_marker()
        p = subprocess.Popen(record_cmd(out, script, marker), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            self.assertTrue(wait_for(marker, p), "the script never reached its backward")
            time.sleep(0.5)  # a few more batches inside the backward
            p.kill()
        finally:
            p.communicate(timeout=60)
        self.assertEqual(p.returncode, -signal.SIGKILL)
        # readable without the recorder's help; committed batches all there
        info = gradtrace("info", "--json", out)
        self.assertEqual(info.returncode, 0, info.stderr)
        self.assertEqual(integrity(out), "ok")
        status, exit_code, sig = run_row(out)
        self.assertEqual((status, exit_code, sig), ("running", None, None))
        self.assertEqual(count(out, "SELECT count(*) FROM backward_calls"), 1)
        self.assertEqual(count(out, "SELECT status FROM backward_calls"), "running")
        # ops of the forward pass and of the backward's loop were committed
        self.assertGreater(count(out, "SELECT count(*) FROM op_log WHERE phase = 'backward' "
                                      "AND op LIKE 'aten::add%'"), 5)
        diag = gradtrace("diagnose", "--json", out)
        self.assertIn(diag.returncode, (0, 1), diag.stderr)
        self.assertTrue(json.loads(diag.stdout)["partial"])
        text = gradtrace("diagnose", "--color", "never", out)
        self.assertIn("the trace is partial", text.stdout)

    def _signalled(self, signum):
        script = write_script("train.py", TRAIN)
        results = {}
        for mode in ("plain", "recorded"):
            out, marker = new_trace_path(), new_marker()
            cmd = ([PYTHON, script, marker] if mode == "plain"
                   else record_cmd(out, script, marker))
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            try:
                self.assertTrue(wait_for(marker, p), "%s run never started training" % mode)
                p.send_signal(signum)
                _, err = p.communicate(timeout=120)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
            results[mode] = (p.returncode, err, out)
        plain_rc = results["plain"][0]
        rc, err, out = results["recorded"]
        self.assertEqual(rc, plain_rc, "recorded exit status differs from plain:\n" + err)
        self.assertEqual(integrity(out), "ok")
        self.assertEqual(run_row(out), ("signal", -1, int(signum)))
        self.assertEqual(gradtrace("info", out).returncode, 0)
        self.assertIn("gradtrace: stopped by %s; the trace holds everything up to it: %s"
                      % (signal.Signals(signum).name, out), err)
        self.assertNotIn("the run failed", err)
        return plain_rc, err

    def test_sigint(self):
        rc, err = self._signalled(signal.SIGINT)
        self.assertEqual(rc, -signal.SIGINT)  # Python dies of an unhandled SIGINT
        self.assertIn("KeyboardInterrupt", err)

    def test_sigterm(self):
        rc, _ = self._signalled(signal.SIGTERM)
        self.assertEqual(rc, -signal.SIGTERM)

    def test_file_size_limit(self):
        script = write_script("churn.py", CHURN)
        out = new_trace_path()
        limit = 300 * 1024

        def cap():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        plain = subprocess.run([PYTHON, script], capture_output=True, text=True,
                               preexec_fn=cap, timeout=300)
        cp = subprocess.run(record_cmd(out, script), capture_output=True, text=True,
                            preexec_fn=cap, timeout=300)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout, plain.stdout)
        self.assertEqual(cp.stdout, "trained 1500\n")
        warnings = [l for l in gtutil.without_fallback(cp.stderr).splitlines()
                    if l.startswith("gradtrace: recording")]
        self.assertEqual(len(warnings), 1, cp.stderr)
        self.assertIn("recording stopped", warnings[0])
        self.assertLessEqual(os.path.getsize(out), limit)
        # what was committed before the limit is readable
        self.assertEqual(integrity(out), "ok")
        self.assertEqual(gradtrace("info", out).returncode, 0)
        # (how much: the commits before the one the limit refused, one per
        # fold period on the engine adapter, so as many ops as the training
        # thread ran before the fold thread got the CPU: load-dependent)
        self.assertGreater(count(out, "SELECT count(*) FROM ops"), 0)

    def test_unwritable_path(self):
        script = write_script("started.py", STARTED)
        marker = new_marker()
        notdir = write_script("a_file", "")
        for out in (os.path.join(notdir, "trace.db"),
                    os.path.join(gtutil.tmpdir(), "no", "such", "dir", "trace.db")):
            cp = subprocess.run(record_cmd(out, script, marker), capture_output=True,
                                text=True, timeout=120)
            self.assertEqual(cp.returncode, 2, cp.stderr)
            lines = cp.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, cp.stderr)
            self.assertTrue(lines[0].startswith("gradtrace: "), lines[0])
            self.assertIn(out, lines[0])
            self.assertFalse(os.path.exists(marker), "the script ran")
            self.assertFalse(os.path.exists(out))

    _race = None

    def _two_recordings(self):
        """Start a recording; while it runs, record to the same path again,
        without and with --force. Done once, for the two tests below."""
        if TestHostile._race is not None:
            return TestHostile._race
        script = write_script("train.py", TRAIN)
        hold = write_script("hold.py", HOLD)
        out, marker, release = new_trace_path(), new_marker(), new_marker()
        r = {"out": out}
        # the first holds its recording open until both others are done
        first = subprocess.Popen(record_cmd(out, hold, marker, release, 120),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertTrue(wait_for(marker, first), "first recording never started")
            m2, m3 = new_marker(), new_marker()
            r["second"] = subprocess.run(record_cmd(out, script, m2, 30), capture_output=True,
                                         text=True, timeout=300)
            r["second_ran"] = os.path.exists(m2)
            r["forced"] = subprocess.run(record_cmd(out, script, m3, 30, options=["--force"]),
                                         capture_output=True, text=True, timeout=300)
            r["forced_ran"] = os.path.exists(m3)
        finally:
            open(release, "w").close()
            r["first_out"], r["first_err"] = first.communicate(timeout=300)
        r["first_rc"] = first.returncode
        r["integrity"] = integrity(out)
        r["run"] = run_row(out)
        r["calls"] = count(out, "SELECT count(*) FROM backward_calls")
        TestHostile._race = r
        return r

    def test_two_recordings_same_path(self):
        r = self._two_recordings()
        # the second is refused before its script starts: the path exists
        self.assertEqual(r["second"].returncode, 2, r["second"].stderr)
        self.assertIn(r["out"], r["second"].stderr)
        self.assertFalse(r["second_ran"])
        # the first runs to its normal end; the file at the path is whole
        self.assertEqual(r["first_rc"], 0, r["first_err"])
        self.assertEqual(r["first_out"], "done 120\n")
        self.assertEqual(r["integrity"], "ok")
        self.assertEqual(r["run"], ("ok", 0, 0))

    # --force must not unlink a trace another process is still recording
    # (its recording would be lost): the recorder holds a flock on the trace
    # while recording and refuses to replace a locked one.
    def test_force_over_live_recording(self):
        r = self._two_recordings()
        self.assertEqual(r["forced"].returncode, 2, r["forced"].stderr)
        self.assertFalse(r["forced_ran"])
        self.assertEqual(r["calls"], 120)

    def test_dataloader_workers(self):
        script = write_script("loader.py", DATALOADER)
        out = new_trace_path()
        plain = subprocess.run([PYTHON, script], capture_output=True, text=True, timeout=300)
        cp = subprocess.run(record_cmd(out, script), capture_output=True, text=True,
                            timeout=300)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout, "batches 8\n")
        self.assertEqual(integrity(out), "ok")
        self.assertEqual(run_row(out), ("ok", 0, 0))
        # the parent's 8 training steps are there
        self.assertEqual(count(out, "SELECT count(*) FROM backward_calls"), 8)
        # the workers (forked) record nothing and leave the parent's trace
        # alone: their cumprod and their own backward never appear
        self.assertEqual(count(out, "SELECT count(*) FROM op_log WHERE op LIKE "
                                    "'aten::cumprod%'"), 0)
        self.assertEqual(count(out, "SELECT count(*) FROM threads"), 1)
        self.assertEqual(gradtrace("diagnose", out).returncode, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
