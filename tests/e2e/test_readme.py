"""A newcomer's first hour, from the README itself: its code blocks are
extracted from README.md and run as a user would, so the README cannot
drift from what gradtrace does.

- The README starts with the two set-up commands (demo, test).
- The diagnosis it shows is what `gradtrace diagnose` prints for a recording
  of the example it names, line for line.
- "pip from a clone": a clean `git clone` of this repository, a fresh venv
  with torch 2.13.0, and the block's own commands (its `apt-get` line is
  checked against scripts/setup's package list instead of run).
- "Use it": the command-line block, run in that venv on a script that makes
  the README's error, and the Python block, run with `train()` defined as a
  correct training loop, then with pandas for `dataframe=True`.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest). Needs PyPI (torch 2.13.0,
pandas) the first time; the venv is kept in GT_BUILD_DIR/readme-venv.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SOURCE = gtutil.SOURCE
README = os.path.join(SOURCE, "README.md")
BUILD = os.environ.get("GT_BUILD_DIR", os.path.join(SOURCE, "build"))


def blocks():
    """[(language, text, the heading above it, the paragraph before it)] of
    README.md's fenced blocks, in order."""
    out, heading, para = [], "", []
    with open(README, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^```(\w*)\s*$", line)
        if m:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            out.append((m.group(1), "\n".join(lines[i + 1:j]), heading, " ".join(para)))
            para = []
            i = j + 1
            continue
        if line.startswith("#"):
            heading, para = line.lstrip("#").strip(), []
        elif line.strip():
            para.append(line.strip())
        else:
            para = [] if not para else para
        i += 1
    return out


def block(lang, contains):
    """The one block of `lang` whose text contains `contains`."""
    hits = [b for b in blocks() if b[0] == lang and contains in b[1]]
    assert len(hits) == 1, (lang, contains, len(hits))
    return hits[0][1]


def commands(text):
    """The shell commands of a block, comments and blank lines dropped."""
    out = []
    for line in text.split("\n"):
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 1200)
    return subprocess.run(cmd, **kw)


SEED = os.path.join(SOURCE, "examples", "seed_class_weights.py")
TRAIN_OK = '''
import torch
import torch.nn.functional as F


def train():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
'''


class Readme(unittest.TestCase):
    def test_starts_with_the_two_commands(self):
        first = [b for b in blocks() if b[0] == "sh"][0][1]
        self.assertEqual([c.split()[:2] for c in commands(first)],
                         [["bash", "scripts/demo"], ["bash", "scripts/test"]])
        with open(README, encoding="utf-8") as f:
            self.assertLess(len(f.read().split("\n")), 250)

    def test_the_diagnosis_shown_is_what_diagnose_prints(self):
        shown = block("", "1 finding").split("\n")
        trace = os.path.join(gtutil.tmpdir(), "seed.db")
        gtutil.record(SEED, out=trace, expect_fail=True, cwd=SOURCE, options=["-q"])
        cp = run([gtutil.GRADTRACE, "diagnose", trace], cwd=SOURCE)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        got = cp.stdout.replace(trace, "out/seed.db").rstrip("\n").split("\n")
        self.assertEqual(len(got), len(shown), cp.stdout)
        for want, have in zip(shown, got):
            if want.endswith("Hint: …"):  # trimmed at PyTorch's hint
                self.assertTrue(have.startswith(want[:-1]), (want, have))
            else:
                self.assertEqual(want, have)


class NewcomerInstall(unittest.TestCase):
    """The pip route from a clean clone, then the README's usage blocks."""

    @classmethod
    def setUpClass(cls):
        tmp = gtutil.tmpdir()
        cls.clone = os.path.join(tmp, "clone")
        cp = run(["git", "clone", "-q", SOURCE, cls.clone])
        assert cp.returncode == 0, cp.stderr
        venv = os.path.join(BUILD, "readme-venv")
        cls.py = os.path.join(venv, "bin", "python")
        ok = os.path.exists(cls.py) and run(
            [cls.py, "-c", "import torch, pandas"]).returncode == 0
        if not ok:
            shutil.rmtree(venv, ignore_errors=True)
            for cmd in ([sys.executable, "-m", "venv", venv],
                        [cls.py, "-m", "pip", "install", "-q", "torch==2.13.0", "pandas"]):
                cp = run(cmd)
                assert cp.returncode == 0, (cmd, cp.stderr[-3000:])
        run([cls.py, "-m", "pip", "uninstall", "-q", "-y", "gradtrace"])
        cls.env = dict(os.environ)
        cls.env["PATH"] = os.path.join(venv, "bin") + os.pathsep + os.environ["PATH"]
        cls.env["VIRTUAL_ENV"] = venv
        for k in ("PYTHONPATH", "GRADTRACE", "GRADTRACE_ADAPTER", "GT_BUILD_DIR"):
            cls.env.pop(k, None)
        cls.pip_block = block("sh", "pip install .")
        for cmd in commands(cls.pip_block):
            if cmd.startswith("sudo apt-get") or cmd.startswith("apt-get"):
                continue
            cp = run(shlex.split(cmd), cwd=cls.clone, env=cls.env)
            assert cp.returncode == 0, (cmd, cp.stdout[-3000:], cp.stderr[-3000:])

    def test_apt_line_names_what_setup_installs(self):
        with open(os.path.join(SOURCE, "scripts", "setup"), encoding="utf-8") as f:
            setup = f.read()
        apt = [c for c in commands(self.pip_block) if "apt-get install" in c]
        self.assertEqual(len(apt), 1)
        for pkg in apt[0].split("install", 1)[1].split():
            self.assertRegex(setup, r"\b%s\b" % re.escape(pkg))

    def test_installed_gradtrace_is_the_engine(self):
        cp = run(["gradtrace", "--version"], env=self.env)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("engine", cp.stdout)

    def test_command_line_block(self):
        work = os.path.join(gtutil.tmpdir(), "cli")
        os.makedirs(work)
        shutil.copy(SEED, os.path.join(work, "train.py"))
        cmds = commands(block("sh", "gradtrace record -o run.db -- train.py"))
        self.assertEqual([c.split()[:2] for c in cmds],
                         [["gradtrace", "record"], ["gradtrace", "diagnose"],
                          ["gradtrace", "graph"]])
        rec = run(shlex.split(cmds[0]), cwd=work, env=self.env)
        self.assertEqual(rec.returncode, 1, rec.stderr[-3000:])  # the script's own status
        self.assertIn("modified by an inplace operation", rec.stderr)
        self.assertIn("class_weights modified in place", rec.stderr)  # the diagnosis
        diag = run(shlex.split(cmds[1]), cwd=work, env=self.env)
        self.assertEqual(diag.returncode, 1, diag.stderr)
        self.assertIn("fix         update a copy: class_weights = class_weights.clone()",
                      diag.stdout)
        graph = run(shlex.split(cmds[2]), cwd=work, env=self.env)
        self.assertEqual(graph.returncode, 0, graph.stderr)
        with open(os.path.join(work, "run.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        db = gtutil.connect(os.path.join(work, "run.db"))
        self.assertIn('"adapter":"engine"', gtutil.one(db, "SELECT options FROM run"))

    def test_python_block(self):
        work = os.path.join(gtutil.tmpdir(), "api")
        os.makedirs(work)
        code = block("python", "with gradtrace.record(\"run.db\"):")
        script = os.path.join(work, "readme_block.py")
        with open(script, "w") as f:
            f.write(TRAIN_OK + "\n" + code + "\n" +
                    "print('findings', trace.diagnose()['findings'])\n"
                    "df = trace.sql('SELECT * FROM mutations', dataframe=True)\n"
                    "print('columns', list(df.columns)[:3])\n")
        cp = run([self.py, script], cwd=work, env=self.env)
        self.assertEqual(cp.returncode, 0, cp.stderr[-3000:])
        self.assertIn("findings []", cp.stdout)
        self.assertIn("columns [", cp.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
