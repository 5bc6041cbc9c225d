"""Record real PyTorch runs of the classic in-place mistakes and check the
rows: the saved tensors with their versions, the version bumps with the ops
and source lines that made them, variable names, backward calls and the
error PyTorch raised.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest); runs with either PyTorch.
"""
import os
import subprocess
import unittest

import gtutil
from gtutil import bumps, counter_of, one, rows, saved, tensors_named, user_line


def line_of(path, text):
    """1-based number of the first line of path containing text."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return n
    raise AssertionError("%r not in %s" % (text, path))


class Seed(unittest.TestCase):
    """examples/seed_class_weights.py: class weights passed as weight= to
    nll_loss, then updated in place one class at a time before backward."""

    @classmethod
    def setUpClass(cls):
        cls.script = gtutil.example("seed_class_weights.py")
        cls.trace, cls.cp = gtutil.record(cls.script, expect_fail=True)
        cls.db = gtutil.connect(cls.trace)

    def test_exit_and_footer(self):
        self.assertEqual(self.cp.returncode, 1)
        last = self.cp.stderr.strip().splitlines()[-1]
        self.assertEqual(
            last, "gradtrace: trace written to %s; the run failed, diagnose it with: "
            "gradtrace diagnose %s" % (self.trace, self.trace))
        self.assertIn("is at version 6; expected version 0 instead", self.cp.stderr)

    def test_saved_weight_at_version_0(self):
        s = saved(self.db, "NllLossBackward0")
        weight = [r for r in s if r[0] == "weight"]
        self.assertEqual(len(weight), 1, s)
        slot, tensor, version, is_output = weight[0]
        self.assertEqual((version, is_output), (0, 0))
        self.assertIn(tensor, tensors_named(self.db, "class_weights"))
        self.assertEqual(one(self.db, "SELECT shape FROM tensors WHERE id = ?", tensor), "[3]")

    def test_bumps_1_to_6_on_the_update_line(self):
        tensor = [r for r in saved(self.db, "NllLossBackward0") if r[0] == "weight"][0][1]
        line = line_of(self.script, "class_weights[i] *= 1.0 + share")
        expected = []
        for i in range(3):
            expected.append((2 * i + 1, "aten::mul_.Tensor", 0, line))
            expected.append((2 * i + 2, "aten::copy_", 0, line))
        self.assertEqual(bumps(self.db, counter_of(self.db, tensor)), expected)
        # the bumps land on select views of class_weights, sharing its counter
        views = rows(self.db, "SELECT DISTINCT t.alias_of, t.shares_version FROM version_bumps b"
                              " JOIN tensors t ON t.id = b.tensor"
                              " WHERE t.version_counter = ?", counter_of(self.db, tensor))
        self.assertEqual(views, [(tensor, 1)])

    def test_names(self):
        named = tensors_named(self.db, "class_weights")
        tensor = [r for r in saved(self.db, "NllLossBackward0") if r[0] == "weight"][0][1]
        self.assertIn(tensor, named)
        # the views written through are named after their base too
        self.assertGreater(len(named), 1)

    def test_error_row(self):
        err = rows(self.db, "SELECT s.text, e.message, e.backward, e.stack FROM errors e"
                            " JOIN strings s ON s.id = e.type")
        self.assertEqual(len(err), 1, err)
        etype, message, backward, stack = err[0]
        self.assertEqual((etype, backward), ("RuntimeError", 1))
        self.assertTrue(message.startswith(
            "one of the variables needed for gradient computation has been modified by an "
            "inplace operation: [torch.FloatTensor [3]] is at version 6; expected version 0 "
            "instead."), message)
        self.assertIn(message, self.cp.stderr)
        self.assertEqual(user_line(self.db, stack),
                         ("seed_class_weights.py", line_of(self.script, "loss.backward()"),
                          "loss.backward()"))
        self.assertEqual(rows(self.db, "SELECT id, status, retain_graph FROM backward_calls"),
                         [(1, "error", 0)])
        self.assertEqual(rows(self.db, "SELECT status, exit_code FROM run"),
                         [("exception", 1)])

    def test_nll_node_and_edges(self):
        node = rows(self.db, "SELECT n.id, o.seq FROM nodes n JOIN strings s ON s.id = n.name"
                             " JOIN ops o ON o.seq = n.op JOIN strings os ON os.id = o.name"
                             " WHERE s.text = 'NllLossBackward0'"
                             " AND os.text LIKE 'aten::nll_loss%'")
        self.assertEqual(len(node), 1, node)
        nexts = rows(self.db, "SELECT s.text FROM edges e JOIN nodes n ON n.id = e.next"
                              " JOIN strings s ON s.id = n.name WHERE e.node = ?", node[0][0])
        self.assertEqual(nexts, [("LogSoftmaxBackward0",)])
        roots = rows(self.db, "SELECT node FROM backward_roots WHERE backward = 1")
        self.assertEqual(len(roots), 1)
        self.assertIsNotNone(roots[0][0])


    def test_names_of_saved_tensors_and_parameters(self):
        # bound at the backward call (and again at its error) from the
        # user's frame, not only for tensors mutated in place
        lsm = one(self.db, "SELECT a.tensor FROM ops o JOIN strings s ON s.id = o.name "
                  "JOIN op_args a ON a.op = o.seq AND a.role = 1 "
                  "WHERE s.text = 'aten::_log_softmax' ORDER BY o.seq LIMIT 1")
        self.assertIn(lsm, tensors_named(self.db, "log_probs"))
        weight = [r for r in saved(self.db, "NllLossBackward0") if r[0] == "weight"][0][1]
        self.assertIn(weight, tensors_named(self.db, "class_weights"))
        nll = one(self.db, "SELECT a.tensor FROM ops o JOIN strings s ON s.id = o.name "
                  "JOIN op_args a ON a.op = o.seq AND a.role = 1 "
                  "WHERE s.text = 'aten::nll_loss_forward' ORDER BY o.seq LIMIT 1")
        self.assertEqual(tensors_named(self.db, "loss"), [nll])
        # nn.Module parameters: "<variable>.<named_parameters() name>"
        for name, shape in (("model.0.weight", "[8,4]"), ("model.0.bias", "[8]"),
                            ("model.2.weight", "[3,8]"), ("model.2.bias", "[3]")):
            (t,) = tensors_named(self.db, name)
            self.assertEqual(rows(self.db, "SELECT shape, is_leaf, requires_grad FROM tensors "
                                  "WHERE id = ?", t), [(shape, 1, 1)])
            # the leaf its AccumulateGrad node accumulates into
            self.assertEqual(one(self.db, "SELECT count(*) FROM nodes n JOIN strings s "
                                 "ON s.id = n.name WHERE s.text = 'AccumulateGrad' "
                                 "AND n.variable = ?", t), 1)
        # names only for recorded tensors: no id made up for a bare name
        self.assertEqual(one(self.db, "SELECT count(*) FROM names n WHERE NOT EXISTS "
                             "(SELECT 1 FROM tensors t WHERE t.id = n.tensor)"), 0)
        # the names of the failing backward call's frame: at its begin event
        bseq = one(self.db, "SELECT seq FROM backward_calls WHERE id = 1")
        self.assertIn(bseq, [r[0] for r in rows(
            self.db, "SELECT n.seq FROM names n JOIN strings s ON s.id = n.name "
            "WHERE s.text = 'model.0.weight'")])


class NodeExecs(unittest.TestCase):
    """The repaired seed (--fixed) trains two steps: node_execs lists the
    nodes the engine ran during each backward, in engine order."""

    @classmethod
    def setUpClass(cls):
        cls.script = gtutil.example("seed_class_weights.py")
        cls.trace, cls.cp = gtutil.record(cls.script, "--fixed")
        cls.db = gtutil.connect(cls.trace)
        probe = subprocess.run([gtutil.PYTHON, "-c", "import torch; print(hasattr("
                                "torch._C, '_current_autograd_node'))"],
                               capture_output=True, text=True, timeout=300)
        cls.supported = probe.stdout.strip() == "True"

    def execs(self, backward):
        return rows(self.db, "SELECT e.node, s.text FROM node_execs e JOIN nodes n "
                    "ON n.id = e.node JOIN strings s ON s.id = n.name "
                    "WHERE e.backward = ? ORDER BY e.seq", backward)

    def test_engine_order(self):
        if not self.supported:
            self.assertEqual(rows(self.db, "SELECT count(*) FROM node_execs"), [(0,)])
            self.skipTest("no torch._C._current_autograd_node in this PyTorch")
        for bid in (1, 2):
            ex = self.execs(bid)
            names = [n for _, n in ex if n != "AccumulateGrad"]
            # root first, then down the classifier: the ops each node ran
            self.assertEqual(names, ["NllLossBackward0", "LogSoftmaxBackward0",
                                     "AddmmBackward0", "TBackward0", "ReluBackward0",
                                     "AddmmBackward0", "TBackward0"], ex)
            root = one(self.db, "SELECT node FROM backward_roots WHERE backward = ?", bid)
            self.assertEqual(ex[0][0], root)
            # each node once, and only nodes of the graph that backward ran on
            self.assertEqual(len({n for n, _ in ex}), len(ex))
            self.assertEqual(one(self.db, "SELECT count(*) FROM node_execs e "
                                 "JOIN nodes n ON n.id = e.node WHERE e.backward = ? "
                                 "AND n.op IS NULL AND n.variable IS NULL", bid), 0)
        # step 2 runs a new graph: its interior nodes are not step 1's
        first = {n for n, s in self.execs(1) if s != "AccumulateGrad"}
        second = {n for n, s in self.execs(2) if s != "AccumulateGrad"}
        self.assertEqual(first & second, set())


class ReluInplace(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.script = gtutil.scenario("rec_relu_inplace.py")
        cls.trace, cls.cp = gtutil.record(cls.script, expect_fail=True)
        cls.db = gtutil.connect(cls.trace)

    def test_sigmoid_result_saved_then_bumped_by_relu_(self):
        [h] = tensors_named(self.db, "h")
        self.assertEqual(saved(self.db, "SigmoidBackward0"), [("result", h, 0, 1)])
        line = line_of(self.script, "out = act(h)")
        self.assertEqual(bumps(self.db, counter_of(self.db, h)), [(1, "aten::relu_", 0, line)])
        self.assertEqual(one(self.db, "SELECT s.text FROM ops o JOIN strings s ON s.id = o.name"
                                      " WHERE o.seq = (SELECT created_by FROM tensors"
                                      " WHERE id = ?)", h), "aten::sigmoid")
        # ReluBackward0 saved the same tensor after the bump
        self.assertEqual(saved(self.db, "ReluBackward0"), [("result", h, 1, 1)])
        err = one(self.db, "SELECT message FROM errors")
        self.assertIn("is at version 1; expected version 0 instead", err)


class GanStep(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.script = gtutil.scenario("rec_gan_step.py")
        cls.trace, cls.cp = gtutil.record(cls.script, expect_fail=True)
        cls.db = gtutil.connect(cls.trace)

    def test_weight_saved_at_1_stepped_to_2(self):
        line_fwd = line_of(self.script, "d_fake = D(fake)")
        mat2 = rows(self.db,
                    "SELECT st.tensor, st.version FROM saved_tensors st"
                    " JOIN nodes n ON n.id = st.node JOIN ops o ON o.seq = n.op"
                    " JOIN stacks s ON s.id = o.stack JOIN frames f ON f.id = s.user_frame"
                    " JOIN strings sl ON sl.id = st.slot"
                    " WHERE sl.text = 'mat2' AND f.line = ?", line_fwd)
        self.assertEqual(len(mat2), 1, mat2)
        tensor, version = mat2[0]
        self.assertEqual(version, 1)
        # mat2 is D.weight.t(): a view sharing the weight's counter
        weight, shares = rows(self.db, "SELECT alias_of, shares_version FROM tensors"
                                       " WHERE id = ?", tensor)[0]
        self.assertEqual(shares, 1)
        self.assertEqual(counter_of(self.db, weight), counter_of(self.db, tensor))
        self.assertEqual(
            bumps(self.db, counter_of(self.db, weight)),
            [(1, "aten::uniform_", 0, line_of(self.script, "D = torch.nn.Linear(6, 1)")),
             (2, "aten::add_.Tensor", 0, line_of(self.script, "opt_d.step()"))])
        phase = one(self.db, "SELECT o.phase FROM version_bumps b JOIN ops o ON o.seq = b.op"
                             " JOIN tensors t ON t.id = b.tensor"
                             " WHERE t.version_counter = ? AND b.version = 2",
                    counter_of(self.db, weight))
        self.assertEqual(phase, 2)  # other: the optimizer runs under no_grad

    def test_backward_calls(self):
        self.assertEqual(
            rows(self.db, "SELECT id, status, retain_graph, create_graph FROM backward_calls"),
            [(1, "ok", 1, 0), (2, "error", 0, 0)])
        self.assertIn("is at version 2; expected version 1 instead",
                      one(self.db, "SELECT message FROM errors WHERE backward = 2"))


class ViewWrite(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.script = gtutil.scenario("rec_view_write.py")
        cls.trace, cls.cp = gtutil.record(cls.script, expect_fail=True)
        cls.db = gtutil.connect(cls.trace)

    def test_write_through_view(self):
        named_y = tensors_named(self.db, "y")
        [v] = tensors_named(self.db, "v")
        y = one(self.db, "SELECT alias_of FROM tensors WHERE id = ?", v)
        self.assertIn(y, named_y)
        self.assertEqual(one(self.db, "SELECT shares_version FROM tensors WHERE id = ?", v), 1)
        self.assertEqual(saved(self.db, "ExpBackward0"), [("result", y, 0, 1)])
        line = line_of(self.script, "v.add_(1)")
        self.assertEqual(bumps(self.db, counter_of(self.db, y)),
                         [(1, "aten::add_.Tensor", 0, line)])
        # the bump is on the view, the name on both
        self.assertEqual(one(self.db, "SELECT tensor FROM version_bumps WHERE op IS NOT NULL"
                                      " ORDER BY seq LIMIT 1"), v)
        copy_slices = one(self.db, "SELECT s.text FROM nodes n JOIN ops o ON o.seq = n.op"
                                   " JOIN strings s ON s.id = o.name"
                                   " JOIN strings ns ON ns.id = n.name"
                                   " WHERE ns.text = 'CopySlices'")
        self.assertEqual(copy_slices, "aten::add_.Tensor")
        self.assertIn("is at version 1; expected version 0 instead",
                      one(self.db, "SELECT message FROM errors"))


class DataWrite(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.script = gtutil.scenario("rec_data_write.py")
        cls.trace, cls.cp = gtutil.record(cls.script)
        cls.db = gtutil.connect(cls.trace)

    def test_data_has_its_own_counter(self):
        self.assertEqual(self.cp.stdout, "grad [1.0, 2.0, 3.0]\n")
        [wd] = tensors_named(self.db, "wd")
        w, shares, storage = rows(self.db, "SELECT alias_of, shares_version, storage"
                                           " FROM tensors WHERE id = ?", wd)[0]
        self.assertEqual(shares, 0)
        self.assertEqual(one(self.db, "SELECT storage FROM tensors WHERE id = ?", w), storage)
        # w is the tensor AccumulateGrad accumulates into
        self.assertEqual(one(self.db, "SELECT count(*) FROM nodes WHERE variable = ?", w), 1)
        self.assertNotEqual(counter_of(self.db, wd), counter_of(self.db, w))
        self.assertEqual(bumps(self.db, counter_of(self.db, wd)),
                         [(1, "aten::mul_.Tensor", 0, line_of(self.script, "wd.mul_(2)"))])
        self.assertEqual(bumps(self.db, counter_of(self.db, w)), [])
        [(slot, x, version, is_output)] = saved(self.db, "MulBackward0")
        self.assertEqual((slot, version, is_output), ("other", 0, 0))
        self.assertNotEqual(one(self.db, "SELECT storage FROM tensors WHERE id = ?", x), storage)
        self.assertEqual(rows(self.db, "SELECT status FROM backward_calls"), [("ok",)])
        self.assertEqual(rows(self.db, "SELECT status, exit_code FROM run"), [("ok", 0)])
        self.assertEqual(rows(self.db, "SELECT * FROM errors"), [])


class RaiseEarly(unittest.TestCase):
    def test_same_as_plain_python(self):
        script = gtutil.scenario("rec_raise_early.py")
        trace, cp = gtutil.record(script, expect_fail=True)
        plain = gtutil.run_plain(script)
        self.assertEqual(cp.returncode, plain.returncode)
        self.assertEqual(cp.returncode, 1)
        self.assertEqual(cp.stdout, plain.stdout)
        err = cp.stderr.splitlines(True)
        self.assertTrue(err[-1].startswith("gradtrace: trace written to "), err[-1])
        self.assertEqual("".join(err[:-1]), plain.stderr)
        self.assertIn("ValueError: bad size 3 for layer 'fc1'", plain.stderr)
        db = gtutil.connect(trace)
        self.assertEqual(rows(db, "SELECT status, exit_code FROM run"), [("exception", 1)])
        etype, message, stack, backward = rows(
            db, "SELECT s.text, e.message, e.stack, e.backward FROM errors e"
                " JOIN strings s ON s.id = e.type")[0]
        self.assertEqual((etype, message, backward), ("ValueError", "bad size 3 for layer 'fc1'",
                                                     None))
        line = line_of(script, "raise ValueError")
        self.assertEqual(user_line(db, stack)[:2], ("rec_raise_early.py", line))
        self.assertEqual(one(db, "SELECT count(*) FROM backward_calls"), 0)
        argv = one(db, "SELECT argv FROM run")
        self.assertEqual(argv, '["%s"]' % script)
        self.assertEqual(one(db, "SELECT cwd FROM run"), os.getcwd())


if __name__ == "__main__":
    unittest.main()
