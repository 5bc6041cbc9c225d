"""A recorded script sees the stack `python3 script.py` gives it: its module
frame is the bottom one. Code that looks at its callers printed gradtrace's
runner and runpy's frames under it: traceback.print_stack,
len(inspect.stack()), sys._getframe().f_back, and anomaly mode's "Traceback
of forward call that caused the error" (the advice PyTorch's in-place error
gives). Each adapter's output, stdout and stderr, must equal the plain run's.
The script's __builtins__ is the builtins module, as
python3 gives __main__.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import unittest

import gtutil

SCRIPT = r'''
import inspect
import sys
import traceback

import torch

torch.autograd.set_detect_anomaly(True)
print("builtins", type(__builtins__).__name__)
print("module frame's caller", sys._getframe().f_back)


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


def _strip_footer(err):
    """stderr without gradtrace's own lines (the footer) and, after a
    failure, without the diagnosis that follows the traceback."""
    out = []
    for line in err.splitlines():
        if line.startswith("gradtrace: ") or line.startswith(gtutil.tmpdir()):
            break
        out.append(line)
    return out


class Frames(gtutil.BothAdapters, unittest.TestCase):
    def check(self, adapter):
        d = gtutil.tmpdir()
        script = os.path.join(d, "frames_script.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
        plain = gtutil.run_plain(script, "bug", env=env, cwd=d)
        _, cp = gtutil.record(script, "bug", env=env, cwd=d, expect_fail=True, options=("-q",))
        self.assertEqual(cp.returncode, plain.returncode)
        self.assertIn("depth 2", plain.stdout)
        self.assertEqual(cp.stdout, plain.stdout, "stdout differs from python3's")
        # the anomaly warning with the forward's stack, then the traceback
        self.assertIn("Traceback of forward call", cp.stderr)
        self.assertEqual(_strip_footer(cp.stderr), _strip_footer(plain.stderr))


if __name__ == "__main__":
    unittest.main()
