"""A recorded script runs as `python3 script.py` would run it.

Its stack: its module frame is the bottom one. Code that looks at its
callers printed gradtrace's runner and runpy's frames under it:
traceback.print_stack, len(inspect.stack()), sys._getframe().f_back, and
anomaly mode's "Traceback of forward call that caused the error" (the advice
PyTorch's in-place error gives). Each adapter's stdout and stderr must equal
the plain run's; __builtins__ is the builtins module, as python3 gives
__main__, and sys.argv[0] the script as given (it was made absolute).

`record -m module` runs it as `python3 -m module` would: under runpy's
two frames (_run_module_as_main, _run_code) and nothing else, in a fresh
__main__.

Its end: a run that ends with os._exit(n) (training scripts do, to skip
hanging DataLoader or process-group teardown) leaves a finished trace with
its backward calls and exit code n: os._exit skips atexit and finally
blocks, and the trace held no rows at all. A forked child's os._exit
(multiprocessing ends every fork child with it) does not close the parent's
trace.

Its sys.path[0]: for a symlinked script, the directory of the file it links
to, as python3 sets it (a sibling module there failed to import).

A directory or a zip archive with a __main__.py runs as python3 dir/ and
python3 app.zip run it: the path itself first on sys.path, its sibling
modules importable (a directory was refused, "not a regular file"), and a
directory with no __main__.py refused in one line, as python3 refuses it.

Its working directory: a script that changes it (os.chdir; hydra does)
still gets its trace finished, at the path given relative to where recording
started, and the diagnosis after its traceback: the recorder reopened its row
log by the relative path ("recording stopped: cannot read row log"), and
the diagnosis was skipped. The command the last line gives to diagnose
the trace quotes its path for a shell.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import subprocess
import unittest
import zipfile

import gtutil

FRAMES_SCRIPT = r'''
import inspect
import sys
import traceback

import torch

torch.autograd.set_detect_anomaly(True)
print("builtins", type(__builtins__).__name__)
caller = sys._getframe().f_back
print("module frame's caller", caller and (caller.f_code.co_filename, caller.f_code.co_name))
print("argv", sys.argv, "__file__", __file__, "path0", sys.path[0])
print("globals", sorted(k for k in globals() if k.startswith("__")), __spec__ and __spec__.name)
print("__main__ is this module", sys.modules["__main__"].__dict__ is globals())


def forward(x):
    traceback.print_stack()
    print("depth", len(inspect.stack()))
    h = torch.sigmoid(x * 2)
    if "bug" in sys.argv:
        h.mul_(2)
    return h.sum()


loss = forward(torch.ones(3, requires_grad=True))
loss.backward()
print("loss", repr(loss.item()))
'''

OS_EXIT_SCRIPT = r'''
import multiprocessing as mp
import os
import sys

import torch


def child():
    torch.ones(2, requires_grad=True).sum().backward()


torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(3):
    loss = model(torch.ones(8, 4) * i).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i == 1:
        p = mp.get_context("fork").Process(target=child)
        p.start()
        p.join()
        print("child exit", p.exitcode)
print("loss", repr(loss.item()))
sys.stdout.flush()
os._exit(5)
'''

CHDIR_SCRIPT = r'''
import os
import torch

os.makedirs("moved", exist_ok=True)
os.chdir("moved")
x = torch.ones(3, requires_grad=True)
h = torch.sigmoid(x)
h.mul_(2)
h.sum().backward()
'''


def _script(name, text, adapter):
    """(path of text written to name in the test's directory, the env
    choosing adapter)."""
    path = os.path.join(gtutil.tmpdir(), name)
    with open(path, "w") as f:
        f.write(text)
    return path, dict(os.environ, GRADTRACE_ADAPTER=adapter)


def _strip_footer(err):
    """stderr without gradtrace's own lines (the footer) and, after a
    failure, without the diagnosis that follows the traceback."""
    out = []
    for line in gtutil.without_fallback(err).splitlines():
        if line.startswith("gradtrace: ") or line.startswith(gtutil.tmpdir()):
            break
        out.append(line)
    return out


class Frames(gtutil.BothAdapters, unittest.TestCase):
    """The module frame is the bottom one; anomaly mode's forward trace."""

    def check(self, adapter):
        _, env = _script("frames_script.py", FRAMES_SCRIPT, adapter)
        d = gtutil.tmpdir()
        # named relative to the working directory: sys.argv[0] as given,
        # __file__ absolute
        plain = gtutil.run_plain("frames_script.py", "bug", env=env, cwd=d)
        _, cp = gtutil.record("frames_script.py", "bug", env=env, cwd=d, expect_fail=True,
                              options=("-q",))
        self.assertIn("argv ['frames_script.py', 'bug'] __file__ " + d, plain.stdout)
        self.assertEqual(cp.returncode, plain.returncode)
        self.assertIn("depth 2", plain.stdout)
        self.assertEqual(cp.stdout, plain.stdout, "stdout differs from python3's")
        # the anomaly warning with the forward's stack, then the traceback
        self.assertIn("Traceback of forward call", cp.stderr)
        self.assertEqual(_strip_footer(cp.stderr), _strip_footer(plain.stderr))


