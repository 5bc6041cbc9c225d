"""DistributedDataParallel's unused-parameter error ("Expected to have
finished reduction in the prior iteration ...") explained by diagnose: 2
ranks on CPU (gloo, torch.multiprocessing.spawn) recorded with `gradtrace
record`, one trace per rank; the finding names the parameters, their
module, why backward did not reach them and at which line, in JSON and
text; the fix it gives, applied to a copy of the script, makes it run
through.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest); GRADTRACE_ADAPTER picks the
adapter (ctest runs this file on both).
"""
import glob
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import gtutil
from test_dist import baseline, free_port

SCRIPT = gtutil.scenario("ddp_unused.py")
TIMEOUT = 240


def line_of(mark, path=SCRIPT):
    with open(path) as f:
        return [i + 1 for i, l in enumerate(f) if l.rstrip().endswith("# @" + mark)][0]


def gradtrace(*args):
    return subprocess.run([gtutil.GRADTRACE, *args], capture_output=True, text=True,
                          timeout=TIMEOUT)


# case -> (parameters DDP names, their indices, module, reason, the line marked)
CASES = {
    "unused": (["extra.weight", "extra.bias"], [2, 3], "extra", "unused", "made"),
    "branch": (["aux.weight", "aux.bias"], [2, 3], "aux", "not_on_path", "used"),
    "detach": (["enc.weight", "enc.bias"], [0, 1], "enc", "detach", "cut"),
    "nograd": (["enc.weight", "enc.bias"], [0, 1], "enc", "no_grad", "nograd"),
}


