"""The engine adapter (GRADTRACE_ADAPTER=engine): what its at::RecordFunction
capture must see, checked from the trace's rows.

- version bumps of mul_, copy_, index_put_, every element of _foreach_add_,
  add(out=), an in-place op run inside backward (a tensor hook), and no
  bump for detach_ (its schema marks it written, the counter never moves);
- saved tensors with their slots and save-time versions, and the diagnosis
  of the classic in-place bug;
- ops of Python threads started while recording, with their own thread;
  reentrant backward (checkpoint(use_reentrant=True));
- the dispatch-level op sequence equal to the dispatch mode's on an MLP, a
  CNN and the seed script (minus the aten::detach the mode itself causes,
  the ops at::RecordFunction never observes, and the gradient clones the
  mode's own references cause in backward);
- the fallback: with the self-test forced to fail, or the dispatch adapter
  asked for, the dispatch adapter records and one line says so and why
  (none with --quiet or quiet=True, none on the engine adapter);
- training bit-identical with and without recording.

Skipped where the engine adapter is not built (another torch).
Env: GRADTRACE, GT_SOURCE_DIR, GT_BUILD_DIR (set by ctest).
"""
import glob
import os
import subprocess
import sys
import textwrap
import unittest

import gtutil

BUILD = os.environ.get("GT_BUILD_DIR", "")
BUILT = bool(glob.glob(os.path.join(BUILD, "python", "_gradtrace_engine*.so")))


def env_for(adapter, **extra):
    env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
    env.update(extra)
    return env


