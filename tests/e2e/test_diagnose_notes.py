"""diagnose's notes say only what happened.

The "torch.compile'd code ran eagerly while recording" note must not come
from code PyTorch merely wraps with torch._disable_dynamo (checkpoint, torch
func transforms): its wrapper is a frame of TorchDynamo's eval_frame.py too.
(test_capture_compile checks the note does come when compiled code ran.)
On each adapter (ctest runs a dispatch variant).

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402


class DisabledIsNotCompiled(unittest.TestCase):
    def test_no_compile_note(self):
        out, _ = gtutil.record(gtutil.scenario("dynamo_disabled.py"))
        db = gtutil.connect(out)
        # the wrapper's frame is in the trace: the case is real
        self.assertTrue(db.execute(
            "SELECT count(*) FROM frames f JOIN strings s ON s.id = f.file"
            " WHERE s.text LIKE '%/torch/_dynamo/eval_frame.py'").fetchone()[0])
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", out], capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIs(json.loads(r.stdout)["compiled_ran_eagerly"], False)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", out], capture_output=True, text=True,
                           timeout=300)
        self.assertNotIn("torch.compile", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
