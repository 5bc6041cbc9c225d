"""Helpers every end-to-end test of recorded PyTorch runs uses.

    trace, cp = gtutil.record(gtutil.scenario("rec_relu_inplace.py"), expect_fail=True)
    db = gtutil.connect(trace)
    gtutil.rows(db, "SELECT ... WHERE x = ?", x)

record() runs `$GRADTRACE record --python <this interpreter> -o TRACE -- script
args...` and returns the trace path and the CompletedProcess (text mode, stdout
and stderr captured). The interpreter is the one running the test (ctest runs
e2e tests with the interpreter the adapter was built for), or $GT_TEST_PYTHON.

Env: GRADTRACE (the built command), GT_SOURCE_DIR, GT_BUILD_DIR.
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("GT_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))
GRADTRACE = os.environ.get("GRADTRACE", "gradtrace")
PYTHON = os.environ.get("GT_TEST_PYTHON", sys.executable)

_tmp = None


def tmpdir():
    """A directory removed when the test process exits."""
    global _tmp
    if _tmp is None:
        _tmp = tempfile.TemporaryDirectory(prefix="gtrec-")
    return _tmp.name


def adapter():
    """The adapter a recording made now uses: GRADTRACE_ADAPTER, else the
    engine adapter where it is built (the default), else dispatch."""
    return adapter_of(None)


def adapter_of(env):
    """adapter() for a recording run with the environment env (None: this
    process's)."""
    env = os.environ if env is None else env
    if env.get("GRADTRACE_ENGINE_SELFTEST") == "fail":
        return "dispatch"
    want = env.get("GRADTRACE_ADAPTER", "").strip().lower()
    if want in ("dispatch", "engine"):
        return want
    cp = subprocess.run([PYTHON, "-c", "import _gradtrace_engine"], capture_output=True)
    return "engine" if cp.returncode == 0 else "dispatch"


def scenario(name):
    """Path of tests/e2e/scenarios/<name>."""
    return os.path.join(HERE, "scenarios", name)


def example(name):
    """Path of examples/<name>."""
    return os.path.join(SOURCE, "examples", name)


# The line a recording through the dispatch adapter prints first on stderr,
# saying why (gradtrace/_engine.py announce)
FALLBACK = "gradtrace: recording through the dispatch adapter: "


def without_fallback(err):
    """stderr text err without the dispatch adapter's line."""
    return "".join(l for l in err.splitlines(True) if not l.startswith(FALLBACK))


def record(script, *args, out=None, expect_fail=False, options=(), env=None, timeout=300,
           cwd=None):
    """Record `script args...`; returns (trace_path, completed_process).
    expect_fail: the script's exit status must be non-zero (else zero);
    options: extra `gradtrace record` options before `--`. The process's
    stderr comes without the dispatch adapter's line (FALLBACK), which a
    recording on the engine adapter must not print (asserted)."""
    if out is None:
        fd, out = tempfile.mkstemp(suffix=".db", dir=tmpdir())
        os.close(fd)
        os.unlink(out)
    cmd = [GRADTRACE, "record", "--python", PYTHON, "-o", out, *options, "--", script,
           *map(str, args)]
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                        cwd=cwd)
    failed = cp.returncode != 0
    if failed != bool(expect_fail):
        raise AssertionError("%s exited %d (expected %s)\nstdout:\n%s\nstderr:\n%s" % (
            " ".join(cmd), cp.returncode, "failure" if expect_fail else "success",
            cp.stdout, cp.stderr))
    if FALLBACK in cp.stderr:
        if adapter_of(env) == "engine":
            raise AssertionError("the engine adapter's recording says:\n" + cp.stderr)
        cp.stderr = without_fallback(cp.stderr)
    return out, cp


def run_plain(script, *args, env=None, timeout=300, cwd=None):
    """Run `python script args...` without recording (for comparisons)."""
    return subprocess.run([PYTHON, script, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=cwd)


def installed_env(venv=None, drop=(), **extra):
    """The environment an installed package runs in (the pip and wheel
    tests): this one minus everything that points into the build tree and
    the names in drop, with venv/bin first on PATH if venv is given."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "GRADTRACE", "GRADTRACE_PYTHON", "GT_BUILD_DIR",
                        "PYTHONHOME", "VIRTUAL_ENV") + tuple(drop)}
    if venv:
        env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def run_checked(cmd, check=True, timeout=900, cwd=None, env=None):
    """Run cmd (text, output captured); if check, raise AssertionError with
    both outputs' ends when it exits non-zero."""
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                        env=env)
    if check and cp.returncode != 0:
        raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s" % (
            " ".join(cmd), cp.returncode, cp.stdout[-4000:], cp.stderr[-4000:]))
    return cp


