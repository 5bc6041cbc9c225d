"""One command gives the answer: `gradtrace record` (and `with
gradtrace.record(...)`) print the diagnosis after the script's own traceback
when the run failed with an error gradtrace explains; `record -m module`;
every reading command takes its options after its operands too.
"""
import json
import os
import subprocess
import sys
import textwrap
import unittest

import gtutil

DIR = None
SEED = None


def write(name, code):
    path = os.path.join(DIR, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(code))
    return path


def gradtrace(*args):
    return subprocess.run([gtutil.GRADTRACE, *map(str, args)], capture_output=True,
                          text=True, timeout=300)


# One script per family of error gradtrace explains, and what its finding is.
FAMILIES = {
    "inplace": ("inplace_invalidated_saved", """
        import torch
        x = torch.randn(4, requires_grad=True)
        h = torch.sigmoid(x)
        h.relu_()
        h.sum().backward()
    """),
    "twice": ("backward_twice", """
        import torch
        x = torch.randn(3, requires_grad=True)
        loss = (x.exp() * 2).sum()
        loss.backward()
        loss.backward()
    """),
    "leaf": ("leaf_inplace", """
        import torch
        w = torch.ones(3, requires_grad=True)
        w -= 0.1 * torch.ones(3)
    """),
}


def setUpModule():
    global DIR, SEED
    DIR = gtutil.tmpdir()
    SEED, _ = gtutil.record(gtutil.example("seed_class_weights.py"), expect_fail=True,
                            options=["--quiet"])


class DiagnosisAfterFailure(unittest.TestCase):
    def test_each_family(self):
        for name, (kind, code) in FAMILIES.items():
            with self.subTest(name):
                script = write("fam_%s.py" % name, code)
                trace, cp = gtutil.record(script, expect_fail=True)
                plain = gtutil.run_plain(script)
                self.assertEqual(cp.returncode, plain.returncode)
                self.assertEqual(cp.stdout, plain.stdout)
                # the script's own stderr first, unchanged, then the
                # diagnosis as `gradtrace diagnose` prints it but for the
                # error's message, which the traceback printed (once), then
                # the footer line
                self.assertTrue(cp.stderr.startswith(plain.stderr), cp.stderr)
                rest = cp.stderr[len(plain.stderr):]
                diag = gradtrace("diagnose", "--color", "never", trace)
                self.assertEqual(diag.returncode, 1, diag.stderr)
                footer = rest.splitlines(True)[-1]
                head = "%s: the run raised " % trace
                message = [l for l in diag.stdout.splitlines() if l.startswith(head)][0]
                etype, text = message[len(head):].split(": ", 1)
                self.assertEqual(rest, "\n" + diag.stdout.replace(
                    message, head + etype + " (its message is in the traceback)") + footer)
                self.assertEqual(cp.stderr.count(text), 1)
                self.assertTrue(footer.startswith("gradtrace: trace written to " + trace))
                doc = json.loads(gradtrace("diagnose", trace, "--json").stdout)
                self.assertEqual(doc["findings"][0]["kind"], kind)

    def test_quiet(self):
        script = write("fam_quiet.py", FAMILIES["inplace"][1])
        trace, cp = gtutil.record(script, expect_fail=True, options=["-q"])
        plain = gtutil.run_plain(script)
        err = cp.stderr.splitlines(True)
        self.assertEqual("".join(err[:-1]), plain.stderr)
        self.assertIn("diagnose it with", err[-1])

    def test_unexplained_failure_prints_nothing_more(self):
        script = write("fam_other.py", """
            import torch
            x = torch.ones(2, requires_grad=True)
            (x * 2).sum().backward()
            raise ValueError("not gradtrace's business")
        """)
        trace, cp = gtutil.record(script, expect_fail=True)
        plain = gtutil.run_plain(script)
        err = cp.stderr.splitlines(True)
        self.assertEqual("".join(err[:-1]), plain.stderr)

    def test_success_prints_nothing_more(self):
        script = write("fam_ok.py", """
            import torch
            x = torch.ones(2, requires_grad=True)
            (x * 2).sum().backward()
            print("fine")
        """)
        trace, cp = gtutil.record(script)
        self.assertEqual(cp.stdout, "fine\n")
        self.assertEqual(cp.stderr, "gradtrace: trace written to %s\n" % trace)


class ContextManager(unittest.TestCase):
    def run_py(self, code, *args):
        script = write("cm_%d.py" % abs(hash(code)), code)
        env = dict(os.environ, NO_COLOR="1")
        return subprocess.run([gtutil.PYTHON, script, *args], capture_output=True,
                              text=True, timeout=300, env=env)

    def test_propagates_and_prints_once(self):
        trace = os.path.join(DIR, "cm_raise.db")
        cp = self.run_py("""
            import sys, torch, gradtrace
            with gradtrace.record(sys.argv[1]):
                x = torch.randn(4, requires_grad=True)
                h = torch.sigmoid(x)
                h.relu_()
                h.sum().backward()
        """, trace)
        self.assertEqual(cp.returncode, 1)
        self.assertEqual(cp.stderr.count("1 finding"), 1, cp.stderr)
        self.assertIn("h modified in place after SigmoidBackward0", cp.stderr)
        # the exception itself reaches the top unchanged
        last = cp.stderr.rstrip().splitlines()[-1]
        self.assertTrue(last.startswith("RuntimeError: one of the variables needed for "
                                        "gradient computation"), cp.stderr[-600:])
        self.assertLess(cp.stderr.index("1 finding"), cp.stderr.index("Traceback"))

    def test_caught_exception(self):
        trace = os.path.join(DIR, "cm_caught.db")
        cp = self.run_py("""
            import sys, torch, gradtrace
            try:
                with gradtrace.record(sys.argv[1]):
                    w = torch.ones(3, requires_grad=True)
                    w -= 0.1 * torch.ones(3)
            except RuntimeError as e:
                print("caught", type(e).__name__)
        """, trace)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout, "caught RuntimeError\n")
        self.assertEqual(cp.stderr.count("1 finding"), 1, cp.stderr)
        self.assertIn("leaf_inplace", cp.stderr)


