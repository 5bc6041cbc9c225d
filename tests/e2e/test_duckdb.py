"""The trace read from DuckDB (its sqlite extension), as schema/SCHEMA.md
shows: every table and view of a recorded seed trace gives the same rows in
DuckDB as in SQLite, the views with recursive queries (backward_reach,
invalidations) through sqlite_query, which hands the query to SQLite.

DuckDB runs in its own virtual environment, $GT_DUCKDB_PYTHON or
$GT_BUILD_DIR/duckdb-venv/bin/python, which scripts/test creates (duckdb,
duckdb_extension_sqlite_scanner and duckdb_extensions from PyPI, so that the
extension needs no download at run time). Without it the test is skipped.

Env: GRADTRACE, GT_SOURCE_DIR, GT_BUILD_DIR (set by ctest).
"""
import json
import os
import sqlite3
import subprocess
import textwrap
import unittest

import gtutil

DUCKDB_PYTHON = os.environ.get("GT_DUCKDB_PYTHON") or os.path.join(
    os.environ.get("GT_BUILD_DIR", ""), "duckdb-venv", "bin", "python")

# Runs in the DuckDB environment: argv[1] the trace, argv[2] a JSON list of
# [name, query run by DuckDB on the attached trace, via_sqlite_query].
# Prints a JSON object name -> rows (as strings), or name -> {"error": ...}.
DUCK = textwrap.dedent("""
    import json, sys
    import duckdb, duckdb_extensions
    con = duckdb.connect()
    duckdb_extensions.import_extension("sqlite_scanner", con=con)
    con.execute("LOAD sqlite_scanner")
    con.execute("ATTACH '%s' AS t (TYPE sqlite, READ_ONLY)" % sys.argv[1].replace("'", "''"))
    out = {}
    for name, query, raw in json.loads(sys.argv[2]):
        if raw:
            query = "SELECT * FROM sqlite_query('t', '%s')" % query.replace("'", "''")
        try:
            out[name] = [[None if v is None else str(v) for v in r]
                         for r in con.execute(query).fetchall()]
        except Exception as e:  # noqa: BLE001 - reported to the test
            out[name] = {"error": str(e).splitlines()[0]}
    print(json.dumps(out))
""")

# Views whose recursive CTE DuckDB cannot hand back to SQLite: DuckDB
# re-prints a view's SQL in its own dialect, `(SELECT ...) UNION (SELECT
# ...)` inside WITH RECURSIVE, which SQLite does not parse.
RECURSIVE = ("backward_reach", "invalidations")


@unittest.skipUnless(os.path.exists(DUCKDB_PYTHON),
                     "no DuckDB environment (scripts/test creates build/duckdb-venv)")
class DuckDB(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace, _ = gtutil.record(gtutil.example("seed_class_weights.py"), expect_fail=True)
        db = sqlite3.connect(cls.trace)
        cls.tables = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        cls.views = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'view' ORDER BY name")]
        db.close()

    def sqlite_rows(self, query):
        db = sqlite3.connect(self.trace)
        try:
            return [[None if v is None else str(v) for v in r] for r in db.execute(query)]
        finally:
            db.close()

    def duck(self, jobs):
        cp = subprocess.run([DUCKDB_PYTHON, "-c", DUCK, self.trace, json.dumps(jobs)],
                            capture_output=True, text=True, timeout=300)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        return json.loads(cp.stdout)

    def test_tables_and_views_match_sqlite(self):
        self.assertEqual(len(self.views), 17)  # v3 added writes, then saved_bytes
        jobs = []
        for name in self.tables + self.views:
            if name in RECURSIVE:
                continue
            jobs.append([name, "SELECT * FROM t.%s" % name, False])
        got = self.duck(jobs)
        for name, _, _ in jobs:
            with self.subTest(name=name):
                self.assertIsInstance(got[name], list, got[name])
                want = sorted(self.sqlite_rows("SELECT * FROM %s" % name), key=repr)
                self.assertEqual(sorted(got[name], key=repr), want)
                if name in ("ops", "op_log", "mutations", "tensor_history"):
                    self.assertGreater(len(want), 5)

    def test_recursive_views_through_sqlite_query(self):
        jobs = []
        for name in RECURSIVE:
            jobs.append([name + "_raw", "SELECT * FROM %s" % name, True])
            jobs.append([name + "_attached", "SELECT * FROM t.%s" % name, False])
        got = self.duck(jobs)
        for name in RECURSIVE:
            with self.subTest(name=name):
                want = sorted(self.sqlite_rows("SELECT * FROM %s" % name), key=repr)
                self.assertGreater(len(want), 0)
                self.assertEqual(sorted(got[name + "_raw"], key=repr), want)
                # what SCHEMA.md says about reading them as attached views
                self.assertIn("error", got[name + "_attached"])

    def test_the_seed_story_in_duckdb(self):
        got = self.duck([[
            "inv", "SELECT DISTINCT names, slot, node_name, saved_version, version_at_backward,"
                   " line, code FROM invalidations ORDER BY line", True]])
        self.assertEqual(got["inv"], [["class_weights", "weight", "NllLossBackward0", "0", "6",
                                       "46", "class_weights[i] *= 1.0 + share"]])


if __name__ == "__main__":
    unittest.main()