class DdpUnused(unittest.TestCase):
    traces = {}
    dirs = {}

    @classmethod
    def record(cls, case, env=None, key=None):
        """The rank traces of `case` (recorded once per key, default the
        case) that recorded DDP's error (a rank the launcher stopped first
        may have none): [(path, exit status, diagnose --json)]."""
        key = key or case
        if key not in cls.traces:
            d = tempfile.mkdtemp(dir=gtutil.tmpdir())
            cp = subprocess.run([gtutil.GRADTRACE, "record", "--python", gtutil.PYTHON,
                                 "-o", os.path.join(d, "run.db"), "--", SCRIPT, case,
                                 str(free_port())], capture_output=True, text=True,
                                timeout=TIMEOUT, env=env)
            assert cp.returncode != 0, cp.stderr
            assert "Expected to have finished reduction" in cp.stderr, cp.stderr
            got = []
            for t in sorted(glob.glob(os.path.join(d, "run.rank*.db"))):
                js = gradtrace("diagnose", "--json", t)
                doc = json.loads(js.stdout)
                if doc.get("error") and "finished reduction" in doc["error"]["message"]:
                    got.append((t, js.returncode, doc))
            assert got, "no rank recorded DDP's error"
            cls.traces[key] = got
            cls.dirs[key] = d
        return cls.traces[key]

    def check(self, case):
        names, indices, module, reason, mark = CASES[case]
        for trace, rc, doc in self.record(case):
            self.assertEqual(rc, 1, trace)
            fs = [f for f in doc["findings"] if f["kind"] == "ddp_unused_parameters"]
            self.assertEqual(len(fs), 1, doc["findings"])
            f = fs[0]
            rank = int(trace.rsplit("rank", 1)[1].split(".")[0])
            self.assertEqual(f["target"]["rank"], rank)
            self.assertEqual(f["matches_error"], True)
            self.assertEqual(f["location"]["line"], line_of("raise"))
            self.assertEqual(f["backward"]["location"]["line"], line_of("backward"))
            self.assertEqual(f["target"]["ddp"]["location"]["line"], line_of("ddp"))
            ps = f["target"]["parameters"]
            self.assertEqual([p["name"] for p in ps], names)
            self.assertEqual([p["index"] for p in ps], indices)
            self.assertEqual({p["module"] for p in ps}, {module})
            self.assertEqual({p["reason"] for p in ps}, {reason})
            for p in ps:
                self.assertIn("ddp_model.module." + p["name"], p["names"])
                # made where its module was: self.<module> = torch.nn.Linear(...)
                self.assertTrue(p["made_at"]["code"].startswith(
                    "self.%s = torch.nn.Linear(" % module), p["made_at"])
                if reason == "unused":
                    self.assertIsNone(p["location"])
                    self.assertEqual(p["made_at"]["line"], line_of("made"))
                else:
                    self.assertEqual(p["location"]["line"], line_of(mark))
            # the text says the same
            text = gradtrace("diagnose", trace).stdout
            self.assertIn("DistributedDataParallel got no gradient for %s in backward #1"
                          % ", ".join(names), text)
            self.assertIn("parameters  %s (module %s): " % (", ".join(names), module), text)
            self.assertIn({"unused": "used by no op in the forward",
                           "not_on_path": "used, but their output does not reach the loss",
                           "detach": "cut from the loss by detach()",
                           "no_grad": "cut from the loss where grad mode was off"}[reason],
                          text)
            label = {"unused": "made at", "not_on_path": "used at"}.get(reason, "cut at")
            # the forward's lines ran in the wrapped model: DDP's `module`
            self.assertRegex(text, r"\n    %-11s \S*ddp_unused\.py:%d  in %s\n"
                             % (label, line_of(mark),
                                r"\w+\.__init__" if reason == "unused"
                                else r"module \(\w+\.forward\)"))
            self.assertIn("find_unused_parameters=True", f["suggestion"])
        # the ranks read together: one finding, with the ranks that raised it
        both = gradtrace("diagnose", self.dirs[case])
        ranks = sorted(int(t.rsplit("rank", 1)[1].split(".")[0]) for t, _, _ in
                       self.record(case))
        self.assertIn("%s %s: DistributedDataParallel got no gradient for %s in backward #1"
                      % ("ranks" if len(ranks) > 1 else "rank",
                         "-".join(map(str, ranks)), ", ".join(names)), both.stdout)
        return f

    def run_fixed(self, old, new):
        """A copy of the script with line `old` replaced by `new`; its
        path."""
        d = tempfile.mkdtemp(dir=gtutil.tmpdir())
        copy = os.path.join(d, "fixed.py")
        shutil.copy(SCRIPT, copy)
        with open(copy) as f:
            src = f.read()
        self.assertIn(old, src)
        with open(copy, "w") as f:
            f.write(src.replace(old, new))
        return copy

    def check_fix(self, case, f):
        ddp = f["target"]["ddp"]
        self.assertEqual(ddp["fixed_code"], "ddp_model = torch.nn.parallel."
                         "DistributedDataParallel(model, find_unused_parameters=True)")
        copy = self.run_fixed(ddp["location"]["code"].split("  #")[0], ddp["fixed_code"])
        cp = baseline([gtutil.PYTHON, copy, case, free_port()])  # exits 0
        # the ranks print at once: their lines may interleave
        self.assertIn("rank 0 done", cp.stdout)
        self.assertIn("rank 1 done", cp.stdout)

    def test_layer_never_called(self):
        self.check_fix("unused", self.check("unused"))

    def test_branch_not_in_loss(self):
        f = self.check("branch")
        self.assertIn("add that output to the loss", f["suggestion"])
        self.check_fix("branch", f)

    def test_detach(self):
        f = self.check("detach")
        p = f["target"]["parameters"][0]
        self.assertEqual(p["op"], "aten::detach")
        self.assertEqual(p["fixed_code"], "h = self.enc(x)")
        self.assertIn("`h = self.enc(x)` if they should train", f["suggestion"])
        # the code change alone (no find_unused_parameters) runs through
        copy = self.run_fixed("h = self.enc(x).detach()", "h = self.enc(x)")
        cp = baseline([gtutil.PYTHON, copy, "detach", free_port()])  # exits 0
        self.assertIn("rank 0 done", cp.stdout)
        self.check_fix("detach", f)

    def test_debug_names(self):
        # TORCH_DISTRIBUTED_DEBUG=INFO: the message names them as well
        env = dict(os.environ, TORCH_DISTRIBUTED_DEBUG="INFO")
        for trace, rc, doc in self.record("branch", env, "branch-info"):
            msg = doc["error"]["message"]
            self.assertIn("Parameters which did not receive grad for rank", msg)
            f = [f for f in doc["findings"] if f["kind"] == "ddp_unused_parameters"][0]
            self.assertEqual(f["matches_error"], True)
            self.assertEqual([p["name"] for p in f["target"]["parameters"]],
                             ["aux.weight", "aux.bias"])

    def test_no_grad(self):
        f = self.check("nograd")
        self.assertIn("ran with grad mode off", f["suggestion"])


if __name__ == "__main__":
    unittest.main()