def script(name, text):
    path = os.path.join(gtutil.tmpdir(), name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def record(path, adapter="engine", expect_fail=False, **extra):
    return gtutil.record(path, env=env_for(adapter, **extra), expect_fail=expect_fail)


def op_names(db):
    return [r[0] for r in db.execute(
        "SELECT s.text FROM ops o JOIN strings s ON s.id = o.name ORDER BY o.seq")]


def op_phases(db):
    return [tuple(r) for r in db.execute(
        "SELECT s.text, o.phase FROM ops o JOIN strings s ON s.id = o.name ORDER BY o.seq")]


def bump_ops(db):
    """(op name, version, observed) of every bump, in order."""
    return [tuple(r) for r in db.execute(
        "SELECT s.text, b.version, b.observed FROM version_bumps b"
        " LEFT JOIN ops o ON o.seq = b.op LEFT JOIN strings s ON s.id = o.name"
        " ORDER BY b.seq")]


BUMPS = """
    import torch
    a = torch.zeros(4)
    a.mul_(2)                                   # mul_
    b = torch.ones(4)
    a.copy_(b)                                  # copy_
    a.index_put_((torch.tensor([1]),), torch.tensor([5.0]))
    xs = [torch.zeros(2), torch.zeros(3), torch.zeros(5)]
    torch._foreach_add_(xs, 1.0)                # each element
    out = torch.empty(4)
    torch.add(a, b, out=out)                    # out=
    d = torch.zeros(3)
    d.detach_()                                 # written in the schema, no bump
    w = torch.ones(3, requires_grad=True)
    h = w * 2
    h.register_hook(lambda g: g.clone().mul_(3))  # in-place inside backward
    h.sum().backward()
    print(float(w.grad.sum()))
"""


@unittest.skipUnless(BUILT, "engine adapter not built for this torch")
class Bumps(unittest.TestCase):
    def test_bumps(self):
        trace, cp = record(script("bumps.py", BUMPS))
        self.assertEqual(cp.stdout.split()[-1], "18.0")
        db = gtutil.connect(trace)
        got = bump_ops(db)
        names = [g[0] for g in got if not g[2]]
        self.assertIn("aten::mul_.Tensor", names)
        self.assertIn("aten::copy_", names)
        self.assertIn("aten::index_put_", names)
        self.assertIn("aten::add.out", names)
        # one bump per element of the foreach list, each on its own tensor
        fe = db.execute(
            "SELECT count(DISTINCT b.tensor) FROM version_bumps b JOIN ops o ON o.seq = b.op"
            " JOIN strings s ON s.id = o.name WHERE s.text LIKE 'aten::_foreach_add_%'"
        ).fetchone()[0]
        self.assertEqual(fe, 3)
        self.assertNotIn("aten::detach_", names)
        # the hook's mul_ ran during the backward call, phase backward
        phase = db.execute(
            "SELECT o.phase FROM version_bumps b JOIN ops o ON o.seq = b.op"
            " JOIN strings s ON s.id = o.name WHERE s.text = 'aten::mul_.Tensor'"
            " ORDER BY b.seq DESC LIMIT 1").fetchone()[0]
        self.assertEqual(phase, 1)
        # no op recorded a change nobody made
        self.assertEqual([g for g in got if g[2]], [])

    def test_detach_written_but_recorded(self):
        trace, _ = record(script("detach.py", """
            import torch
            d = torch.zeros(3)
            d.detach_()
        """))
        db = gtutil.connect(trace)
        self.assertIn("aten::detach_", op_names(db))
        self.assertEqual(db.execute("SELECT count(*) FROM version_bumps").fetchone()[0], 0)
        # detach_ is a mutated argument per its schema
        self.assertEqual(db.execute(
            "SELECT count(*) FROM op_args a JOIN ops o ON o.seq = a.op JOIN strings s"
            " ON s.id = o.name WHERE s.text = 'aten::detach_' AND a.role = 2").fetchone()[0], 1)


@unittest.skipUnless(BUILT, "engine adapter not built for this torch")
class Saved(unittest.TestCase):
    def test_inplace_bug(self):
        path = script("bug.py", """
            import torch
            w = torch.randn(3, 3, requires_grad=True)
            x = torch.randn(3, 3)
            y = (w * x).exp()
            x.mul_(2)
            y.sum().backward()
        """)
        trace, cp = record(path, expect_fail=True)
        db = gtutil.connect(trace)
        saved = gtutil.saved(db, "MulBackward0")
        self.assertEqual(sorted(s[0] for s in saved), ["other"])
        self.assertEqual(saved[0][2], 0)
        exp = gtutil.saved(db, "ExpBackward0")
        self.assertEqual([(s[0], s[2], s[3]) for s in exp], [("result", 0, 1)])
        x = gtutil.tensors_named(db, "x")
        self.assertEqual([saved[0][1]], x)
        self.assertEqual([b[:3] for b in gtutil.bumps(db, gtutil.counter_of(db, x[0]))],
                         [(1, "aten::mul_.Tensor", 0)])
        self.assertGreater(db.execute("SELECT count(*) FROM node_execs").fetchone()[0], 0)
        self.assertEqual(db.execute("SELECT count(*) FROM errors").fetchone()[0], 1)
        out = subprocess.run([gtutil.GRADTRACE, "diagnose", trace], capture_output=True,
                             text=True)
        self.assertIn("x modified in place after MulBackward0 saved it as other", out.stdout)
        self.assertIn("matches the error PyTorch raised", out.stdout)

    def test_custom_function_and_accumulate(self):
        trace, _ = record(script("custom.py", """
            import torch
            class Sq(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    ctx.save_for_backward(x)
                    return x * x
                @staticmethod
                def backward(ctx, g):
                    (x,) = ctx.saved_tensors
                    return 2 * x * g
            w = torch.ones(3, requires_grad=True)
            Sq.apply(w * 1).sum().backward()
        """))
        db = gtutil.connect(trace)
        names = {r[0] for r in db.execute(
            "SELECT s.text FROM nodes n JOIN strings s ON s.id = n.name")}
        self.assertIn("SqBackward", names)
        self.assertIn("AccumulateGrad", names)
        # named as the dispatch adapter names an element of a saved list
        self.assertEqual([s[0] for s in gtutil.saved(db, "SqBackward")],
                         ["saved_tensors[0]"])
        # the custom Function's call is an ops row with its node
        self.assertEqual(db.execute(
            "SELECT count(*) FROM nodes n JOIN ops o ON o.seq = n.op"
            " JOIN strings s ON s.id = o.name WHERE s.text = 'Sq.apply'").fetchone()[0], 1)
        # the leaf node accumulates into w
        self.assertEqual(db.execute(
            "SELECT count(*) FROM nodes n JOIN strings s ON s.id = n.name"
            " WHERE s.text = 'AccumulateGrad' AND n.variable IS NOT NULL"
        ).fetchone()[0], 1)


@unittest.skipUnless(BUILT, "engine adapter not built for this torch")
class Threads(unittest.TestCase):
    def test_python_thread(self):
        trace, _ = record(script("thread.py", """
            import threading, torch
            def work():
                a = torch.ones(3)
                a.add_(1)
            t = threading.Thread(target=work)
            t.start(); t.join()
            torch.ones(2).mul_(2)
        """))
        db = gtutil.connect(trace)
        threads = db.execute(
            "SELECT count(DISTINCT o.thread) FROM ops o JOIN strings s ON s.id = o.name"
            " WHERE s.text IN ('aten::add_.Tensor', 'aten::mul_.Tensor')").fetchone()[0]
        self.assertEqual(threads, 2)

    def test_reentrant_backward(self):
        trace, cp = record(script("reentrant.py", """
            import torch
            from torch.utils.checkpoint import checkpoint
            torch.manual_seed(0)
            lin = torch.nn.Linear(4, 4)
            x = torch.randn(2, 4, requires_grad=True)
            y = checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=True)
            y.sum().backward()
            # the gradient the re-run forward gives equals the plain one
            x2 = x.detach().clone().requires_grad_()
            torch.tanh(lin(x2)).sum().backward()
            print(x.grad is not None and torch.allclose(x.grad, x2.grad))
        """))
        self.assertEqual(cp.stdout.split()[-1], "True")
        db = gtutil.connect(trace)
        # the forward is re-run inside backward: addmm recorded twice, once
        # in the backward phase
        self.assertEqual(db.execute(
            "SELECT count(*) FROM ops o JOIN strings s ON s.id = o.name"
            " WHERE s.text = 'aten::addmm' AND o.phase = 1").fetchone()[0], 1)
        self.assertGreater(db.execute("SELECT count(*) FROM node_execs").fetchone()[0], 0)


UNOBSERVED = {"aten::size", "aten::is_leaf", "aten::output_nr", "aten::_version",
              "aten::is_complex", "profiler::_record_function_enter",
              "profiler::_record_function_enter_new", "profiler::_record_function_exit"}

MLP = """
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    print(repr(loss.item()), repr(float(m[0].weight.sum())))
"""

CNN = """
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4),
                            torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 3 * 3, 3))
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    x, y = torch.randn(4, 1, 8, 8), torch.randint(0, 3, (4,))
    for _ in range(2):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    print(repr(loss.item()), repr(float(m[0].weight.sum())))
"""


@unittest.skipUnless(BUILT, "engine adapter not built for this torch")
class SameOps(unittest.TestCase):
    def same(self, path, *args, expect_fail=False):
        te, ce = record(path, "engine", expect_fail=expect_fail)
        td, cd = record(path, "dispatch", expect_fail=expect_fail)
        plain = gtutil.run_plain(path)
        # bit-identical training with either adapter and without recording
        self.assertEqual(ce.stdout, plain.stdout)
        self.assertEqual(cd.stdout, plain.stdout)
        # a dispatch mode also sees the aten::detach it causes itself, and ops
        # at::RecordFunction never observes (c10's ObservedOperators: queries
        # and profiler markers that change no tensor)
        skip = UNOBSERVED | {"aten::detach"}
        eng = [n for n in op_phases(gtutil.connect(te)) if n[0] not in skip]
        disp = [n for n in op_phases(gtutil.connect(td)) if n[0].split(".")[0] not in skip]
        # in backward, AccumulateGrad steals a gradient nobody else holds; the
        # dispatch adapter holds it, so there AccumulateGrad clones it
        # (new_empty_strided + copy_): ops the unrecorded run does not run
        clone = {"aten::new_empty_strided", "aten::copy_"}
        disp = [n for n in disp if not (n[1] == 1 and n[0] in clone)]
        eng = [n for n in eng if not (n[1] == 1 and n[0] in clone)]
        # torch.tensor(...) ends with a detach_ of its fresh result, which a
        # dispatch mode is not shown
        eng = [n for n in eng if n[0] != "aten::detach_"]
        self.assertEqual(eng, disp)
        self.assertGreater(len(eng), 20)

    def test_mlp(self):
        self.same(script("mlp.py", MLP))

    def test_cnn(self):
        self.same(script("cnn.py", CNN))

    def test_seed(self):
        self.same(gtutil.example("seed_class_weights.py"), expect_fail=True)


def record_raw(path, *options, **extra):
    """(trace, completed process) of `gradtrace record options -- path`
    with extra in the environment, its stderr as it is."""
    trace = os.path.join(gtutil.tmpdir(), "raw_%s.db" % os.path.basename(path))
    cp = subprocess.run([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON, "-f", "-o",
                         trace, *options, "--", path], capture_output=True, text=True,
                        env=dict(os.environ, **extra), timeout=300)
    return trace, cp


def fallback_lines(err):
    return [l for l in err.splitlines() if l.startswith(gtutil.FALLBACK)]


class Fallback(unittest.TestCase):
    """One line on stderr whenever a recording goes through the dispatch
    adapter, saying why; none with --quiet (or quiet=True), none on the
    engine adapter."""

    @unittest.skipUnless(BUILT, "engine adapter not built for this torch")
    def test_selftest_fails(self):
        path = script("fb.py", """
            import torch
            a = torch.ones(2)
            a.mul_(2)
        """)
        trace, cp = record_raw(path, GRADTRACE_ADAPTER="engine",
                               GRADTRACE_ENGINE_SELFTEST="fail")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        lines = fallback_lines(cp.stderr)
        self.assertEqual(lines, [gtutil.FALLBACK + "the engine adapter's self-test failed: "
                                 "self-test forced to fail (GRADTRACE_ENGINE_SELFTEST=fail)"],
                         cp.stderr)
        db = gtutil.connect(trace)
        self.assertIn("aten::mul_.Tensor", op_names(db))
        self.assertEqual(gtutil.one(db, "SELECT json_extract(options, '$.adapter') FROM run"),
                         "dispatch")

    def test_dispatch_asked(self):
        path = script("asked.py", "import torch\ntorch.ones(2).mul_(2)\n")
        trace, cp = record_raw(path, GRADTRACE_ADAPTER="dispatch")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(fallback_lines(cp.stderr),
                         [gtutil.FALLBACK + "GRADTRACE_ADAPTER=dispatch asked for it"])
        # first, before the script's own output and the footer
        self.assertTrue(cp.stderr.startswith(gtutil.FALLBACK), cp.stderr)
        _, cp = record_raw(path, "--quiet", GRADTRACE_ADAPTER="dispatch")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(fallback_lines(cp.stderr), [], cp.stderr)

    def test_python_api_quiet(self):
        code = """
            import sys, torch, gradtrace
            with gradtrace.record(sys.argv[1], overwrite=True, quiet=sys.argv[2] == "q"):
                torch.ones(2).mul_(2)
        """
        path = script("api_quiet.py", code)
        trace = os.path.join(gtutil.tmpdir(), "api_quiet.db")
        for mode, want in (("q", 0), ("loud", 1)):
            cp = subprocess.run([gtutil.PYTHON, path, trace, mode], capture_output=True,
                                text=True, timeout=300,
                                env=dict(os.environ, GRADTRACE_ADAPTER="dispatch"))
            self.assertEqual(cp.returncode, 0, cp.stderr)
            self.assertEqual(len(fallback_lines(cp.stderr)), want, cp.stderr)

    @unittest.skipUnless(BUILT, "engine adapter not built for this torch")
    def test_engine_says_nothing(self):
        trace, cp = record_raw(script("quiet.py", "import torch\ntorch.ones(2).mul_(2)\n"),
                               GRADTRACE_ADAPTER="engine")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertNotIn("gradtrace: engine", cp.stderr)
        self.assertEqual(fallback_lines(cp.stderr), [], cp.stderr)
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.one(db, "SELECT json_extract(options, '$.adapter') FROM run"),
                         "engine")


if __name__ == "__main__":
    unittest.main()
