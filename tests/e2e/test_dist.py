"""Distributed training recorded rank by rank, with real processes on CPU
(gloo): torchrun with `gradtrace record` inside (--no-python), mp.spawn
under `gradtrace record`, ranks started by hand with RANK/WORLD_SIZE; then
the traces read together (diagnose, info and sql over several traces).

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

import gtutil
from gtutil import one, rows

SCRIPT = gtutil.scenario("dist_train.py")
TIMEOUT = 240


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_dir():
    return tempfile.mkdtemp(dir=gtutil.tmpdir())


def outputs(outdir):
    """{rank file name: its text} of a run's OUTDIR."""
    res = {}
    for p in sorted(glob.glob(os.path.join(outdir, "rank*.txt"))):
        with open(p) as f:
            res[os.path.basename(p)] = f.read()
    return res


def run(cmd, expect_ok=True, env=None):
    cmd = [str(c) for c in cmd]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    if (cp.returncode == 0) != expect_ok:
        raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s" % (
            " ".join(cmd), cp.returncode, cp.stdout, cp.stderr))
    return cp


def baseline(cmd):
    """The unrecorded run the recorded one is compared with. torch/gloo
    itself sometimes aborts a rank at process exit ("terminate called
    without an active exception", SIGABRT) with no gradtrace loaded; that
    run is tried once more. The recorded runs are never retried."""
    try:
        return run(cmd)
    except AssertionError as e:
        if "terminate called without an active exception" not in str(e):
            raise
        sys.stderr.write("unrecorded baseline aborted in torch teardown; retrying once\n")
        return run(cmd)


def gradtrace(*args):
    return subprocess.run([gtutil.GRADTRACE, *args], capture_output=True, text=True,
                          timeout=TIMEOUT)


