"""The flight recorder: `gradtrace record --keep-last N` and
`gradtrace.record(path, keep_last=N)`.

A 20,000-step training loop that breaks at its last step, recorded with
--keep-last 2: the trace holds only the last two backward calls (and the
older parameters, nodes and stacks they use), is small, reads with info,
graph and sql without a dangling reference, and diagnose names the culprit
line as a whole recording does. SIGTERM and SIGINT in the middle of a run
leave a readable trace of the last calls; kill -9 leaves the trace written at
the start (empty); a size cap writes the window and says where it stopped.
Both adapters (the engine adapter where it is built).

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

LOOP = gtutil.scenario("keep_last_loop.py")
GAP = gtutil.scenario("keep_last_gap.py")
STEPS = 20000


def marker(tag, script=LOOP):
    with open(script) as f:
        hits = [i + 1 for i, l in enumerate(f) if "# @" + tag in l]
    assert len(hits) == 1, hits
    return hits[0]


def engine_built():
    env = dict(os.environ, GRADTRACE_ADAPTER="engine")
    cp = subprocess.run([gtutil.PYTHON, "-c", "import _gradtrace_engine"], env=env,
                        capture_output=True)
    return cp.returncode == 0


ADAPTERS = ["engine", "dispatch"] if engine_built() else ["dispatch"]

# every reference a reader follows, as (what, SQL counting the dangling ones)
DANGLING = [
    ("op_args.tensor", "SELECT count(*) FROM op_args WHERE tensor NOT IN"
                       " (SELECT id FROM tensors)"),
    ("saved_tensors.tensor", "SELECT count(*) FROM saved_tensors WHERE tensor IS NOT NULL"
                             " AND tensor NOT IN (SELECT id FROM tensors)"),
    ("saved_tensors.node", "SELECT count(*) FROM saved_tensors WHERE node NOT IN"
                           " (SELECT id FROM nodes)"),
    ("edges.next", "SELECT count(*) FROM edges WHERE next IS NOT NULL AND next NOT IN"
                   " (SELECT id FROM nodes)"),
    ("node_execs.node", "SELECT count(*) FROM node_execs WHERE node NOT IN"
                        " (SELECT id FROM nodes)"),
    ("node_execs.backward", "SELECT count(*) FROM node_execs WHERE backward NOT IN"
                            " (SELECT id FROM backward_calls)"),
    ("version_bumps.tensor", "SELECT count(*) FROM version_bumps WHERE tensor NOT IN"
                             " (SELECT id FROM tensors)"),
    ("version_bumps.op", "SELECT count(*) FROM version_bumps WHERE op IS NOT NULL AND op"
                         " NOT IN (SELECT seq FROM ops)"),
    ("tensors.storage", "SELECT count(*) FROM tensors WHERE storage IS NOT NULL AND"
                        " storage NOT IN (SELECT id FROM storages)"),
    ("tensors.created_by", "SELECT count(*) FROM tensors WHERE created_by IS NOT NULL"
                           " AND created_by NOT IN (SELECT seq FROM ops)"),
    ("tensors.alias_of", "SELECT count(*) FROM tensors WHERE alias_of IS NOT NULL AND"
                         " alias_of NOT IN (SELECT id FROM tensors)"),
    ("nodes.op", "SELECT count(*) FROM nodes WHERE op IS NOT NULL AND op NOT IN"
                 " (SELECT seq FROM ops)"),
    ("node_outputs.tensor", "SELECT count(*) FROM node_outputs WHERE tensor NOT IN"
                            " (SELECT id FROM tensors)"),
    ("names.tensor", "SELECT count(*) FROM names WHERE tensor NOT IN"
                     " (SELECT id FROM tensors)"),
    ("backward_roots", "SELECT count(*) FROM backward_roots WHERE node NOT IN"
                       " (SELECT id FROM nodes) OR tensor NOT IN (SELECT id FROM tensors)"),
    ("ops.stack", "SELECT count(*) FROM ops WHERE stack IS NOT NULL AND stack NOT IN"
                  " (SELECT id FROM stacks)"),
]


def adapter_env(adapter):
    return dict(os.environ, GRADTRACE_ADAPTER=adapter)


def diagnose(trace):
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace], capture_output=True,
                       text=True, timeout=300)
    return json.loads(r.stdout)


class KeepLastMixin:
    adapter = None

    def env(self):
        return adapter_env(self.adapter)

    def check_no_dangling(self, db, skip=()):
        for what, sql in DANGLING:
            if what in skip:
                continue
            self.assertEqual(db.execute(sql).fetchone()[0], 0, "%s dangles" % what)

    def check_commands(self, trace, graph=True):
        cmds = [["info", trace], ["sql", trace, "SELECT count(*) FROM ops"]]
        if graph:
            cmds.append(["graph", trace, "-o", trace + ".svg"])
        for cmd in cmds:
            cp = subprocess.run([gtutil.GRADTRACE, *cmd], capture_output=True, text=True,
                                timeout=300)
            self.assertEqual(cp.returncode, 0, (cmd, cp.stderr))
            if cmd[0] == "info":  # the window is said, with its first call
                self.assertRegex(cp.stdout, r"window +the last \d+ backward calls were kept")


class LongLoop(KeepLastMixin):
    steps = STEPS

    @classmethod
    def setUpClass(cls):
        cls.trace, cls.cp = gtutil.record(LOOP, cls.steps, expect_fail=True,
                                          options=("--keep-last", "2"),
                                          env=adapter_env(cls.adapter), timeout=1200)
        cls.db = gtutil.connect(cls.trace)

    def test_only_the_last_two_calls(self):
        calls = [r[0] for r in self.db.execute("SELECT id FROM backward_calls ORDER BY id")]
        self.assertEqual(calls, [self.steps - 1, self.steps])
        keep, seq0, bw0, status = self.db.execute(
            "SELECT keep_last, kept_from_seq, kept_from_backward, status FROM run").fetchone()
        self.assertEqual((keep, bw0, status), (2, self.steps - 1, "exception"))
        first = self.db.execute("SELECT seq FROM backward_calls WHERE id = ?",
                                (self.steps - 1,)).fetchone()[0]
        self.assertLess(seq0, first)
        # nothing of the dropped calls but what the kept ones use
        self.assertEqual(self.db.execute("SELECT count(*) FROM node_execs WHERE seq < ?",
                                         (seq0,)).fetchone()[0], 0)
        ops_per_step = self.db.execute("SELECT count(*) FROM ops WHERE seq >= ?",
                                       (seq0,)).fetchone()[0]
        old_ops = self.db.execute("SELECT count(*) FROM ops WHERE seq < ?",
                                  (seq0,)).fetchone()[0]
        self.assertLess(old_ops, ops_per_step)

    def test_trace_is_small(self):
        self.assertLess(os.path.getsize(self.trace), 1024 * 1024)

    def test_diagnose_names_the_culprit(self):
        f = diagnose(self.trace)["findings"][0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved")
        self.assertTrue(f["matches_error"])
        self.assertEqual(f["backward"]["index"], self.steps)
        self.assertEqual([m["location"]["line"] for m in f["mutations"]], [marker("culprit")])
        self.assertEqual(f["saved"]["names"], ["hidden"])

    def test_references_resolve(self):
        self.check_no_dangling(self.db)

    def test_commands_read_it(self):
        self.check_commands(self.trace)

    def test_results_unchanged(self):
        plain = gtutil.run_plain(LOOP, self.steps)
        self.assertNotEqual(plain.returncode, 0)
        self.assertEqual(self.cp.stdout, plain.stdout)


UNSTABLE = {"id", "seq", "bump_seq", "error_seq", "tensor", "sequence_nr"}


def stable(v):
    """v without the ids and seqs, which differ from run to run."""
    if isinstance(v, dict):
        return {k: stable(x) for k, x in v.items() if k not in UNSTABLE}
    if isinstance(v, list):
        return [stable(x) for x in v]
    return v


def finding_facts(trace):
    """What diagnose says of each finding: kind, node, saved slot and names,
    versions, every mutation's op and line, the suggested fix."""
    return stable(diagnose(trace)["findings"])