class ModuleFrames(gtutil.BothAdapters, unittest.TestCase):
    """`record -m frames_mod` as `python3 -m frames_mod`: runpy's two frames
    under the module (_run_module_as_main, _run_code) and no others, in
    stacks and tracebacks; a fresh __main__ with python3's globals
    (__builtins__ the builtins module, __annotations__); sys.argv[0] and
    sys.path[0]. The runner's frames showed (inspect.stack() was 9 deep,
    not 4), the traceback lost runpy's two, __builtins__ was a dict."""

    def check(self, adapter):
        d = os.path.join(gtutil.tmpdir(), "modframes")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "frames_mod.py"), "w") as f:
            f.write(FRAMES_SCRIPT)
        env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
        plain = subprocess.run([gtutil.PYTHON, "-m", "frames_mod", "bug"], capture_output=True,
                               text=True, env=env, cwd=d, timeout=300)
        cp = subprocess.run([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-q", "-o",
                             "m.db", "-f", "-m", "frames_mod", "bug"], capture_output=True,
                            text=True, env=env, cwd=d, timeout=300)
        self.assertEqual(cp.returncode, plain.returncode)
        self.assertNotEqual(plain.returncode, 0)
        self.assertIn("depth 4", plain.stdout)
        self.assertIn("path0 %s" % d, plain.stdout)
        self.assertEqual(cp.stdout, plain.stdout, "stdout differs from python3 -m's")
        self.assertIn('File "<frozen runpy>", line', plain.stderr)
        self.assertEqual(_strip_footer(cp.stderr), _strip_footer(plain.stderr))


class ModuleRefused(unittest.TestCase):
    """`record -m pkg` for a package with no __main__ is refused before
    recording, in python3 -m's words: it started recording and failed with
    runpy's ImportError traceback and a trace."""

    def test_package_without_main(self):
        d = os.path.join(gtutil.tmpdir(), "refused")
        os.makedirs(os.path.join(d, "nomainpkg"), exist_ok=True)
        open(os.path.join(d, "nomainpkg", "__init__.py"), "w").close()
        cp = subprocess.run([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-o",
                             "r.db", "-m", "nomainpkg"], capture_output=True, text=True,
                            cwd=d, timeout=300)
        self.assertEqual(cp.returncode, 2, cp.stderr)
        self.assertEqual(cp.stderr, "gradtrace: cannot run module nomainpkg: No module named "
                                    "nomainpkg.__main__; 'nomainpkg' is a package and cannot "
                                    "be directly executed\n")
        self.assertFalse(os.path.exists(os.path.join(d, "r.db")))


class OsExit(gtutil.BothAdapters, unittest.TestCase):
    """os._exit(5) after three backward calls, a forked child between."""

    def check(self, adapter):
        script, env = _script("os_exit_script.py", OS_EXIT_SCRIPT, adapter)
        plain = gtutil.run_plain(script, env=env)
        trace, cp = gtutil.record(script, env=env, expect_fail=True)
        self.assertEqual((cp.returncode, cp.stdout), (plain.returncode, plain.stdout))
        self.assertEqual(cp.returncode, 5)
        self.assertIn("child exit 0", cp.stdout)
        self.assertIn("trace written to", cp.stderr)
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.rows(db, "SELECT status, exit_code FROM run"), [("ok", 5)])
        # the parent's three; the forked child's is not in the trace
        self.assertEqual(gtutil.one(db, "SELECT count(*) FROM backward_calls"), 3)


