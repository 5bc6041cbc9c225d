"""CUDA training patterns, recorded on both adapters: the seed on the GPU,
autocast with GradScaler, fused and foreach Adam stepped between a forward
and its backward, cuDNN LSTMs, a non_blocking copy into a saved tensor, a
step captured into a CUDA graph, and an in-place all_reduce under NCCL (two
GPUs). Each case runs wherever torch sees a GPU; where it does not, every
case is skipped with the reason.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("cuda_patterns.py")
NCCL = gtutil.scenario("cuda_nccl_silent.py")


def probe():
    """(number of GPUs torch sees, torch's version) in the test's interpreter."""
    cp = subprocess.run([gtutil.PYTHON, "-c",
                         "import torch; print(torch.cuda.device_count() if "
                         "torch.cuda.is_available() else 0, torch.__version__)"],
                        capture_output=True, text=True, timeout=120)
    if cp.returncode != 0:
        return 0, "?"
    n, v = cp.stdout.split()
    return int(n), v


GPUS, TORCH = probe()
NO_GPU = "no CUDA device visible to torch %s: CUDA cases not run" % TORCH


def marker(tag, script=SCRIPT):
    return gtutil.marker(script, tag)


def env_for(adapter):
    env = dict(os.environ)
    env["GRADTRACE_ADAPTER"] = adapter
    return env


def diagnose(trace):
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace], capture_output=True,
                       text=True, timeout=300)
    return r.returncode, json.loads(r.stdout)


def last_line(text):
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1] if lines else ""


@unittest.skipUnless(GPUS > 0, NO_GPU)
class CudaPatterns(unittest.TestCase):
    def record(self, case, adapter, expect_fail=False):
        return gtutil.record(SCRIPT, case, expect_fail=expect_fail, env=env_for(adapter),
                             timeout=600)

    def raised(self, case, adapter, save, write, backward):
        """A case PyTorch raises for: one inplace_invalidated_saved finding,
        saved at `save`, written at `write`, needed by `backward`."""
        trace, cp = self.record(case, adapter, expect_fail=True)
        self.assertIn("modified by an inplace operation", cp.stderr)
        rc, doc = diagnose(trace)
        self.assertEqual(rc, 1, json.dumps(doc)[:2000])
        first = [f for f in doc["findings"] if f["first_to_fail"]]
        self.assertEqual(len(first), 1, json.dumps(doc)[:2000])
        f = first[0]
        self.assertEqual(f["kind"], "inplace_invalidated_saved")
        self.assertTrue(f["matches_error"])
        self.assertEqual(f["node"]["location"]["line"], marker(save))
        self.assertIn(marker(write), [m["location"]["line"] for m in f["mutations"]])
        self.assertEqual(f["backward"]["location"]["line"], marker(backward))
        db = gtutil.connect(trace)
        devices = {r[0] for r in db.execute(
            "SELECT DISTINCT s.text FROM storages st JOIN strings s ON s.id = st.device")}
        self.assertIn("cuda:0", devices)  # the device with its index
        opts = json.loads(gtutil.one(db, "SELECT options FROM run"))
        self.assertEqual(opts["adapter"], adapter)
        return f

    def same_as_plain(self, case, adapter):
        """A case PyTorch runs through: the recorded run prints what the plain
        run prints, and diagnose finds nothing."""
        plain = gtutil.run_plain(SCRIPT, case, timeout=600)
        self.assertEqual(plain.returncode, 0, plain.stderr[-2000:])
        trace, cp = self.record(case, adapter)
        self.assertEqual(cp.stdout, plain.stdout)
        rc, doc = diagnose(trace)
        self.assertEqual((rc, doc["findings"]), (0, []))

    def each(self, fn):
        for adapter in ("dispatch", "engine"):
            if adapter == "engine" and gtutil.adapter() != "engine":
                print("engine adapter not built for torch %s: dispatch only" % TORCH)
                continue
            with self.subTest(adapter=adapter):
                fn(adapter)

    def test_seed_on_the_gpu(self):
        def check(a):
            f = self.raised("seed", a, "cuda-save", "cuda-write", "cuda-backward")
            self.assertIn("class_weights", f["saved"]["names"])
            self.assertEqual(f["saved"]["shape"], [3])
        self.each(check)

    def test_autocast_grad_scaler_is_clean(self):
        self.each(lambda a: self.same_as_plain("amp", a))

    def test_fused_adam_step_before_backward(self):
        self.each(lambda a: self.raised("fused_adam", a, "cuda-adam-forward",
                                        "cuda-adam-step", "cuda-adam-backward"))

    def test_foreach_adam_step_before_backward(self):
        self.each(lambda a: self.raised("foreach_adam", a, "cuda-adam-forward",
                                        "cuda-adam-step", "cuda-adam-backward"))

    def test_recording_never_waits_for_the_device(self):
        self.each(lambda a: self.same_as_plain("nosync", a))

    def test_cudnn_lstm_is_clean(self):
        self.each(lambda a: self.same_as_plain("lstm", a))

    def test_flatten_parameters_between_forward_and_backward(self):
        def check(a):
            plain = gtutil.run_plain(SCRIPT, "lstm_flatten", timeout=600)
            trace, cp = self.record("lstm_flatten", a, expect_fail=plain.returncode != 0)
            self.assertEqual(cp.stdout, plain.stdout)
            self.assertEqual(last_line(cp.stderr.split("gradtrace:")[0]),
                             last_line(plain.stderr))
            rc, doc = diagnose(trace)
            # a raising run is explained; a clean one has no finding
            self.assertEqual(rc, 1 if plain.returncode else 0, json.dumps(doc)[:2000])
        self.each(check)

    def test_non_blocking_copy_into_saved(self):
        self.each(lambda a: self.raised("non_blocking", a, "cuda-nb-save", "cuda-nb-write",
                                        "cuda-nb-backward"))

    def test_cuda_graph_capture(self):
        """Recorded as the plain run behaves, or refused with one line that
        says so; never a different result."""
        def check(a):
            plain = gtutil.run_plain(SCRIPT, "graph", timeout=600)
            self.assertEqual(plain.returncode, 0, plain.stderr[-2000:])
            trace, cp = self.record("graph", a)
            self.assertEqual(cp.stdout, plain.stdout)
            print("cuda graph, %s adapter: %s" % (
                a, [l for l in cp.stderr.splitlines() if l.startswith("gradtrace:")]))
        self.each(check)


@unittest.skipUnless(GPUS >= 2, "fewer than two GPUs (%d): NCCL case not run" % GPUS)
class Nccl(unittest.TestCase):
    def test_all_reduce_on_saved_tensor(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        d = gtutil.tmpdir()
        out = os.path.join(d, "nccl.db")
        trace, cp = gtutil.record(NCCL, port, out=out, timeout=600)
        self.assertIn("rank 0 grad [3.0, 3.0, 3.0, 3.0]", cp.stdout)
        for r in range(2):
            t = os.path.join(d, "nccl.rank%d.db" % r)
            rc, doc = diagnose(t)
            self.assertEqual(rc, 1)
            f = doc["findings"][0]
            self.assertEqual(f["kind"], "silent_storage_write")
            self.assertEqual(f["mutations"][0]["location"]["line"],
                             marker("nccl-write", NCCL))


if __name__ == "__main__":
    if GPUS == 0:
        print("test_cuda: " + NO_GPU)
    unittest.main(verbosity=2)