class SameAsWhole(KeepLastMixin):
    """diagnose says the same of a kept-last trace as of the whole run's."""

    def test_same_finding(self):
        whole, _ = gtutil.record(LOOP, 300, expect_fail=True, env=self.env())
        kept, _ = gtutil.record(LOOP, 300, expect_fail=True, env=self.env(),
                                options=("--keep-last", "1"))
        a, b = finding_facts(whole), finding_facts(kept)
        self.assertTrue(a)
        self.assertEqual(a, b)
        self.assertLess(os.path.getsize(kept), os.path.getsize(whole))
        db = gtutil.connect(kept)
        self.check_no_dangling(db)
        self.assertEqual([r[0] for r in db.execute("SELECT id FROM backward_calls")], [300])


class Gap(KeepLastMixin):
    """A tensor (a view) no event of the window named until the last step
    uses it again: its row, its base's and its storage's are written again,
    and diagnose names the write as a whole recording does."""

    def test_used_again_after_a_gap(self):
        whole, _ = gtutil.record(GAP, 300, expect_fail=True, env=self.env())
        kept, _ = gtutil.record(GAP, 300, expect_fail=True, env=self.env(),
                                options=("--keep-last", "2"))
        db = gtutil.connect(kept)
        self.check_no_dangling(db)
        self.assertEqual([r[0] for r in db.execute("SELECT id FROM backward_calls")],
                         [299, 300])
        a, b = finding_facts(whole), finding_facts(kept)
        self.assertEqual(a, b)
        f = b[0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved")
        self.assertIn("fixed", f["saved"]["names"])
        self.assertIn(marker("culprit", GAP), [m["location"]["line"] for m in f["mutations"]])


class Signals(KeepLastMixin):
    def start(self, out, keep=3):
        cmd = [gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-o", out,
               "--keep-last", str(keep), "--", LOOP, "0", "wait"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=self.env())
        line = p.stdout.readline()
        self.assertEqual(line.strip(), "looping")
        time.sleep(0.5)  # a few more steps
        return p

    def out(self, name):
        return os.path.join(gtutil.tmpdir(), "%s-%s.db" % (name, self.adapter))

    def check_window(self, trace, keep, status):
        db = gtutil.connect(trace)
        calls = [r[0] for r in db.execute("SELECT id FROM backward_calls ORDER BY id")]
        self.assertTrue(1 <= len(calls) <= keep, calls)
        self.assertGreater(calls[0], 50)
        self.assertEqual(calls, list(range(calls[0], calls[0] + len(calls))))
        self.assertEqual(db.execute("SELECT status FROM run").fetchone()[0], status)
        self.check_no_dangling(db)
        self.check_commands(trace)

    def test_sigterm(self):
        out = self.out("term")
        p = self.start(out)
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=120)
        self.assertEqual(p.returncode, -signal.SIGTERM)
        self.check_window(out, 3, "signal")

    def test_sigint(self):
        out = self.out("int")
        p = self.start(out)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=120)
        self.assertNotEqual(p.returncode, 0)
        self.check_window(out, 3, "signal")

    def test_kill9_keeps_the_trace_written_at_start(self):
        out = self.out("kill")
        p = self.start(out)
        p.kill()
        p.communicate(timeout=120)
        db = gtutil.connect(out)
        self.assertEqual(tuple(db.execute("SELECT keep_last, status FROM run").fetchone()),
                         (3, "running"))
        self.assertEqual(db.execute("SELECT count(*) FROM backward_calls").fetchone()[0], 0)
        self.check_commands(out, graph=False)  # graph: "holds no autograd graph"

    def test_size_cap_writes_the_window(self):
        cap = 400 * 1024
        out, cp = gtutil.record(LOOP, 1000, expect_fail=True, env=self.env(),
                                options=("--keep-last", "100000", "--max-size", str(cap)))
        self.assertLessEqual(os.path.getsize(out), cap)
        db = gtutil.connect(out)
        seq, why = db.execute("SELECT stopped_seq, stopped_reason FROM run").fetchone()
        self.assertIsNotNone(seq)
        self.assertIn("size cap", why)
        # the stop rolls back the batch that crossed the cap: the engine
        # adapter writes an op's output tensor after the op, so the last
        # committed op's output may be in the rolled-back batch (as in a
        # whole recording stopped by the cap)
        self.check_no_dangling(db, skip=("op_args.tensor",))
        self.check_commands(out)

    def test_size_cap_cuts_to_keep_last_first(self):
        # a cap the last 2 calls fit in never stops recording: the calls held
        # beyond them are let go first
        out, cp = gtutil.record(LOOP, 1000, expect_fail=True, env=self.env(),
                                options=("--keep-last", "2", "--max-size", "240K"))
        db = gtutil.connect(out)
        self.assertIsNone(db.execute("SELECT stopped_seq FROM run").fetchone()[0])
        self.assertEqual([r[0] for r in db.execute("SELECT id FROM backward_calls")],
                         [999, 1000])
        self.assertLessEqual(os.path.getsize(out), 240 * 1024)