class Chdir(gtutil.BothAdapters, unittest.TestCase):
    """os.chdir before an in-place bug; the trace given as a relative path."""

    def check(self, adapter):
        script, env = _script("chdir_script.py", CHDIR_SCRIPT, adapter)
        d = gtutil.tmpdir()
        out = "chdir %s.db" % adapter  # a space: quoted in the command to paste
        _, cp = gtutil.record(script, out=out, env=env, cwd=d, expect_fail=True)
        self.assertNotIn("recording stopped", cp.stderr)
        self.assertIn("h modified in place after SigmoidBackward0", cp.stderr)
        self.assertEqual(cp.stderr.strip().splitlines()[-1],
                         "gradtrace: trace written to %s; the run failed, diagnose it with: "
                         "gradtrace diagnose '%s'" % (out, out))
        trace = os.path.join(d, out)
        self.assertFalse(os.path.exists(trace + "-gtlog"))
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.rows(db, "SELECT status FROM run"), [("exception",)])
        self.assertEqual(gtutil.one(db, "SELECT count(*) FROM backward_calls"), 1)


class Symlink(unittest.TestCase):
    """link/main.py -> ../real/main.py, which imports real/helper.py."""

    def test_sibling_of_the_target_imports(self):
        d = os.path.join(gtutil.tmpdir(), "symlinked")
        os.makedirs(os.path.join(d, "real"))
        os.makedirs(os.path.join(d, "link"))
        with open(os.path.join(d, "real", "main.py"), "w") as f:
            f.write("import sys\nimport helper\nprint(helper.X, sys.path[0])\n")
        with open(os.path.join(d, "real", "helper.py"), "w") as f:
            f.write("X = 'helper'\n")
        os.symlink(os.path.join("..", "real", "main.py"), os.path.join(d, "link", "main.py"))
        script = os.path.join(d, "link", "main.py")
        plain = gtutil.run_plain(script)
        _, cp = gtutil.record(script)
        self.assertEqual(plain.stdout, "helper %s\n" % os.path.realpath(os.path.join(d, "real")))
        self.assertEqual(cp.stdout, plain.stdout)


if __name__ == "__main__":
    unittest.main()


APP_MAIN = r'''
import sys

import helper
import torch

print("argv", sys.argv, "path0", sys.path[0])
x = torch.ones(3, requires_grad=True)
(torch.sigmoid(x) * helper.SCALE).sum().backward()
print("grad", x.grad.tolist())
'''


class DirAndZip(unittest.TestCase):
    """app/__main__.py importing app/helper.py, run as app and as app.zip."""

    def setUp(self):
        self.d = os.path.join(gtutil.tmpdir(), "dirzip")
        os.makedirs(os.path.join(self.d, "app"), exist_ok=True)
        os.makedirs(os.path.join(self.d, "nomain"), exist_ok=True)
        files = {"__main__.py": APP_MAIN, "helper.py": "SCALE = 3\n"}
        with zipfile.ZipFile(os.path.join(self.d, "app.zip"), "w") as z:
            for name, text in files.items():
                with open(os.path.join(self.d, "app", name), "w") as f:
                    f.write(text)
                z.writestr(name, text)

    def test_runs_as_python3_runs_it(self):
        for target in ("app", "app.zip"):
            plain = gtutil.run_plain(target, cwd=self.d)
            trace, cp = gtutil.record(target, cwd=self.d)
            self.assertEqual(plain.returncode, 0, plain.stderr)
            self.assertIn("path0 %s" % os.path.join(self.d, target), plain.stdout)
            self.assertEqual(cp.stdout, plain.stdout, target)
            db = gtutil.connect(os.path.join(self.d, trace))
            self.assertEqual(gtutil.one(db, "SELECT count(*) FROM backward_calls"), 1)

    def test_directory_without_main_refused(self):
        plain = gtutil.run_plain("nomain", cwd=self.d)
        _, cp = gtutil.record("nomain", cwd=self.d, expect_fail=True)
        self.assertNotEqual(plain.returncode, 0)
        self.assertEqual(cp.returncode, 2)
        self.assertEqual(cp.stderr.strip(), "gradtrace: cannot run script nomain: no __main__.py in it")
