"""The protocol both adapters implement (adapters/protocol/protocol.c): the
C recorder object of each adapter answers the same methods the same way.
A closed window reads as not recording on both (the engine's `recording`
once ignored it), set_active raises what the truth of its argument raises,
backward_end takes (id, exc) and skips id 0, close takes no arguments and
answers None once closed, and `failed` stays False after a clean close.

Env: GT_SOURCE_DIR, PYTHONPATH (set by ctest).
"""
import json
import os
import subprocess
import unittest

import gtutil

SCRIPT = r'''
import json, sys
import torch
import gradtrace

class Untruthful:
    def __bool__(self):
        raise ZeroDivisionError("no truth")

out = {}
rec = gradtrace.record(sys.argv[1], overwrite=True, quiet=True)
with rec:
    r = rec._rec
    c = getattr(r, "_eng", r)  # the C object (the engine's behind EngineRecorder)
    out["recording"] = c.recording
    c.set_active(False)
    out["recording_window_closed"] = c.recording
    try:
        c.set_active(Untruthful())
        out["untruthful"] = "no error"
    except ZeroDivisionError as e:
        out["untruthful"] = str(e)
    c.set_active(True)
    out["recording_reopened"] = c.recording
    c.backward_end(0, None)
    c.call_end(0, None)
    out["failed_open"] = c.failed
    x = torch.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    c.flush()  # the engine folds what it captured every 50 ms
    out["seq_grew"] = c.seq > 0
out["recording_closed"] = c.recording
out["failed_closed"] = c.failed
out["close_again"] = c.close()
print(json.dumps(out))
'''

EXPECTED = {
    "recording": True,
    "recording_window_closed": False,
    "untruthful": "no truth",
    "recording_reopened": True,
    "failed_open": False,
    "seq_grew": True,
    "recording_closed": False,
    "failed_closed": False,
    "close_again": None,
}


class Protocol(unittest.TestCase):
    def run_adapter(self, adapter):
        env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
        if gtutil.adapter_of(env) != adapter:
            self.skipTest(adapter + " adapter not built here")
        path = os.path.join(gtutil.tmpdir(), adapter + ".db")
        cp = subprocess.run([gtutil.PYTHON, "-c", SCRIPT, path], capture_output=True,
                            text=True, env=env, timeout=300)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        got = json.loads(cp.stdout.strip().splitlines()[-1])
        self.assertEqual(got, EXPECTED, adapter)

    def test_dispatch(self):
        self.run_adapter("dispatch")

    def test_engine(self):
        self.run_adapter("engine")


if __name__ == "__main__":
    unittest.main()
