"""A run that ends with os._exit(n) (training scripts do, to skip hanging
DataLoader or process-group teardown) leaves a finished trace with its
backward calls and exit code n: os._exit skips atexit and finally blocks,
and the trace held no rows at all. A forked child's os._exit (multiprocessing
ends every fork child with it) does not close the parent's trace.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import unittest

import gtutil

SCRIPT = r'''
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


class OsExit(gtutil.BothAdapters, unittest.TestCase):
    def check(self, adapter):
        d = gtutil.tmpdir()
        script = os.path.join(d, "os_exit_script.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
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


if __name__ == "__main__":
    unittest.main()