def torchrun(nproc, *cmd):
    return [gtutil.PYTHON, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node=%d" % nproc, *cmd]


def record_cmd(out, *script_args):
    return [gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-o", out, "--", SCRIPT,
            *map(str, script_args)]


def run_row(trace):
    db = gtutil.connect(trace)
    db.row_factory = None
    r = db.execute("SELECT rank, local_rank, world_size, backend, launcher_run_id, status,"
                   " end_ns IS NOT NULL FROM run").fetchone()
    db.close()
    return r


class Dist(unittest.TestCase):
    def check_ddp_trace(self, trace, rank, world):
        r = run_row(trace)
        self.assertEqual(r[:4], (rank, rank, world, "gloo"), trace)
        self.assertEqual(r[5:], ("ok", 1), trace)
        db = gtutil.connect(trace)
        # DDP's own collectives, with the user lines that caused them
        colls = rows(db, "SELECT op, phase, code FROM op_log WHERE op LIKE 'c10d::%'")
        ops = {c[0] for c in colls}
        self.assertIn("c10d::broadcast_", ops)  # DDP(...) syncs the parameters
        self.assertIn("c10d::allreduce_", ops)  # the gradient buckets
        # each at the user line that caused it: DDP(...) (parameter sync),
        # the forward (DDP's per-step broadcast), loss.backward() (buckets)
        lines = {"ddp_model = torch.nn.parallel.DistributedDataParallel(model)",
                 "loss = torch.nn.functional.mse_loss(ddp_model(x), y)", "loss.backward()"}
        # (the script's own closing dist.barrier() aside)
        self.assertEqual({c[2] for c in colls if c[0] != "c10d::barrier"}, lines)
        for op, phase, code in colls:
            if op == "c10d::allreduce_":
                self.assertEqual((phase, code), ("backward", "loss.backward()"))
        self.assertGreater(one(db, "SELECT count(*) FROM op_log WHERE op = 'c10d::allreduce_'"
                                   " AND phase = 'backward'"), 0)
        # the bucket all-reduces write (mutated arguments) without a bump
        self.assertGreater(one(db, "SELECT count(*) FROM op_args a JOIN ops o ON o.seq = a.op"
                                   " JOIN strings s ON s.id = o.name"
                                   " WHERE a.role = 2 AND s.text = 'c10d::allreduce_'"), 0)
        self.assertEqual(one(db, "SELECT count(*) FROM version_bumps b JOIN ops o"
                                 " ON o.seq = b.op JOIN strings s ON s.id = o.name"
                                 " WHERE s.text LIKE 'c10d::%'"), 0)
        db.close()

    def check_sql_matches(self, traces):
        """Every table and view over several traces, restricted to one rank,
        holds exactly that trace's rows (gradtrace sql on it alone)."""
        names = gradtrace("sql", "--no-header", traces[0],
                          "SELECT name FROM sqlite_temp_master WHERE type = 'view'"
                          " UNION SELECT name FROM sqlite_schema WHERE type = 'table'"
                          " AND name NOT LIKE 'sqlite_%'").stdout.split()
        self.assertIn("op_log", names)
        self.assertIn("invalidations", names)
        key = lambda row: json.dumps(row, sort_keys=True)  # noqa: E731
        for trace in traces:
            rank = run_row(trace)[0]
            # one statement per table or view, one JSON array per line
            alone = gradtrace("sql", "--json", trace,
                              ";".join("SELECT * FROM %s" % n for n in names))
            together = gradtrace("sql", "--json", *traces,
                                 ";".join("SELECT * FROM %s WHERE rank = %d" % (n, rank)
                                          for n in names))
            self.assertEqual(alone.returncode, 0, alone.stderr)
            self.assertEqual(together.returncode, 0, together.stderr)
            a_lines = alone.stdout.splitlines()
            t_lines = together.stdout.splitlines()
            self.assertEqual(len(a_lines), len(names))
            self.assertEqual(len(t_lines), len(names))
            for name, a, t in zip(names, map(json.loads, a_lines), map(json.loads, t_lines)):
                if name != "run":
                    for row in t:
                        self.assertEqual(row.pop("rank"), rank)
                else:
                    self.assertEqual([r["rank"] for r in t], [rank])
                self.assertEqual(sorted(a, key=key), sorted(t, key=key),
                                 "%s of %s" % (name, trace))

    def test_torchrun_ddp_two_ranks(self):
        plain, recorded, d = new_dir(), new_dir(), new_dir()
        baseline(torchrun(2, SCRIPT, "ddp", plain, 3))
        cp = run(torchrun(2, "--no-python", *record_cmd(os.path.join(d, "run.db"), "ddp",
                                                        recorded, 3)))
        self.assertEqual(outputs(plain), outputs(recorded))  # bit-identical
        self.assertEqual(len(outputs(plain)), 2)
        traces = sorted(glob.glob(os.path.join(d, "*.db")))
        self.assertEqual([os.path.basename(t) for t in traces],
                         ["run.rank0.db", "run.rank1.db"])
        for rank, t in enumerate(traces):
            self.check_ddp_trace(t, rank, 2)
            self.assertIn("gradtrace: trace written to %s" % t, cp.stderr)
        ids = {run_row(t)[4] for t in traces}
        self.assertEqual(len(ids), 1)  # one job: TORCHELASTIC_RUN_ID
        self.assertIsNotNone(ids.pop())

        diag = gradtrace("diagnose", *traces)
        self.assertEqual(diag.returncode, 0, diag.stdout + diag.stderr)
        self.assertIn("no findings on any rank", diag.stdout)
        self.assertEqual(gradtrace("diagnose", d).stdout, diag.stdout)
        info = gradtrace("info", "--json", d)
        self.assertEqual(info.returncode, 0, info.stderr)
        lines = json.loads(info.stdout)
        self.assertEqual([(r["rank"], r["world_size"], r["backend"], r["status"])
                          for r in lines], [(0, 2, "gloo", "ok"), (1, 2, "gloo", "ok")])
        self.check_sql_matches(traces)

    def spawn_like_plain(self, mode, steps, world):
        """Run `mode steps` on `world` spawned ranks, unrecorded and
        recorded; each rank's output must be bit-identical. Returns the
        directory of the traces (run.db, run.rank<R>.db)."""
        plain, recorded, d = new_dir(), new_dir(), new_dir()
        baseline([gtutil.PYTHON, SCRIPT, mode, plain, steps, "--spawn", world,
                  "--port", free_port()])
        run(record_cmd(os.path.join(d, "run.db"), mode, recorded, steps, "--spawn", world,
                       "--port", free_port()))
        self.assertEqual(len(outputs(plain)), world)
        self.assertEqual(outputs(plain), outputs(recorded))
        return d

    def test_spawn_ddp_four_ranks(self):
        d = self.spawn_like_plain("ddp", 2, 4)
        names = sorted(os.path.basename(t) for t in glob.glob(os.path.join(d, "*.db")))
        self.assertEqual(names, ["run.db"] + ["run.rank%d.db" % r for r in range(4)])
        for rank in range(4):
            self.check_ddp_trace(os.path.join(d, "run.rank%d.db" % rank), rank, 4)
        # the launching process: no rank, it only spawned
        self.assertEqual(run_row(os.path.join(d, "run.db"))[:3], (None, None, None))
        diag = gradtrace("diagnose", d)
        self.assertEqual(diag.returncode, 0, diag.stdout + diag.stderr)
        self.assertIn("5 traces", diag.stdout)
        info = gradtrace("info", *glob.glob(os.path.join(d, "run.rank*.db")))
        self.assertEqual(info.returncode, 0, info.stderr)
        self.assertEqual(len(info.stdout.strip().splitlines()), 2 + 4)  # header, rule, ranks

    def test_spawn_fsdp2_is_clean(self):
        # FSDP2 refills a layer's parameters before its backward: a copy
        # under torch.autograd._unsafe_preserve_version_counter into their
        # storage, resized from 0. Both were findings on every step (the
        # copy's version bump, or the storage's new memory as a swap).
        d = self.spawn_like_plain("fsdp", 2, 2)
        for rank in range(2):
            db = gtutil.connect(os.path.join(d, "run.rank%d.db" % rank))
            self.assertEqual(one(db, "SELECT count(*) FROM backward_calls"), 2)
            # the refill is in the trace: a write to a tensor a node saved
            self.assertGreater(one(db, "SELECT count(*) FROM op_args a JOIN ops o"
                                       " ON o.seq = a.op JOIN strings s ON s.id = o.name"
                                       " WHERE a.role = 2 AND s.text LIKE 'fsdp::%'"), 0)
            db.close()
        diag = gradtrace("diagnose", d)
        self.assertEqual(diag.returncode, 0, diag.stdout + diag.stderr)
        self.assertIn("3 traces", diag.stdout)

    def test_all_reduce_on_saved_tensor_is_a_silent_write_on_every_rank(self):
        plain, recorded, d = new_dir(), new_dir(), new_dir()
        baseline([gtutil.PYTHON, SCRIPT, "silent", plain, "--spawn", 2, "--port", free_port()])
        run(record_cmd(os.path.join(d, "run.db"), "silent", recorded, "--spawn", 2,
                       "--port", free_port()))
        self.assertEqual(outputs(plain), outputs(recorded))
        # the wrong gradient itself: every rank got the reduced stats (1 + 2)
        self.assertIn("grad ['0x1.8000000000000p+1'", outputs(plain)["rank0.txt"])
        traces = [os.path.join(d, "run.rank%d.db" % r) for r in range(2)]
        for t in traces:
            db = gtutil.connect(t)
            stats = gtutil.tensors_named(db, "stats")
            self.assertTrue(stats)
            self.assertEqual(gtutil.bumps(db, gtutil.counter_of(db, stats[0])), [])
            # the write itself: in `writes`, without a bump
            self.assertEqual(rows(db, "SELECT op, bumped, version_after, code FROM writes"
                                      " WHERE names = 'stats'"),
                             [("c10d::allreduce_", 0, None, "dist.all_reduce(stats)")])
            one_diag = gradtrace("diagnose", t)
            self.assertEqual(one_diag.returncode, 1, one_diag.stdout)
            self.assertIn("overwritten by the collective c10d::allreduce_", one_diag.stdout)
        diag = gradtrace("diagnose", *traces)
        self.assertEqual(diag.returncode, 1, diag.stdout + diag.stderr)
        self.assertIn("1 distinct finding", diag.stdout)
        self.assertIn("[1] ranks 0-1: stats overwritten by the collective c10d::allreduce_",
                      diag.stdout)
        self.assertIn("dist.all_reduce(stats)  (c10d::allreduce_)", diag.stdout)
        self.assertIn("reduce a copy", diag.stdout)
        js = json.loads(gradtrace("diagnose", "--json", *traces).stdout)
        self.assertEqual(len(js["groups"]), 1)
        g = js["groups"][0]
        self.assertEqual(g["ranks"], [0, 1])
        self.assertEqual(g["finding"]["kind"], "silent_storage_write")
        m = g["finding"]["mutations"][0]
        self.assertEqual((m["op"], m["location"]["code"], m["bump_seq"]),
                         ("c10d::allreduce_", "dist.all_reduce(stats)", None))
        self.assertEqual(g["finding"]["backward"]["location"]["code"], "y.backward()")

    def test_every_collective_writes_its_outputs(self):
        """Each c10d collective gloo runs records its output tensors as
        written, without a version bump, at its own line; send reads."""
        out, d = new_dir(), new_dir()
        run(record_cmd(os.path.join(d, "run.db"), "collectives", out, "--spawn", 2,
                       "--port", free_port()))
        expect = {
            "c10d::broadcast_": ["bcast"], "c10d::allreduce_": ["summed"],
            "c10d::allgather_": [None, None],  # the list's two tensors
            "c10d::_allgather_base_": ["flat"], "c10d::_reduce_scatter_base_": ["part"],
            "c10d::reduce_": ["reduced"], "c10d::scatter_": ["scattered"],
            "c10d::alltoall_base_": ["swapped"],
        }
        for rank in (0, 1):
            db = gtutil.connect(os.path.join(d, "run.rank%d.db" % rank))
            got = {}
            for op, names, bumped, code in rows(
                    db, "SELECT op, names, bumped, code FROM writes"
                        " WHERE op LIKE 'c10d::%' ORDER BY op_seq, pos"):
                self.assertEqual(bumped, 0, op)
                self.assertIn("dist.", code)
                got.setdefault(op, []).append(names)
            want = dict(expect)
            if rank == 1:
                want["c10d::recv_"] = ["received"]
            self.assertEqual(got, want, "rank %d" % rank)
            self.assertEqual(one(db, "SELECT count(*) FROM op_log WHERE op = 'c10d::send'"),
                             1 if rank == 0 else 0)
            db.close()

    def test_api_in_spawned_workers_names_traces_by_rank(self):
        """gradtrace.record("api.db") in each worker, after init_process_group
        and without RANK in the environment: one trace per rank."""
        out = new_dir()
        env = dict(os.environ)
        env.pop("RANK", None)
        run([gtutil.PYTHON, SCRIPT, "api", out, "--spawn", 2, "--port", free_port()],
            env=env)
        for rank in (0, 1):
            trace = os.path.join(out, "api.rank%d.db" % rank)
            self.assertEqual(run_row(trace)[:4], (rank, None, 2, "gloo"))
        self.assertFalse(os.path.exists(os.path.join(out, "api.db")))
        diag = gradtrace("diagnose", os.path.join(out, "api.rank0.db"),
                         os.path.join(out, "api.rank1.db"))
        self.assertEqual(diag.returncode, 1, diag.stdout + diag.stderr)
        self.assertIn("[1] ranks 0-1: stats overwritten by the collective", diag.stdout)

    def test_duckdb_recipe(self):
        """SCHEMA.md's DuckDB block over several rank traces, run as printed
        (with the sqlite extension from PyPI loaded first, as test_duckdb.py
        does), gives every rank's collectives."""
        duck = os.path.join(os.environ.get("GT_BUILD_DIR", ""), "duckdb-venv", "bin",
                            "python")
        if not os.access(duck, os.X_OK):
            self.skipTest("no DuckDB environment (scripts/test creates build/duckdb-venv)")
        with open(os.path.join(gtutil.SOURCE, "schema", "SCHEMA.md")) as f:
            doc = f.read()
        part = doc[doc.index("### The ranks of a distributed run"):]
        code = part[part.index("```python\n") + 10:part.index("```\n", 10)]
        code = code.replace('con.execute("LOAD sqlite")',
                            'import duckdb_extensions\n'
                            'duckdb_extensions.import_extension("sqlite_scanner", con=con)')
        out, d = new_dir(), new_dir()
        run(record_cmd(os.path.join(d, "run.db"), "silent", out, "--spawn", 2,
                       "--port", free_port()))
        cp = subprocess.run([duck, "-c", code], cwd=d, capture_output=True, text=True,
                            timeout=TIMEOUT)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        for rank in (0, 1):
            self.assertRegex(cp.stdout, r"│\s+%d │ c10d::allreduce_ │\s+1 │" % rank)

    def test_rank_killed_mid_run(self):
        out, d = new_dir(), new_dir()
        cp = run(record_cmd(os.path.join(d, "run.db"), "kill", out, 1, 2, "--spawn", 2,
                            "--port", free_port()), expect_ok=False)
        self.assertNotEqual(cp.returncode, 0)
        killed = os.path.join(d, "run.rank1.db")
        alive = os.path.join(d, "run.rank0.db")
        # the killed rank: partial (never closed) but readable up to its kill
        r = run_row(killed)
        self.assertEqual((r[0], r[5], r[6]), (1, "running", 0))
        info = gradtrace("info", killed)
        self.assertEqual(info.returncode, 0, info.stderr)
        self.assertIn("partial trace", info.stdout)
        db = gtutil.connect(killed)
        self.assertGreaterEqual(one(db, "SELECT count(*) FROM backward_calls"), 1)
        db.close()
        # the other rank ended however the launcher ended it, and says so
        # when it got to Python: its collective raised, or SIGTERM came
        r = run_row(alive)
        self.assertEqual(r[0], 0)
        if r[5] == "running":
            # it died in native code before it could say so (gloo may abort
            # a rank whose peer vanished, "terminate called ...", or the
            # launcher SIGKILLs it after its 30 s grace: seen once under
            # load): its trace is partial then, and readable like the
            # killed rank's
            info0 = gradtrace("info", alive)
            self.assertEqual(info0.returncode, 0, info0.stderr)
            self.assertIn("partial trace", info0.stdout)
        else:
            self.assertIn(r[5], ("exception", "signal"))
            self.assertEqual(r[6], 1)
        diag = gradtrace("diagnose", alive, killed)
        self.assertEqual(diag.returncode, 0, diag.stdout + diag.stderr)
        self.assertIn("rank 1    %s: 0 findings; partial trace" % killed, diag.stdout)
        lines = json.loads(gradtrace("info", "--json", alive, killed).stdout)
        self.assertEqual([x["status"] for x in lines][1], "running (killed?)")

    def test_ranks_failing_at_different_steps(self):
        """Two ranks started by hand (as a cluster launcher does): each hits
        its own in-place bug at its own step; diagnose keeps them apart."""
        out, d = new_dir(), new_dir()
        port = free_port()
        procs = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen(
                [gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-o",
                 os.path.join(d, "job.{rank}.db"), "--", SCRIPT, "fail", out],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in procs:
            _, err = p.communicate(timeout=TIMEOUT)
            self.assertEqual(p.returncode, 1, err)
            self.assertIn("modified by an inplace operation", err)
        traces = [os.path.join(d, "job.%d.db" % r) for r in range(2)]
        for rank, t in enumerate(traces):
            r = run_row(t)
            self.assertEqual((r[0], r[1], r[2], r[5]), (rank, rank, 2, "exception"))
            db = gtutil.connect(t)
            # rank r failed in step r + 1: its (r + 1)-th backward call
            self.assertEqual(rows(db, "SELECT id FROM backward_calls WHERE status = 'error'"),
                             [(rank + 1,)])
            db.close()
        diag = gradtrace("diagnose", *traces)
        self.assertEqual(diag.returncode, 1, diag.stdout + diag.stderr)
        self.assertIn("2 distinct findings", diag.stdout)
        self.assertIn("[1] rank 0: out modified in place after SigmoidBackward0", diag.stdout)
        self.assertIn("[2] rank 1: out modified in place after SigmoidBackward0", diag.stdout)
        self.assertIn("(backward #1)", diag.stdout)
        self.assertIn("(backward #2)", diag.stdout)
        self.assertIn("not on the other ranks", diag.stdout)


class BufferBroadcast(unittest.TestCase):
    """DDP's buffer broadcast between two forwards and one backward writes
    BatchNorm's saved running statistics: silent only where backward reads
    them (eval mode), never flagged in training mode."""

    BN = gtutil.scenario("dist_bn_broadcast.py")

    def record(self, case):
        env = dict(os.environ, MASTER_PORT=str(free_port()))
        plain = run([gtutil.PYTHON, self.BN, case], env=env)
        env["MASTER_PORT"] = str(free_port())
        out = os.path.join(new_dir(), "bn.db")
        rec = run([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-q", "-o", out,
                   "--", self.BN, case], env=env)
        self.assertEqual(plain.stdout, rec.stdout)
        db = gtutil.connect(out)
        # the broadcasts were recorded as writes of the running statistics
        self.assertEqual(gtutil.one(db, "SELECT count(*) FROM writes"
                                        " WHERE op = 'c10d::broadcast_'"), 3)
        db.close()
        return gradtrace("diagnose", "--json", out)

    def test_training_mode_is_clean(self):
        r = self.record("train")
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(json.loads(r.stdout)["findings"], [])

    def test_eval_mode_reads_them(self):
        r = self.record("eval")
        self.assertEqual(r.returncode, 1, r.stdout)
        fs = json.loads(r.stdout)["findings"]
        self.assertEqual(sorted(f["saved"]["slot"] for f in fs),
                         ["running_mean", "running_var"], fs)
        with open(self.BN) as f:
            line = [i + 1 for i, l in enumerate(f) if l.rstrip().endswith("# @broadcast")][0]
        for f in fs:
            self.assertEqual(f["kind"], "silent_storage_write")
            self.assertEqual(f["mutations"][0]["op"], "c10d::broadcast_")
            self.assertEqual(f["mutations"][0]["location"]["line"], line)


class Naming(unittest.TestCase):
    """Where `gradtrace record` under a launcher puts rank N's trace, and
    and that recording again keeps the previous one as .old."""

    def test_rank_paths(self):
        d = new_dir()
        script = os.path.join(d, "noop.py")
        with open(script, "w") as f:
            f.write("pass\n")
        for given, expected in [("run.db", "run.rank3.db"), ("trace", "trace.rank3"),
                                ("a.b.db", "a.b.rank3.db"), ("r{rank}/x.db", "r3/x.db")]:
            if "/" in expected:
                os.makedirs(os.path.join(d, os.path.dirname(expected)), exist_ok=True)
            env = dict(os.environ, RANK="3", WORLD_SIZE="4")
            cmd = [gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-o",
                   os.path.join(d, given), "--", script]
            cp = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(cp.returncode, 0, cp.stderr)
            self.assertTrue(os.path.exists(os.path.join(d, expected)), (given, cp.stderr))
            self.assertIn("trace written to %s" % os.path.join(d, expected), cp.stderr)
            r = run_row(os.path.join(d, expected))
            self.assertEqual(r[:3], (3, None, 4))
            again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(again.returncode, 0, again.stderr)
            self.assertIn("kept the previous trace as %s.old" % os.path.join(d, expected),
                          again.stderr)
            self.assertEqual(run_row(os.path.join(d, expected + ".old"))[:3], (3, None, 4))


if __name__ == "__main__":
    unittest.main()
