"""The pip route, as a user meets it: `pip wheel .` from the source tree
(scikit-build-core, pip's isolated build environment), the wheel installed
into a fresh venv that has torch 2.13.0, then the installed `gradtrace`
command, `python -m gradtrace` and `import gradtrace` used with no
PYTHONPATH and no build tree.

One wheel build and one venv for the whole file (setUpModule): the build is
the slow part (the C project, compiled once, about a minute on two cores).
The venv's torch comes from pip's local wheel cache (`pip install
torch==2.13.0`, never plain `torch`).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import gtutil

PY = sys.executable
TMP = None
VENV = None
WHEEL = None
INSTALL_LOG = ""


def clean_env(**extra):
    """The environment minus everything that points into the build tree."""
    return gtutil.installed_env(**extra)


def run(cmd, check=True, timeout=900, cwd=None, env=None):
    return gtutil.run_checked(cmd, check=check, timeout=timeout, cwd=cwd or TMP,
                              env=env or clean_env())


def bin_(name):
    return os.path.join(VENV, "bin", name)


def setUpModule():
    global TMP, VENV, WHEEL, INSTALL_LOG
    TMP = tempfile.mkdtemp(prefix="gtpip-")
    dist = os.path.join(TMP, "dist")
    # the build directory outside the source tree: nothing left behind,
    # nothing reused from an earlier build
    run([PY, "-m", "pip", "wheel", "--no-deps", "-w", dist,
         "-C", "build-dir=" + os.path.join(TMP, "wheel-build"), gtutil.SOURCE],
        timeout=1800)
    wheels = glob.glob(os.path.join(dist, "gradtrace-*.whl"))
    assert len(wheels) == 1, wheels
    WHEEL = wheels[0]
    VENV = os.path.join(TMP, "venv")
    run([PY, "-m", "venv", VENV])
    run([bin_("python"), "-m", "pip", "install", "-q", "torch==2.13.0"], timeout=1800)
    INSTALL_LOG = run([bin_("python"), "-m", "pip", "install", WHEEL]).stdout


def tearDownModule():
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


class Wheel(unittest.TestCase):
    def test_contents(self):
        """The wheel holds the package, the command, the pin and every
        extension module the build made (found generically)."""
        import zipfile
        names = zipfile.ZipFile(WHEEL).namelist()
        for want in ("gradtrace/__init__.py", "gradtrace/__main__.py", "gradtrace/run.py",
                     "gradtrace/_bin/gradtrace", "gradtrace/_build.py"):
            self.assertIn(want, names)
        exts = sorted(n.split(".")[0] for n in names if n.endswith(".so") and "/" not in n)
        self.assertIn("_gradtrace", exts)
        self.assertIn("_gtinspect", exts)
        # pip's isolated build finds the environment's torch 2.13 and builds
        # the engine adapter for it
        self.assertIn("_gradtrace_engine", exts)
        # the pytest plugin is registered through the pytest11 entry point
        z = zipfile.ZipFile(WHEEL)
        eps = z.read([n for n in names if n.endswith(".dist-info/entry_points.txt")][0])
        self.assertIn(b"[pytest11]\ngradtrace = gradtrace.pytest_plugin", eps)
        self.assertIn(b"[console_scripts]\ngradtrace = gradtrace.__main__:main", eps)
        # nothing of the build tree: no tests, no benchmarks
        self.assertFalse([n for n in names if os.path.basename(n).startswith(
            ("test_", "bench_"))], names)

    def test_torch_left_alone(self):
        """Installing the wheel neither reinstalls nor upgrades torch."""
        self.assertNotIn("torch", INSTALL_LOG.replace("gradtrace", "").lower()
                         .split("successfully installed")[-1])
        self.assertNotIn("Uninstalling torch", INSTALL_LOG)
        v = run([bin_("python"), "-c", "import torch; print(torch.__version__)"]).stdout
        self.assertEqual(v.strip(), "2.13.0+cpu")

    def test_one_version(self):
        """pip, gradtrace.__version__ and `gradtrace --version` say the
        wheel's version; --version names the engine's torch."""
        want = os.path.basename(WHEEL).split("-")[1]
        got = run([bin_("python"), "-c", "import gradtrace; print(gradtrace.__version__)"])
        self.assertEqual(got.stdout.strip(), want)
        out = run([bin_("gradtrace"), "--version"]).stdout.splitlines()
        self.assertEqual(out[0].split()[:2], ["gradtrace", want])
        self.assertEqual(out[1], "adapters: engine (torch 2.13.0+cpu), dispatch")

    def test_pinned_to_the_build_torch(self):
        pin = run([bin_("python"), "-c",
                   "from gradtrace import _build; print(_build.TORCH_VERSION)"]).stdout
        self.assertEqual(pin.strip(), "2.13.0+cpu")


class EngineNotBuilt(unittest.TestCase):
    def test_warning_reaches_the_terminal(self):
        """Configured for an interpreter without torch, as a package build
        (SKBUILD), the build warns that the engine adapter is not built, on
        the terminal too (pip hides a successful build's output): run under
        `script`, which gives it one. The adapters it reports say why."""
        venv = os.path.join(TMP, "no-torch")
        run([PY, "-m", "venv", "--without-pip", venv])
        log = os.path.join(TMP, "tty.log")
        cmd = ("cmake -S %s -B %s -DSKBUILD=2 -DGT_TESTS=OFF -DGT_PYTHON=%s >%s 2>&1" % (
            gtutil.SOURCE, os.path.join(TMP, "no-torch-build"),
            os.path.join(venv, "bin", "python"), os.path.join(TMP, "cmake.log")))
        run(["script", "-qec", cmd, log])
        with open(log, errors="replace") as f:
            tty = f.read()
        self.assertRegex(tty, r"gradtrace: no engine adapter \(\S+ does not import torch\): "
                         r"traces will be recorded through the dispatch adapter")
        with open(os.path.join(TMP, "cmake.log")) as f:
            out = " ".join(f.read().split())
        self.assertIn("CMake Warning", out)
        self.assertRegex(out, r"-- gradtrace adapters: dispatch \(engine: \S+ does not "
                         r"import torch\)")


class MissingLibrary(unittest.TestCase):
    def test_one_line_names_the_debian_package(self):
        """Without SQLite's (or Graphviz's) development files the install
        stops with one line naming the Debian package."""
        empty = tempfile.mkdtemp(dir=TMP)
        for hide, want in (("sqlite3", "apt-get install libsqlite3-dev"),
                           ("libcgraph", "apt-get install libgraphviz-dev")):
            # a pkg-config directory holding every .pc file but the one hidden
            pc = os.path.join(empty, hide)
            os.makedirs(pc)
            out = subprocess.run(["pkg-config", "--variable", "pc_path", "pkg-config"],
                                 capture_output=True, text=True).stdout.strip()
            for d in out.split(":"):
                for f in glob.glob(os.path.join(d, "*.pc")):
                    if not os.path.basename(f).startswith(hide):
                        dst = os.path.join(pc, os.path.basename(f))
                        if not os.path.exists(dst):
                            os.symlink(f, dst)
            cp = run([PY, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                      "-w", os.path.join(empty, "dist"),
                      "-C", "build-dir=" + os.path.join(empty, "build-" + hide),
                      gtutil.SOURCE], check=False, env=clean_env(PKG_CONFIG_LIBDIR=pc))
            self.assertNotEqual(cp.returncode, 0)
            lines = [ln.strip() for ln in (cp.stdout + cp.stderr).splitlines()
                     if want in ln]
            self.assertTrue(lines, cp.stdout[-3000:] + cp.stderr[-3000:])
            self.assertTrue(lines[0].startswith("gradtrace needs"), lines)


class Installed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(dir=TMP)
        cls.script = gtutil.example("seed_class_weights.py")
        cls.trace = os.path.join(cls.dir, "seed.db")
        cls.cp = run([bin_("gradtrace"), "record", "-o", cls.trace, "--", cls.script],
                     check=False, cwd=cls.dir)

    def test_record_prints_the_diagnosis(self):
        cp = self.cp
        self.assertEqual(cp.returncode, 1, cp.stderr)
        err = cp.stderr
        tb = err.index("RuntimeError: one of the variables needed")
        diag = err.index("[1] class_weights modified in place after NllLossBackward0")
        self.assertLess(tb, diag, err)
        self.assertIn("modified at %s:46" % self.script, err)
        self.assertTrue(err.rstrip().endswith("diagnose it with: gradtrace diagnose %s"
                                              % self.trace), err[-300:])
        run_row = run([bin_("gradtrace"), "sql", self.trace, "--json",
                       "SELECT json_extract(options, '$.adapter') AS a, "
                       "gradtrace_version AS v FROM run"]).stdout
        row = json.loads(run_row)[0]
        self.assertEqual(row["a"], "engine")
        self.assertEqual(row["v"], os.path.basename(WHEEL).split("-")[1])

    def test_diagnose_options_after_the_trace(self):
        cp = run([bin_("gradtrace"), "diagnose", self.trace, "--json"], check=False)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        doc = json.loads(cp.stdout)
        self.assertEqual(doc["findings"][0]["kind"], "inplace_invalidated_saved")
        self.assertEqual(doc["findings"][0]["saved"]["names"], ["class_weights"])

    def test_python_m_gradtrace(self):
        cp = run([bin_("python"), "-m", "gradtrace", "diagnose", self.trace], check=False)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        self.assertIn("1 finding", cp.stdout)

    def test_import_and_open(self):
        code = textwrap.dedent("""
            import sys, gradtrace
            assert not any("build" in p for p in sys.path if p), sys.path
            t = gradtrace.open(sys.argv[1])
            d = t.diagnose()
            print(d["findings"][0]["saved"]["slot"])
            print(t.sql("SELECT count(*) FROM backward_calls")[0][0])
            print(t.graph().svg()[:5])
        """)
        cp = run([bin_("python"), "-c", code, self.trace])
        self.assertEqual(cp.stdout.split(), ["weight", "1", "<?xml"])

    def test_context_manager_records(self):
        path = os.path.join(self.dir, "cm.db")
        code = textwrap.dedent("""
            import sys, torch, gradtrace
            with gradtrace.record(sys.argv[1]):
                x = torch.ones(3, requires_grad=True)
                (x * 2).sum().backward()
            print(gradtrace.open(sys.argv[1]).sql("SELECT count(*) FROM backward_calls")[0][0])
        """)
        self.assertEqual(run([bin_("python"), "-c", code, path]).stdout.strip(), "1")

    def test_record_module(self):
        pkg = os.path.join(self.dir, "mypkg")
        os.makedirs(pkg, exist_ok=True)
        with open(os.path.join(pkg, "__init__.py"), "w"):
            pass
        with open(os.path.join(pkg, "train.py"), "w") as f:
            f.write("import sys, torch\nx = torch.ones(2, requires_grad=True)\n"
                    "(x * 3).sum().backward()\nprint(sys.argv[1:], __name__)\n")
        out = os.path.join(self.dir, "mod.db")
        cp = run([bin_("gradtrace"), "record", "-o", out, "-m", "mypkg.train", "a", "-b"],
                 cwd=self.dir)
        self.assertEqual(cp.stdout.strip(), "['a', '-b'] __main__")

    def test_other_torch_refused(self):
        """The pin: under another torch release, recording is refused with
        the command that rebuilds gradtrace, and nothing runs."""
        site = run([bin_("python"), "-c",
                    "import gradtrace, os; print(os.path.dirname(gradtrace.__file__))"]
                   ).stdout.strip()
        build = os.path.join(site, "_build.py")
        with open(build) as f:
            orig = f.read()
        try:
            with open(build, "w") as f:
                f.write(orig.replace('TORCH_VERSION = "2.13.0+cpu"',
                                     'TORCH_VERSION = "2.12.0+cpu"'))
            out = os.path.join(self.dir, "pin.db")
            cp = run([bin_("gradtrace"), "record", "-o", out, "--", self.script],
                     check=False)
            self.assertEqual(cp.returncode, 2, cp.stderr)
            self.assertIn("gradtrace was built for torch 2.12.0+cpu but this environment "
                          "has torch 2.13.0+cpu", cp.stderr)
            self.assertEqual(cp.stdout, "")
        finally:
            with open(build, "w") as f:
                f.write(orig)


if __name__ == "__main__":
    unittest.main(verbosity=2)
