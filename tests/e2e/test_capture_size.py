"""No size limit on ops: an op with 500 tensor arguments, one with 500
outputs, and optimizer steps in every implementation (foreach, fused,
for-loop) for Adam, AdamW and SGD with momentum on models with hundreds of
parameter tensors, including a ResNet-50-shaped CNN and a 12-layer
nn.TransformerEncoder built from random weights. Each run has the mistake of
an optimizer step between a forward and its backward: every stale weight
must be found, the first to fail must be the one PyTorch's message names,
and the recorded run must print what the plain run prints (same error, same
parameters to the last bit).

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

MODELS = gtutil.scenario("cap_models.py")
MANY = gtutil.scenario("cap_many_args.py")


def marker(path, tag):
    """Line number of the line of path tagged `# @tag`."""
    with open(path) as f:
        hits = [i + 1 for i, l in enumerate(f) if "# @" + tag in l]
    assert len(hits) == 1, (tag, hits)
    return hits[0]


def diagnose(trace):
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace], capture_output=True,
                       text=True, timeout=300)
    return r.returncode, json.loads(r.stdout)


def error_shape(message):
    m = re.search(r"\[torch\.\w+ \[([\d, ]*)\]\]", message)
    assert m, message
    return [int(x) for x in m.group(1).split(",") if x.strip()]


def the_finding(test, trace, script):
    """The one finding of a scenario: the saved tensor `last` changed at the
    line tagged @mutation, matching PyTorch's error."""
    rc, doc = diagnose(trace)
    test.assertEqual(rc, 1)
    test.assertEqual(len(doc["findings"]), 1, doc["findings"])
    f = doc["findings"][0]
    test.assertEqual(f["kind"], "inplace_invalidated_saved")
    test.assertTrue(f["matches_error"])
    test.assertIn("last", f["saved"]["names"])
    test.assertEqual([m["location"]["line"] for m in f["mutations"]],
                     [marker(script, "mutation")])
    return f


class ManyArgs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace, cls.cp = gtutil.record(MANY, expect_fail=True)
        cls.db = gtutil.connect(cls.trace)

    def args_of(self, tag, name):
        line = marker(MANY, tag)
        return gtutil.rows(
            self.db, "SELECT a.role, count(*), count(DISTINCT a.tensor) FROM op_args a"
            " JOIN ops o ON o.seq = a.op JOIN strings s ON s.id = o.name"
            " JOIN stacks st ON st.id = o.stack JOIN frames f ON f.id = st.user_frame"
            " WHERE s.text = ? AND f.line = ? GROUP BY a.role ORDER BY a.role", name, line)

    def test_500_inputs_recorded(self):
        # role 0 = input: every tensor of both lists, each its own tensor
        self.assertEqual(self.args_of("custom", "gtcap::mul_all"), [(0, 500, 500), (1, 1, 1)])
        self.assertEqual(self.args_of("foreach", "aten::_foreach_mul.List"),
                         [(0, 500, 500), (1, 250, 250)])

    def test_500_outputs_recorded(self):
        self.assertEqual(self.args_of("unbind", "aten::unbind.int"), [(0, 1, 1), (1, 500, 500)])

    def test_500_saved_tensors_recorded(self):
        got = gtutil.rows(self.db, "SELECT count(*), count(st.tensor), max(st.version)"
                                   " FROM saved_tensors st JOIN nodes n ON n.id = st.node"
                                   " JOIN strings s ON s.id = n.name"
                                   " WHERE s.text LIKE '%gtcap_mul_all%'")
        self.assertEqual(got, [(500, 500, 0)])

    def test_diagnosed(self):
        f = the_finding(self, self.trace, MANY)
        self.assertTrue(f["first_to_fail"])
        self.assertEqual(f["saved"]["slot"], "saved_tensors[499]")
        self.assertEqual(f["backward"]["location"]["line"], marker(MANY, "backward"))


HUGE = gtutil.scenario("cap_huge_args.py")


class HugeArgs(unittest.TestCase):
    """20,000 tensors in one op and one node: no record size bounds them."""
    N = 20000

    @classmethod
    def setUpClass(cls):
        cls.trace, cls.cp = gtutil.record(HUGE, expect_fail=True, timeout=900)
        cls.db = gtutil.connect(cls.trace)

    def test_every_input_and_bump(self):
        got = gtutil.rows(
            self.db, "SELECT o.seq, a.role, count(*), count(DISTINCT a.tensor) FROM op_args a"
            " JOIN ops o ON o.seq = a.op JOIN strings s ON s.id = o.name"
            " WHERE s.text = 'aten::_foreach_add_.Scalar' GROUP BY o.seq, a.role"
            " ORDER BY o.seq, a.role")
        self.assertEqual([g[1:] for g in got],
                         [(0, self.N, self.N), (2, self.N, self.N)] * 2)
        for seq in sorted({g[0] for g in got}):
            self.assertEqual(gtutil.rows(
                self.db, "SELECT count(*), count(DISTINCT tensor) FROM version_bumps"
                " WHERE op = ?", seq), [(self.N, self.N)])
        self.assertEqual(gtutil.rows(
            self.db, "SELECT count(*) FROM op_args a JOIN ops o ON o.seq = a.op"
            " JOIN strings s ON s.id = o.name WHERE s.text = 'aten::cat' AND a.role = 0"),
            [(self.N,)])

    def test_every_edge(self):
        got = gtutil.rows(
            self.db, "SELECT count(*), count(DISTINCT e.pos), min(e.pos), max(e.pos),"
            " count(DISTINCT e.next) FROM edges e JOIN nodes n ON n.id = e.node"
            " JOIN strings s ON s.id = n.name WHERE s.text = 'CatBackward0'")
        self.assertEqual(got, [(self.N, self.N, 0, self.N - 1, self.N)])

    def test_diagnosed(self):
        the_finding(self, self.trace, HUGE)