def connect(trace):
    """Open a trace read-only-ish with sqlite3 (rows as sqlite3.Row)."""
    db = sqlite3.connect("file:%s?mode=ro" % trace, uri=True)
    db.row_factory = sqlite3.Row
    return db


def rows(db, sql, *args):
    """All rows of a query as tuples."""
    return [tuple(r) for r in db.execute(sql, args)]


def one(db, sql, *args):
    """The single value of a query returning one row and one column."""
    r = db.execute(sql, args).fetchall()
    if len(r) != 1 or len(r[0]) != 1:
        raise AssertionError("expected one value from %r %r, got %r" % (
            sql, args, [tuple(x) for x in r]))
    return r[0][0]


def marker(script, tag):
    """The 1-based line of `script` that ends with the comment `# @tag`
    (asserted to be one)."""
    with open(script) as f:
        hits = [i + 1 for i, l in enumerate(f) if l.rstrip().endswith("# @" + tag)]
    assert len(hits) == 1, (script, tag, hits)
    return hits[0]


def diagnose_both(trace):
    """`gradtrace diagnose` of trace, as JSON and as text, run from the
    source tree (paths below it are shown relative): (exit status, the JSON
    document, the text); both exit alike (asserted)."""
    r = subprocess.run([GRADTRACE, "diagnose", "--json", trace], capture_output=True,
                       text=True, timeout=120, cwd=SOURCE)
    t = subprocess.run([GRADTRACE, "diagnose", trace], capture_output=True, text=True,
                       timeout=120, cwd=SOURCE)
    assert r.returncode == t.returncode, (r.returncode, t.returncode)
    return r.returncode, json.loads(r.stdout), t.stdout


def only_finding(test, trace, kind):
    """The one finding of `gradtrace diagnose --json trace`, asserted (on
    test, a TestCase) to be of kind and the command to exit 1."""
    r = subprocess.run([GRADTRACE, "diagnose", "--json", trace], capture_output=True,
                       text=True, timeout=300)
    test.assertEqual(r.returncode, 1, r.stderr[-2000:])
    doc = json.loads(r.stdout)
    test.assertEqual(len(doc["findings"]), 1, r.stdout[:2000])
    f = doc["findings"][0]
    test.assertEqual(f["kind"], kind)
    return f


def user_line(db, stack):
    """(file basename, line, code) of a stack's user frame."""
    r = db.execute(
        "SELECT f.text, fr.line, c.text FROM stacks s JOIN frames fr ON fr.id = s.user_frame"
        " JOIN strings f ON f.id = fr.file LEFT JOIN strings c ON c.id = fr.code"
        " WHERE s.id = ?", (stack,)).fetchone()
    return None if r is None else (os.path.basename(r[0]), r[1], r[2])


def tensors_named(db, name):
    """Ids of tensors bound to variable `name` in the user's frame."""
    return sorted({r[0] for r in db.execute(
        "SELECT n.tensor FROM names n JOIN strings s ON s.id = n.name WHERE s.text = ?",
        (name,))})


def bumps(db, counter):
    """(version, op name, observed, user line number) of every bump of the
    version counter `counter`, in order."""
    return [tuple(r) for r in db.execute(
        "SELECT b.version, s.text, b.observed, fr.line FROM version_bumps b"
        " JOIN tensors t ON t.id = b.tensor"
        " LEFT JOIN ops o ON o.seq = b.op LEFT JOIN strings s ON s.id = o.name"
        " LEFT JOIN stacks st ON st.id = o.stack LEFT JOIN frames fr ON fr.id = st.user_frame"
        " WHERE t.version_counter = ? ORDER BY b.seq", (counter,))]


def saved(db, node_name):
    """(slot, tensor, version, is_output) saved by nodes called node_name."""
    return [tuple(r) for r in db.execute(
        "SELECT sl.text, st.tensor, st.version, st.is_output FROM saved_tensors st"
        " JOIN nodes n ON n.id = st.node JOIN strings nn ON nn.id = n.name"
        " JOIN strings sl ON sl.id = st.slot WHERE nn.text = ? ORDER BY st.seq",
        (node_name,))]


def counter_of(db, tensor):
    """The version counter id of a tensor."""
    return one(db, "SELECT version_counter FROM tensors WHERE id = ?", tensor)


class BothAdapters:
    """Mixin for a unittest.TestCase: runs self.check(adapter) with the
    dispatch adapter, and with the engine adapter where it is built."""

    def test_dispatch_adapter(self):
        self.check("dispatch")

    def test_engine_adapter(self):
        if adapter() != "engine":
            self.skipTest("engine adapter not built")
        self.check("engine")
