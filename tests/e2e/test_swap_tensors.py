"""Recording never changes whether torch.utils.swap_tensors raises.

swap_tensors refuses tensors with weak references (the recorder holds one on
each tensor it has seen) or extra uses: recorded, the scenario (module
conversion, load_state_dict(assign=True), a direct swap) must run to the end
with the same printed loss as a plain run, and leave a readable trace with
no finding. On each adapter (ctest runs a dispatch variant).

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("swap_tensors.py")


class SwapTensors(unittest.TestCase):
    def test_swaps_run_as_without_recording(self):
        plain = gtutil.run_plain(SCRIPT)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        out, cp = gtutil.record(SCRIPT)
        self.assertEqual(cp.stdout.strip(), plain.stdout.strip(), cp.stderr)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", out], capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["findings"], [])
        db = gtutil.connect(out)
        self.assertEqual(db.execute("SELECT count(*) FROM backward_calls").fetchone()[0], 12)
        self.assertEqual(db.execute("SELECT status FROM run").fetchone()[0], "ok")


if __name__ == "__main__":
    unittest.main()