def run_model(test, model, opt, impl, options=()):
    """Record cap_models.py and run it plain; returns (trace, diagnose JSON,
    truth, recorded stdout)."""
    truth_rec = os.path.join(gtutil.tmpdir(), "truth-%s-%s-%s-rec.json" % (model, opt, impl))
    truth_plain = truth_rec.replace("-rec", "-plain")
    trace, cp = gtutil.record(MODELS, model, opt, impl, truth_rec, timeout=900,
                              options=options)
    plain = gtutil.run_plain(MODELS, model, opt, impl, truth_plain, timeout=900)
    test.assertEqual(plain.returncode, 0, plain.stderr)
    # recording changes neither whether the run raises, nor its message, nor
    # its results
    test.assertEqual(cp.stdout, plain.stdout)
    with open(truth_rec) as f:
        truth = json.load(f)
    with open(truth_plain) as f:
        test.assertEqual(json.load(f), truth)
    rc, doc = diagnose(trace)
    test.assertIn(rc, (0, 1))
    return trace, doc, truth, cp.stdout


def check_stale(test, doc, truth, stdout):
    """Every stale weight found, once, and the first to fail is PyTorch's."""
    found = {}
    for f in doc["findings"]:
        test.assertEqual(f["kind"], "inplace_invalidated_saved", f)
        for n in f["saved"]["names"]:
            found[n] = found.get(n, 0) + 1
        # one write per update the optimizer makes (AdamW: decay, then step)
        test.assertEqual({m["location"]["line"] for m in f["mutations"]},
                         {marker(MODELS, "step")}, f)
        test.assertEqual(f["backward"]["location"]["line"], marker(MODELS, "backward"))
    test.assertEqual(sorted(found), truth["stale"])
    test.assertGreater(len(truth["stale"]), 64)  # more than the old 64-argument cap
    first = [f for f in doc["findings"] if f["first_to_fail"]]
    test.assertEqual(len(first), 1)
    test.assertTrue(first[0]["matches_error"])
    error = [l for l in stdout.splitlines() if l.startswith("error:")]
    test.assertEqual(len(error), 1, stdout)
    test.assertEqual(first[0]["saved"]["shape"], error_shape(error[0]))


class RealModels(unittest.TestCase):
    def test_resnet50_adam_foreach(self):
        trace, doc, truth, out = run_model(self, "resnet50", "adam", "foreach")
        self.assertEqual(truth["params"], 161)
        check_stale(self, doc, truth, out)
        self.assertEqual([f["saved"]["names"] for f in doc["findings"] if f["first_to_fail"]],
                         [["model.fc.weight"]])

    def test_transformer_adamw_loop(self):
        trace, doc, truth, out = run_model(self, "transformer", "adamw", "loop")
        self.assertEqual(truth["params"], 147)
        check_stale(self, doc, truth, out)
        self.assertEqual([f["saved"]["names"] for f in doc["findings"] if f["first_to_fail"]],
                         [["model.head.weight"]])


class Optimizers(unittest.TestCase):
    """A 150-layer MLP (300 parameter tensors), every optimizer
    implementation."""

    def check(self, opt, impl, options=()):
        trace, doc, truth, out = run_model(self, "mlp", opt, impl, options)
        self.assertEqual(truth["params"], 300)
        if impl != "fused":
            check_stale(self, doc, truth, out)
            return
        # fused kernels bump no version: PyTorch raises nothing (the gradients
        # are silently wrong); the recorder still sees every parameter written
        # by the one fused op (with their gradients and optimizer state)
        self.assertIn("no error", out)
        db = gtutil.connect(trace)
        written = gtutil.rows(
            db, "SELECT count(DISTINCT a.tensor) FROM op_args a JOIN ops o ON o.seq = a.op"
            " JOIN strings s ON s.id = o.name JOIN stacks st ON st.id = o.stack"
            " JOIN frames f ON f.id = st.user_frame JOIN tensors t ON t.id = a.tensor"
            " WHERE a.role = 2 AND s.text LIKE 'aten::_fused_%' AND f.line = ?"
            " AND t.is_leaf AND t.requires_grad",
            marker(MODELS, "step"))
        self.assertEqual(written, [(300,)])
        # the fused step wrote each weight the forward saved, moving no
        # version (a kernel write, recorded by default): every stale weight
        # is a silent_kernel_write, once, written at the step; with
        # --check-saved the changed bytes of each are that same finding
        # (no silent_saved_write beside it)
        names = [n for f in doc["findings"] for n in f["saved"]["names"]]
        self.assertEqual({f["kind"] for f in doc["findings"]}, {"silent_kernel_write"})
        self.assertEqual(sorted(names), truth["stale"])
        for f in doc["findings"]:
            self.assertEqual({m["location"]["line"] for m in f["mutations"]},
                             {marker(MODELS, "step")}, f)

    def test_adam_foreach(self):
        self.check("adam", "foreach")

    def test_adam_fused(self):
        self.check("adam", "fused", ["--check-saved"])

    def test_adam_loop(self):
        self.check("adam", "loop")

    def test_adamw_foreach(self):
        self.check("adamw", "foreach")

    def test_adamw_fused(self):
        self.check("adamw", "fused")

    def test_adamw_loop(self):
        self.check("adamw", "loop")

    def test_sgd_foreach(self):
        self.check("sgd", "foreach")

    def test_sgd_fused(self):
        self.check("sgd", "fused", ["--check-saved=off"])

    def test_sgd_loop(self):
        self.check("sgd", "loop")


if __name__ == "__main__":
    unittest.main()