class PythonApi(unittest.TestCase):
    def test_record_keep_last(self):
        out = os.path.join(gtutil.tmpdir(), "api.db")
        code = ("import sys, torch, gradtrace\n"
                "w = torch.ones(3, requires_grad=True)\n"
                "with gradtrace.record(%r, keep_last=2):\n"
                "    for i in range(40):\n"
                "        (w * i).sum().backward()\n" % out)
        cp = subprocess.run([gtutil.PYTHON, "-c", code], capture_output=True, text=True)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        db = gtutil.connect(out)
        self.assertEqual([r[0] for r in db.execute("SELECT id FROM backward_calls")],
                         [39, 40])
        self.assertEqual(tuple(db.execute("SELECT status, keep_last, json_extract(options,"
                                          " '$.keep_last') FROM run").fetchone()),
                         ("ok", 2, 2))

    def test_bad_options(self):
        code = ("import gradtrace\n"
                "for kw in (dict(keep_last=-1), dict(keep_last=2, backward_calls=(1, 2))):\n"
                "    try:\n"
                "        gradtrace.record('x.db', **kw)\n"
                "    except ValueError as e:\n"
                "        print('ValueError', e)\n")
        cp = subprocess.run([gtutil.PYTHON, "-c", code], capture_output=True, text=True)
        self.assertEqual(cp.stdout.count("ValueError"), 2, cp.stdout + cp.stderr)

    def test_cli_refuses_bad_values(self):
        for opts in (["--keep-last", "0"], ["--keep-last", "x"],
                     ["--keep-last", "2", "--backward-calls", "1-2"]):
            cp = subprocess.run([gtutil.GRADTRACE, "record", *opts, "--", LOOP, "1"],
                                capture_output=True, text=True)
            self.assertEqual(cp.returncode, 2, opts)
            self.assertIn("--keep-last", cp.stderr)
            self.assertTrue(cp.stderr.startswith("gradtrace"), cp.stderr)


# the long loop on the first adapter (the engine's where built, the one to
# leave on); every other case on each adapter
for i, name in enumerate(ADAPTERS):
    tag = name.capitalize()
    if i == 0:
        globals()["LongLoop" + tag] = type("LongLoop" + tag, (LongLoop, unittest.TestCase),
                                           {"adapter": name})
    else:
        globals()["ShortLoop" + tag] = type("ShortLoop" + tag, (LongLoop, unittest.TestCase),
                                            {"adapter": name, "steps": 2000})
    globals()["SameAsWhole" + tag] = type("SameAsWhole" + tag, (SameAsWhole, unittest.TestCase),
                                          {"adapter": name})
    globals()["Gap" + tag] = type("Gap" + tag, (Gap, unittest.TestCase), {"adapter": name})
    globals()["Signals" + tag] = type("Signals" + tag, (Signals, unittest.TestCase),
                                      {"adapter": name})

if __name__ == "__main__":
    unittest.main()
