"""--check-saved[=sampled|full|off]: every saved CPU tensor is fingerprinted
at save and when its node runs, sampled (4 KB of it) by default. A write
through a NumPy view into a custom Function's saved output, an in-place
NumPy normalisation of a saved observation and a "fused kernel" writing
through data_ptr() into saved logits (no version bump, no error, wrong
gradient) are each a silent_saved_write naming where it was saved, the
backward that used it and the line after which the memory changed. Correct
recurrent models whose cells write the neighbours of a saved gate (nn.GRU,
nn.GRUCell, nn.LSTMCell) have no finding in either mode; the same run
without the write has none; with --check-saved=off nothing is fingerprinted.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("cap_numpy.py")
RNN = gtutil.scenario("cap_rnn_cells.py")


def marker(tag):
    return gtutil.marker(SCRIPT, tag)


def diagnose(trace, cwd=None):
    r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace], capture_output=True,
                       text=True, timeout=120, cwd=cwd)
    return r.returncode, json.loads(r.stdout)


def mode_of(trace):
    db = gtutil.connect(trace)
    return json.loads(gtutil.one(db, "SELECT options FROM run"))["check_saved"]


class CheckSaved(unittest.TestCase):
    def found(self, case, options, save, backward):
        """Record `case` with options: one silent_saved_write, saved at line
        `save`, needed at `backward`; returns the finding."""
        trace, cp = gtutil.record(SCRIPT, case, options=options)
        plain = gtutil.run_plain(SCRIPT, case)
        self.assertEqual(cp.stdout, plain.stdout)  # the same wrong gradient
        rc, doc = diagnose(trace)
        self.assertEqual(rc, 1)
        self.assertEqual([f["kind"] for f in doc["findings"]], ["silent_saved_write"])
        f = doc["findings"][0]
        self.assertEqual(f["node"]["location"]["line"], marker(save))
        self.assertEqual(f["backward"]["location"]["line"], marker(backward))
        # no recorded op wrote it: no "written at" line
        self.assertEqual(f["mutations"], [])
        return trace, f

    def test_numpy_write_found_by_default(self):
        trace, f = self.found("numpy", [], "save", "backward")
        self.assertIn("grad [0.0, 0.0, 0.0, 0.0]", gtutil.run_plain(SCRIPT, "numpy").stdout)
        self.assertIn("y", f["saved"]["names"])
        # the fix names the line that handed the memory out (y.detach().numpy())
        self.assertIn("cap_numpy.py:%d (aten::detach" % marker("touch"), f["suggestion"])
        self.assertIn("sampled check", f["suggestion"])
        # as every path of the report: relative to the working directory
        _, doc = diagnose(os.path.abspath(trace), cwd=os.path.dirname(SCRIPT))
        self.assertIn(", after cap_numpy.py:%d (aten::detach" % marker("touch"),
                      doc["findings"][0]["suggestion"])
        self.assertEqual(mode_of(trace), "sampled")
        db = gtutil.connect(trace)
        prints = gtutil.rows(db, "SELECT at_use, nbytes FROM saved_fingerprints ORDER BY at_use")
        self.assertEqual(prints, [(0, 16), (1, 16)])

    def test_found_past_the_fingerprint_cap(self):
        # 70,000 nodes that never run: the fingerprints kept for them pass
        # the cap and are let go; what is saved after that is still checked
        trace, f = self.found("dropped", [], "save", "backward")
        db = gtutil.connect(trace)
        self.assertGreater(gtutil.one(db, "SELECT count(*) FROM saved_tensors"), 130000)

    def test_numpy_write_found_full(self):
        trace, f = self.found("numpy", ["--check-saved"], "save", "backward")
        self.assertNotIn("sampled check", f["suggestion"])
        self.assertEqual(mode_of(trace), "full")

    def test_numpy_normalisation_found_by_default(self):
        # a [64, 128] float observation: 32 KB, of which the check reads 4 KB
        trace, f = self.found("normalise", [], "obs_saved", "obs_backward")
        self.assertEqual(f["saved"]["slot"], "mat1")
        self.assertEqual(f["saved"]["shape"], [64, 128])
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.rows(db, "SELECT DISTINCT nbytes FROM saved_fingerprints"),
                         [(4096,)])

    def test_kernel_write_found_by_default(self):
        trace, f = self.found("kernel", [], "logits_saved", "kernel_backward")
        self.assertEqual(f["node"]["name"], "TanhBackward0")
        self.assertIn("sampled check", f["suggestion"])
        trace, f = self.found("kernel", ["--check-saved=full"], "logits_saved",
                              "kernel_backward")
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.rows(db, "SELECT DISTINCT nbytes FROM saved_fingerprints"),
                         [(256 * 100 * 4,)])

    def test_clean_run_no_finding(self):
        for options, mode in (([], "sampled"), (["--check-saved"], "full")):
            trace, cp = gtutil.record(SCRIPT, "clean", options=options)
            rc, doc = diagnose(trace)
            self.assertEqual((rc, doc["findings"]), (0, []))
            # fingerprints that agree leave no row
            db = gtutil.connect(trace)
            self.assertEqual(gtutil.one(db, "SELECT count(*) FROM saved_fingerprints"), 0)
            options = json.loads(gtutil.one(db, "SELECT options FROM run"))
            self.assertEqual(options["check_saved"], mode)
            # recorded by the adapter asked for: the engine takes fingerprints too
            self.assertEqual(options["adapter"], gtutil.adapter())

    def test_off(self):
        trace, cp = gtutil.record(SCRIPT, "numpy", options=["--check-saved=off"])
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.one(db, "SELECT count(*) FROM saved_fingerprints"), 0)
        self.assertEqual(mode_of(trace), "off")
        rc, doc = diagnose(trace)
        self.assertEqual((rc, doc["findings"]), (0, []))

    def test_bad_mode(self):
        cp = subprocess.run([gtutil.GRADTRACE, "record", "--check-saved=some", "--", SCRIPT,
                             "clean"], capture_output=True, text=True, timeout=60)
        self.assertEqual(cp.returncode, 2)
        self.assertEqual(cp.stderr.strip().splitlines(),
                         ["gradtrace: invalid --check-saved 'some': expected sampled, "
                          "full or off"])

    def test_rnn_cells_no_finding(self):
        # the gates a cell saves are slices of one buffer whose other slices
        # it writes in place: element-exact fingerprints see no change
        for options, mode in (([], "sampled"), (["--check-saved=full"], "full")):
            trace, cp = gtutil.record(RNN, "all", 2, options=options)
            self.assertEqual(cp.stdout, gtutil.run_plain(RNN, "all", 2).stdout)
            self.assertEqual(mode_of(trace), mode)
            rc, doc = diagnose(trace)
            self.assertEqual([f["kind"] for f in doc["findings"]], [], (options, doc))
            self.assertEqual(rc, 0)
            db = gtutil.connect(trace)
            # the gates were saved as strided slices (what the check reads)
            sig = gtutil.one(
                db, "SELECT count(*) FROM saved_tensors st"
                " JOIN nodes n ON n.id = st.node JOIN strings nn ON nn.id = n.name"
                " JOIN tensors t ON t.id = st.tensor WHERE nn.text = 'SigmoidBackward0'"
                " AND json_extract(t.strides, '$[0]') > json_extract(t.shape, '$[1]')")
            self.assertGreater(sig, 0)


if __name__ == "__main__":
    unittest.main()
