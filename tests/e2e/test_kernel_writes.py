"""Kernel writes found on a default recording (no option): an op that wrote
a saved tensor without moving its version before the backward that read it
is a silent_kernel_write naming the saved tensor, the line that saved it,
the line and op of the write and the backward's line, with a fix; the
recorded run prints what the plain run prints (nothing raised, the same
wrong gradient, which differs from the gradient of the correct order).
BatchNorm's running statistics (eval-mode forward, then a training-mode
one), a fused Adam step, batch_norm_update_stats; correct training code
(train-mode steps, no_grad evaluation, a residual network) gives no
finding. Runs on both adapters (e2e_dispatch_kernel_writes).

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("kernel_writes.py")


def line(case, tag):
    return gtutil.marker(SCRIPT, "%s-%s" % (case, tag))


def diagnose(trace):
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace], capture_output=True,
                       text=True, timeout=120)
    t = subprocess.run([gtutil.GRADTRACE, "diagnose", trace], capture_output=True,
                       text=True, timeout=120)
    return r.returncode, json.loads(r.stdout), t.stdout


class KernelWrites(unittest.TestCase):
    def check(self, case, op, saved_names, slots):
        trace, cp = gtutil.record(SCRIPT, case)
        plain = gtutil.run_plain(SCRIPT, case)
        right = gtutil.run_plain(SCRIPT, case, "correct")
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(cp.stdout, plain.stdout)  # the same silently wrong gradient
        wrong = [float(v) for v in plain.stdout.split()]
        good = [float(v) for v in right.stdout.split()]
        self.assertGreater(max(abs(a - b) for a, b in zip(wrong, good)), 0.05)
        rc, doc, text = diagnose(trace)
        self.assertEqual(rc, 1, text)
        found = doc["findings"]
        self.assertEqual([f["kind"] for f in found], ["silent_kernel_write"] * len(slots),
                         text)
        self.assertEqual(sorted(f["saved"]["slot"] for f in found), sorted(slots))
        for f in found:
            self.assertTrue(set(saved_names) & set(f["saved"]["names"]), f["saved"])
            self.assertEqual(f["node"]["location"]["line"], line(case, "save"))
            self.assertEqual(f["backward"]["location"]["line"], line(case, "backward"))
            self.assertEqual([(m["op"], m["location"]["line"]) for m in f["mutations"]],
                             [(op, line(case, "write"))])
        self.assertIn("which moves no version", text)
        self.assertRegex(text, r"written at +\S*kernel_writes\.py:%d" % line(case, "write"))
        db = gtutil.connect(trace)
        self.assertGreaterEqual(gtutil.one(db, "SELECT count(*) FROM kernel_writes k"
                                               " JOIN ops o ON o.seq = k.op JOIN strings s"
                                               " ON s.id = o.name WHERE s.text LIKE ?",
                                           op + "%"), 1)
        return found, text

    def test_batchnorm_eval_then_train(self):
        found, text = self.check("bn_eval_train", "aten::native_batch_norm",
                                 ["model.1.running_mean", "model.1.running_var"],
                                 ["running_mean", "running_var"])
        self.assertIn("call backward() before the next training-mode forward", text)
        db = gtutil.connect(gtutil.record(SCRIPT, "bn_eval_train")[0])
        # the eval-mode call writes nothing; the training-mode one both statistics
        rows = gtutil.rows(db, "SELECT k.marked, count(*) FROM kernel_writes k"
                               " GROUP BY k.op ORDER BY k.op")
        self.assertEqual(rows, [(0, 2)])

    def test_fused_adam(self):
        found, text = self.check("fused_adam", "aten::_fused_adam_", ["w"], ["mat2"])
        self.assertIn("call optimizer.step() after backward()", text)

    def test_batch_norm_update_stats(self):
        found, text = self.check("update_stats", "aten::batch_norm_update_stats",
                                 ["rm", "rv"], ["running_mean", "running_var"])
        self.assertIn("updates the running statistics in place", text)

    def test_correct_training(self):
        trace, cp = gtutil.record(SCRIPT, "bn_train")
        self.assertEqual(cp.stdout, gtutil.run_plain(SCRIPT, "bn_train").stdout)
        rc, doc, text = diagnose(trace)
        self.assertEqual((rc, doc["findings"]), (0, []), text)
        db = gtutil.connect(trace)
        # the running statistics were written (recorded), never read after
        self.assertGreater(gtutil.one(db, "SELECT count(*) FROM kernel_writes"), 10)


if __name__ == "__main__":
    unittest.main()
