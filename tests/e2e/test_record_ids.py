"""Stable ids and unchanged behaviour under recording.

- 10,000 tensors allocated and freed in a loop reuse a handful of object
  addresses and data pointers, yet get 10,000 distinct tensor ids and
  10,000 distinct storage ids.
- A correct 20-step training loop prints bitwise-equal losses and final
  parameters with and without recording.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import unittest

import gtutil
from gtutil import one


class StableIds(unittest.TestCase):
    def test_churn(self):
        trace, cp = gtutil.record(gtutil.scenario("rec_churn.py"))
        words = cp.stdout.split()
        ptrs, addrs = int(words[1]), int(words[3])
        # memory really was reused...
        self.assertLess(ptrs, 10000)
        self.assertLess(addrs, 10000)
        db = gtutil.connect(trace)
        empties = db.execute(
            "SELECT a.tensor, t.storage FROM op_args a JOIN ops o ON o.seq = a.op"
            " JOIN strings s ON s.id = o.name JOIN tensors t ON t.id = a.tensor"
            " WHERE s.text LIKE 'aten::empty%' AND a.role = 1").fetchall()
        # ...but no id was
        self.assertEqual(len(empties), 10000)
        self.assertEqual(len({r[0] for r in empties}), 10000)
        self.assertEqual(len({r[1] for r in empties}), 10000)
        self.assertEqual(one(db, "SELECT count(*) FROM tensors"),
                         one(db, "SELECT count(DISTINCT id) FROM tensors"))


class SameResults(unittest.TestCase):
    def test_training_is_bitwise_equal(self):
        script = gtutil.scenario("rec_train.py")
        plain = gtutil.run_plain(script)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        trace, cp = gtutil.record(script)
        self.assertEqual(cp.stdout, plain.stdout)
        self.assertEqual(len(cp.stdout.splitlines()), 20 + 4)
        db = gtutil.connect(trace)
        self.assertEqual(one(db, "SELECT count(*) FROM backward_calls WHERE status = 'ok'"), 20)
        # every op of the optimizers was recorded too (Adam's updates mutate
        # exp_avg, exp_avg_sq and the parameters)
        self.assertGreater(one(db, "SELECT count(*) FROM version_bumps b JOIN ops o"
                                   " ON o.seq = b.op WHERE o.phase = 2"), 20 * 4)
        self.assertEqual(one(db, "SELECT count(*) FROM nodes n JOIN strings s"
                                 " ON s.id = n.name WHERE s.text = 'AddmmBackward0'"), 40)


if __name__ == "__main__":
    unittest.main()