class RecordModule(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        write("mods/trainpkg/__init__.py", "")
        write("mods/trainpkg/step.py", """
            import sys
            import torch
            x = torch.ones(2, requires_grad=True)
            (x * 3).sum().backward()
            print(__name__, sys.argv[1:], sys.argv[0].endswith("step.py"))
        """)
        write("mods/trainpkg/__main__.py", "print('package main')\n")
        cls.cwd = os.path.join(DIR, "mods")

    def test_like_python_m(self):
        for opts in (["-m", "trainpkg.step"], ["--", "-m", "trainpkg.step"]):
            with self.subTest(opts=opts):
                out = os.path.join(DIR, "mod%d.db" % len(opts))
                cp = subprocess.run([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON,
                                     "-o", out, *opts, "--lr", "3"], capture_output=True,
                                    text=True, cwd=self.cwd, timeout=300)
                plain = subprocess.run([gtutil.PYTHON, "-m", "trainpkg.step", "--lr", "3"],
                                       capture_output=True, text=True, cwd=self.cwd)
                self.assertEqual(cp.returncode, 0, cp.stderr)
                self.assertEqual(cp.stdout, plain.stdout)
                self.assertEqual(cp.stdout, "__main__ ['--lr', '3'] True\n")
                db = gtutil.connect(out)
                self.assertEqual(gtutil.one(db, "SELECT count(*) FROM backward_calls"), 1)
                self.assertEqual(json.loads(gtutil.one(db, "SELECT argv FROM run")),
                                 ["trainpkg.step", "--lr", "3"])

    def test_package_main(self):
        out = os.path.join(DIR, "pkgmain.db")
        cp = subprocess.run([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-o",
                             out, "-m", "trainpkg"], capture_output=True, text=True,
                            cwd=self.cwd, timeout=300)
        self.assertEqual((cp.returncode, cp.stdout), (0, "package main\n"), cp.stderr)

    def test_missing_module(self):
        out = os.path.join(DIR, "nomod.db")
        cp = subprocess.run([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-o",
                             out, "-m", "no_such_module_xyz"], capture_output=True,
                            text=True, cwd=self.cwd, timeout=300)
        self.assertEqual(cp.returncode, 2)
        self.assertEqual(cp.stderr, "gradtrace: cannot run module no_such_module_xyz: "
                                    "no module named no_such_module_xyz\n")
        self.assertFalse(os.path.exists(out))


class OptionsAnywhere(unittest.TestCase):
    """Each reading command gives the same output with its options before
    or after its operands."""

    def same(self, before, after, status=0):
        a, b = gradtrace(*before), gradtrace(*after)
        self.assertEqual(a.returncode, status, a.stderr)
        self.assertEqual((b.returncode, b.stdout, b.stderr), (a.returncode, a.stdout, a.stderr))
        return b

    def test_diagnose(self):
        self.same(["diagnose", "--json", SEED], ["diagnose", SEED, "--json"], 1)
        self.same(["diagnose", "--backward", "1", "--color", "never", SEED],
                  ["diagnose", SEED, "--color", "never", "--backward", "1"], 1)

    def test_sql(self):
        q = "SELECT count(*) AS n FROM ops WHERE seq > :s"
        b = self.same(["sql", "--json", "-p", "s=3", SEED, q], ["sql", SEED, q, "--json",
                                                                 "-p", "s=3"])
        self.assertTrue(json.loads(b.stdout)[0]["n"] > 0)
        self.same(["sql", "--csv", SEED, q, "-p", "s=1"], ["sql", SEED, "--csv", q,
                                                           "--param", "s=1"])

    def test_info(self):
        self.same(["info", "--json", SEED], ["info", SEED, "--json"])

    def test_history(self):
        self.same(["history", "--json", SEED, "class_weights"],
                  ["history", SEED, "class_weights", "--json"])
        self.same(["history", "--reads", SEED, "class_weights"],
                  ["history", SEED, "class_weights", "--reads"])

    def test_graph(self):
        self.same(["graph", "-o", "-", "--format", "dot", SEED],
                  ["graph", SEED, "--format", "dot", "-o", "-"])

    def test_double_dash_ends_options(self):
        # an operand that starts with '-' after `--` is an operand
        cp = gradtrace("sql", SEED, "--", "-1")
        self.assertEqual(cp.returncode, 2)
        self.assertIn("gradtrace: sql:", cp.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
