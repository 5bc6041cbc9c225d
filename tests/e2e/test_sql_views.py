"""End-to-end tests of the trace views, `gradtrace sql` and the cookbook on
real recorded PyTorch runs: the seed bug (examples/seed_class_weights.py),
its fixed version, and small scenarios written here. The invalidations view
must agree with `gradtrace diagnose --json` on every scenario: same saved
tensors, same mutations, same lines.

Env: GRADTRACE (the built command), GT_SOURCE_DIR.
"""
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import unittest

GRADTRACE = os.environ.get("GRADTRACE", "gradtrace")
SOURCE = os.environ.get(
    "GT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SEED = os.path.join(SOURCE, "examples", "seed_class_weights.py")

# Small scripts: each ends in a backward call that PyTorch refuses (or not).
SCENARIOS = {
    # ExpBackward0 saves its output; the in-place add_ on it invalidates it.
    "exp_output": """
        import torch
        x = torch.randn(5, requires_grad=True)
        y = x.exp()
        y.add_(1)
        y.sum().backward()
    """,
    # retain_graph=True keeps the graph; a no_grad in-place change between
    # the two backward calls breaks the second one.
    "retain_graph": """
        import torch
        x = torch.randn(4, requires_grad=True)
        a = x * 2
        b = a * a
        loss = b.sum()
        loss.backward(retain_graph=True)
        with torch.no_grad():
            a.add_(1)
        loss.backward()
    """,
    # A view of a saved tensor is written: same version counter.
    "view_write": """
        import torch
        w = torch.randn(3, 3, requires_grad=True)
        h = w * 1.0
        s = torch.sigmoid(h)
        s[0].zero_()
        s.sum().backward()
    """,
    # Nothing wrong: no invalidation, no finding.
    "clean": """
        import torch
        x = torch.randn(4, requires_grad=True)
        y = (x * x).sum()
        y.backward()
        with torch.no_grad():
            x.add_(1)
    """,
}


def sh(*args, input=None, check=True):
    r = subprocess.run(args, capture_output=True, text=True, input=input)
    if check and r.returncode != 0:
        raise AssertionError(f"{args} exited {r.returncode}: {r.stderr}")
    return r


def record(path, script, *args):
    """Record `script` into `path` with this interpreter; the script may
    raise (the seed does)."""
    r = subprocess.run([GRADTRACE, "record", "--python", sys.executable, "-o", path, "--",
                        script, *args], capture_output=True, text=True)
    if not os.path.exists(path):
        raise AssertionError(f"no trace written for {script}: {r.stderr}")
    return r


def sql(trace, query, *params):
    """Run a query through `gradtrace sql --json`; rows as dicts."""
    args = [GRADTRACE, "sql", "--json"]
    for p in params:
        args += ["-p", p]
    r = sh(*args, trace, query)
    return json.loads(r.stdout)


def diagnose(trace):
    r = sh(GRADTRACE, "diagnose", "--json", trace, check=False)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def line_of(path, text):
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return n
    raise AssertionError(f"{text!r} not in {path}")


def cookbook():
    """(title, sql) pairs of the "## Cookbook" section of schema/SCHEMA.md."""
    with open(os.path.join(SOURCE, "schema", "SCHEMA.md"), encoding="utf-8") as f:
        md = f.read()
    sec = md[md.index("\n## Cookbook\n"):]
    nxt = sec.find("\n## ", 5)
    if nxt >= 0:
        sec = sec[:nxt]
    return re.findall(r"\n### (.*?)\n.*?```sql\n(.*?)```", sec, re.S)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Recorded(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="gt_e2e_sql_")
        cls.seed = os.path.join(cls.tmp, "seed.db")
        record(cls.seed, SEED)
        cls.fixed = os.path.join(cls.tmp, "fixed.db")
        record(cls.fixed, SEED, "--fixed")
        cls.scenarios = {}
        for name, body in SCENARIOS.items():
            script = os.path.join(cls.tmp, name + ".py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(body))
            trace = os.path.join(cls.tmp, name + ".db")
            record(trace, script)
            cls.scenarios[name] = (script, trace)
        cls.mut_line = line_of(SEED, "class_weights[i] *= 1.0 + share")
        cls.loss_line = line_of(SEED, "loss = F.nll_loss(")
        cls.backward_line = line_of(SEED, "loss.backward()")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- the seed bug ------------------------------------------------

    def test_seed_mutations(self):
        rows = sql(self.seed, "SELECT * FROM mutations WHERE line = ?1 ORDER BY seq"
                   .replace("?1", str(self.mut_line)))
        self.assertEqual(len(rows), 6, rows)
        self.assertEqual([r["version_after"] for r in rows], [1, 2, 3, 4, 5, 6])
        self.assertEqual([r["version_before"] for r in rows], [0, 1, 2, 3, 4, 5])
        for r in rows:
            self.assertTrue(r["file"].endswith("seed_class_weights.py"), r)
            self.assertEqual(r["code"], "class_weights[i] *= 1.0 + share")
            self.assertIn("class_weights", r["names"].split(", "))
            self.assertIsNotNone(r["op"])
        # the others are the layers' initialisation (uniform_), not on that line
        others = sql(self.seed, "SELECT DISTINCT op FROM mutations WHERE line <> ?1"
                     .replace("?1", str(self.mut_line)))
        self.assertEqual({r["op"] for r in others}, {"aten::uniform_"})

    def test_seed_saved(self):
        rows = sql(self.seed, "SELECT * FROM saved WHERE slot = 'weight'")
        self.assertEqual(len(rows), 1, rows)
        r = rows[0]
        self.assertEqual(r["node_name"], "NllLossBackward0")
        self.assertEqual(r["dtype"], "float32")
        self.assertEqual(json.loads(r["shape"]), [3])
        self.assertEqual(r["saved_version"], 0)
        self.assertEqual(r["line"], self.loss_line)
        self.assertIn("class_weights", r["names"].split(", "))
        if r["nbytes"] is not None:
            self.assertEqual(r["nbytes"], 12)
        mem = sql(self.seed, "SELECT * FROM saved_memory WHERE node_name = 'NllLossBackward0'")
        self.assertEqual(len(mem), 1)
        self.assertGreaterEqual(mem[0]["saved"], 1)

    def test_seed_invalidations(self):
        rows = sql(self.seed, "SELECT * FROM invalidations ORDER BY mutation_seq")
        self.assertEqual(len(rows), 6, rows)
        for r in rows:
            self.assertEqual(r["backward"], 1)
            self.assertEqual(r["node_name"], "NllLossBackward0")
            self.assertEqual(r["slot"], "weight")
            self.assertEqual(r["saved_version"], 0)
            self.assertEqual(r["version_at_backward"], 6)  # PyTorch: "is at version 6"
            self.assertEqual(r["line"], self.mut_line)
            self.assertEqual(r["saved_line"], self.loss_line)
            self.assertEqual(r["backward_line"], self.backward_line)
        self.assertEqual([r["version_after"] for r in rows], [1, 2, 3, 4, 5, 6])

    def test_seed_logs_and_history(self):
        bw = sql(self.seed, "SELECT * FROM backward_log")
        self.assertEqual(len(bw), 1)
        self.assertEqual(bw[0]["status"], "error")
        self.assertEqual(bw[0]["line"], self.backward_line)
        self.assertEqual(bw[0]["error_type"], "RuntimeError")
        self.assertIn("is at version 6; expected version 0", bw[0]["error"])
        self.assertGreaterEqual(bw[0]["roots"], 1)
        errs = sql(self.seed, "SELECT * FROM error_log")
        self.assertEqual(len(errs), 1)
        self.assertEqual(errs[0]["type"], "RuntimeError")
        self.assertEqual(errs[0]["backward"], 1)
        self.assertEqual(errs[0]["line"], self.backward_line)
        frames = sql(self.seed, "SELECT * FROM stack_frames WHERE stack = ?1 ORDER BY depth"
                     .replace("?1", str(errs[0]["stack"])))
        user = [f for f in frames if f["is_user"]]
        self.assertEqual(user[0]["line"], self.backward_line)
        hist = sql(self.seed, """
            SELECT kind, count(*) AS n FROM tensor_history
            WHERE version_counter IN (SELECT version_counter FROM variables
                                      WHERE name = 'class_weights')
            GROUP BY kind""")
        kinds = {r["kind"]: r["n"] for r in hist}
        self.assertEqual(kinds.get("bump"), 6, kinds)
        self.assertEqual(kinds.get("saved"), 1, kinds)
        self.assertGreaterEqual(kinds.get("created", 0), 1, kinds)
        self.assertGreaterEqual(kinds.get("name", 0), 1, kinds)
        ops = sql(self.seed, "SELECT phase, count(*) AS n FROM op_log GROUP BY phase")
        self.assertIn("forward", {r["phase"] for r in ops})
        ev = sql(self.seed, "SELECT count(*) AS n, count(DISTINCT seq) AS d FROM events")
        self.assertEqual(ev[0]["n"], ev[0]["d"])

    def test_fixed_has_no_invalidation(self):
        self.assertEqual(sql(self.fixed, "SELECT count(*) AS n FROM invalidations")[0]["n"], 0)
        bw = sql(self.fixed, "SELECT status FROM backward_log ORDER BY id")
        self.assertEqual([r["status"] for r in bw], ["ok", "ok"])
        self.assertEqual(sql(self.fixed, "SELECT count(*) AS n FROM error_log")[0]["n"], 0)
        # the clone is mutated instead: the bumps are still there
        n = sql(self.fixed, "SELECT count(*) AS n FROM mutations WHERE line = ?1"
                .replace("?1", str(self.mut_line)))[0]["n"]
        self.assertEqual(n, 12)

    # ---- agreement with diagnose -------------------------------------

    def assert_agrees(self, trace):
        """Same (backward, node, slot, tensor) pairs, same bumps and lines."""
        d = diagnose(trace)
        want = set()
        for f in d["findings"]:
            if f["kind"] != "inplace_invalidated_saved":
                continue
            for m in f["mutations"]:
                want.add((f["backward"]["index"], f["node"]["id"], f["saved"]["slot"],
                          f["saved"]["tensor"], f["saved"]["saved_version"],
                          f["saved"]["version_at_backward"], m["bump_seq"],
                          m["location"]["line"] if m["location"] else None))
        got = {(r["backward"], r["node"], r["slot"], r["tensor"], r["saved_version"],
                r["version_at_backward"], r["mutation_seq"], r["line"])
               for r in sql(trace, "SELECT * FROM invalidations")}
        self.assertEqual(got, want, trace)
        return got

    def test_agrees_with_diagnose_seed(self):
        self.assertEqual(len(self.assert_agrees(self.seed)), 6)
        self.assertEqual(len(self.assert_agrees(self.fixed)), 0)

    def test_agrees_with_diagnose_scenarios(self):
        counts = {name: len(self.assert_agrees(trace))
                  for name, (_, trace) in self.scenarios.items()}
        self.assertEqual(counts["clean"], 0)
        for name in ("exp_output", "retain_graph", "view_write"):
            self.assertGreaterEqual(counts[name], 1, name)

    def test_scenarios_content(self):
        script, trace = self.scenarios["exp_output"]
        rows = sql(trace, "SELECT * FROM invalidations")
        self.assertEqual({(r["node_name"], r["slot"]) for r in rows},
                         {("ExpBackward0", "result")})
        self.assertEqual({r["line"] for r in rows}, {line_of(script, "y.add_(1)")})
        saved = sql(trace, "SELECT * FROM saved WHERE node_name = 'ExpBackward0'")
        self.assertEqual([r["is_output"] for r in saved], [1])

        script, trace = self.scenarios["retain_graph"]
        rows = sql(trace, "SELECT DISTINCT backward, line, names FROM invalidations")
        self.assertEqual({r["backward"] for r in rows}, {2})
        self.assertEqual({r["line"] for r in rows}, {line_of(script, "a.add_(1)")})
        bw = sql(trace, "SELECT id, status, retain_graph FROM backward_log ORDER BY id")
        self.assertEqual([(r["status"], r["retain_graph"]) for r in bw],
                         [("ok", 1), ("error", 0)])

        script, trace = self.scenarios["view_write"]
        rows = sql(trace, "SELECT DISTINCT node_name, line FROM invalidations")
        self.assertEqual({r["line"] for r in rows}, {line_of(script, "s[0].zero_()")})
        self.assertIn("SigmoidBackward0", {r["node_name"] for r in rows})

    # ---- the cookbook ------------------------------------------------

    def test_cookbook(self):
        err = sql(self.seed, "SELECT seq FROM error_log")[0]["seq"]
        params = ["name=class_weights", f"seq={err}", "file=seed_class_weights.py",
                  f"line={self.mut_line}", "backward=1"]
        recipes = cookbook()
        self.assertGreaterEqual(len(recipes), 8)
        results = {}
        for title, query in recipes:
            results[title] = sql(self.seed, query, *params)
        r = results["Which lines mutate tensors most?"]
        self.assertEqual((r[0]["line"], r[0]["bumps"]), (self.mut_line, 6))
        r = results["Which saved tensors were invalidated, and by which lines?"]
        self.assertEqual(len(r), 1)
        self.assertEqual((r[0]["node_name"], r[0]["slot"], r[0]["mutations"],
                          r[0]["lines"], r[0]["version_at_backward"]),
                         ("NllLossBackward0", "weight", 6, str(self.mut_line), 6))
        r = results["What wrote to the storage of a variable?"]
        self.assertEqual([x["line"] for x in r], [self.mut_line] * 6)
        r = results["Which saved tensors hold the most memory?"]
        self.assertTrue(1 <= len(r) <= 10)
        sizes = [x["nbytes"] or 0 for x in r]
        self.assertEqual(sizes, sorted(sizes, reverse=True))
        r = results["Memory held by saved tensors, per node type"]
        self.assertIn("NllLossBackward0", {x["node_name"] for x in r})
        r = results["How many ops ran in each phase?"]
        total = sql(self.seed, "SELECT count(*) AS n FROM ops")[0]["n"]
        self.assertEqual(sum(x["ops"] for x in r), total)
        r = results["The full stack of one event"]
        self.assertEqual(r[0]["depth"], 0)
        self.assertIn((self.backward_line, 1), {(x["line"], x["is_user"]) for x in r})
        r = results["Everything that happened on one source line"]
        self.assertEqual(sum(1 for x in r if x["kind"] == "bump"), 6)
        r = results["The history of a variable, views included"]
        self.assertEqual(sum(1 for x in r if x["kind"] == "bump"), 6)
        self.assertIn("saved", {x["kind"] for x in r})
        r = results["Which backward calls failed, and why?"]
        self.assertEqual([(x["id"], x["error_type"]) for x in r], [(1, "RuntimeError")])
        r = results["What a backward call reaches, and what those nodes saved"]
        self.assertEqual(r[0]["depth"], 0)
        self.assertIn("NllLossBackward0", {x["node_name"] for x in r})
        self.assertEqual(len(results), len(recipes))

    # ---- read-only, and other clients -----------------------------------

    def test_refuses_writes_and_leaves_trace_identical(self):
        before = sha(self.seed)
        for q in ("DELETE FROM ops", "UPDATE run SET status = 'ok'", "DROP VIEW op_log",
                  f"ATTACH '{self.tmp}/other.db' AS o", "PRAGMA user_version = 9",
                  "PRAGMA journal_mode = WAL", f"VACUUM INTO '{self.tmp}/copy.db'",
                  "CREATE TABLE t (x)"):
            r = sh(GRADTRACE, "sql", self.seed, q, check=False)
            self.assertEqual(r.returncode, 2, q)
            self.assertIn("refused", r.stderr, q)
        self.assertEqual(sha(self.seed), before)
        self.assertFalse(os.path.exists(f"{self.tmp}/other.db"))
        self.assertFalse(os.path.exists(f"{self.tmp}/copy.db"))
        r = sh(GRADTRACE, "sql", self.seed, "SELECT nosuch FROM ops", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "gradtrace: sql: no such column: nosuch\n")

    def test_views_in_other_clients(self):
        con = sqlite3.connect(f"file:{self.seed}?mode=ro", uri=True)
        for view in ("op_log", "mutations", "saved", "invalidations", "tensor_history",
                     "saved_memory", "backward_log", "error_log", "stack_frames",
                     "variables", "tensor_info", "graph_edges", "backward_reach", "events"):
            con.execute(f"SELECT * FROM {view}").fetchall()
        n = con.execute("SELECT count(*) FROM invalidations").fetchone()[0]
        con.close()
        self.assertEqual(n, 6)
        if shutil.which("sqlite3"):
            r = sh("sqlite3", "-readonly", self.seed,
                   "SELECT count(*) FROM invalidations; SELECT count(*) FROM mutations;")
            self.assertEqual(r.stdout, "6\n10\n")

    def test_table_on_a_terminal(self):
        """On a TTY the default is an aligned table, long cells cut at 60."""
        import pty
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(GRADTRACE, [GRADTRACE, "sql", self.seed,
                                 "SELECT id, status, error FROM backward_log"])
        out = b""
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        lines = out.decode().replace("\r\n", "\n").splitlines()
        self.assertEqual(lines[0].split(), ["id", "status", "error"])
        self.assertEqual(lines[1], "--  ------  " + "-" * 60)
        self.assertEqual(lines[2], " 1  error   " + "one of the variables needed for "
                         "gradient computation has ...")
        self.assertEqual(len(lines), 3)
        # piped: tab-separated, nothing cut
        r = sh(GRADTRACE, "sql", self.seed, "SELECT id, status, error FROM backward_log")
        self.assertTrue(r.stdout.startswith("id\tstatus\terror\n1\terror\tone of"))
        self.assertIn("expected version 0 instead", r.stdout)

    def test_info(self):
        r = sh(GRADTRACE, "info", self.seed)
        self.assertIn("status     exception", r.stdout)
        self.assertIn(f"seed_class_weights.py:{self.backward_line}", r.stdout)
        self.assertIn("RuntimeError", r.stdout)
        j = json.loads(sh(GRADTRACE, "info", "--json", self.seed).stdout)
        self.assertEqual(j["run"]["engine"], "pytorch")
        self.assertEqual(j["run"]["status"], "exception")
        # 4 uniform_ initialising the two Linear layers, 6 on the class weights
        self.assertEqual(j["counts"]["version_bumps"], 10)
        self.assertEqual(len(j["backward_calls"]), 1)
        self.assertEqual(j["backward_calls"][0]["status"], "error")
        self.assertEqual(j["errors"][0]["line"], self.backward_line)
        j = json.loads(sh(GRADTRACE, "info", "--json", self.fixed).stdout)
        self.assertEqual(j["run"]["status"], "ok")
        self.assertEqual([b["status"] for b in j["backward_calls"]], ["ok", "ok"])
        self.assertEqual(j["errors"], [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
