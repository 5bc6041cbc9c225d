"""torch.compile while recording. The dispatch adapter: TorchDynamo does not
compile under the dispatch mode gradtrace records with, so a compiled
function runs eagerly. Recording must not change what runs without saying
so: one line on stderr says it (once, however many calls), the trace holds
the region's aten ops, diagnose says the findings are about the eager run
(compiled_ran_eagerly), and a run that compiles nothing gets neither.
The engine adapter records below TorchDynamo: the function compiles as it
does unrecorded, nothing is said, the trace holds the ops the compiled code
ran (not those Dynamo traced on fake tensors), at the line that called it,
and diagnose does not claim an eager run.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

SCRIPT = gtutil.scenario("cap_compile.py")
NOTICE = "gradtrace: torch.compile ran eagerly while recording"
ENGINE = gtutil.adapter() == "engine"


def line_of(text):
    with open(SCRIPT) as f:
        return [i + 1 for i, l in enumerate(f) if text in l][0]


def call_line():
    return line_of("fn(x).backward()")


def def_line():
    return line_of("def body(t):")


class Compile(unittest.TestCase):
    @unittest.skipUnless(ENGINE, "the engine adapter's case")
    def test_compiled_runs_compiled_on_the_engine(self):
        trace, cp = gtutil.record(SCRIPT, "compiled", timeout=600)
        plain = gtutil.run_plain(SCRIPT, "compiled", timeout=600)
        self.assertIn("captured True", plain.stdout)
        self.assertEqual(cp.stdout, plain.stdout)  # compiled too, same gradients
        self.assertNotIn(NOTICE, cp.stderr)
        self.assertNotIn("torch.compile", cp.stderr)
        # the compiled graph's ops, once per call, in the compiled function
        # (Dynamo's code for it has the line of its def), called from the
        # calling line; none of the ops Dynamo traced on fake tensors
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.rows(
            db, "SELECT fn.text, f.line, count(*), count(DISTINCT o.stack)"
                " FROM ops o JOIN strings s ON s.id = o.name"
                " JOIN stacks st ON st.id = o.stack JOIN frames f ON f.id = st.user_frame"
                " JOIN strings fn ON fn.id = f.function"
                " WHERE s.text = 'aten::sin' GROUP BY 1, 2"), [("body", def_line(), 2, 1)])
        self.assertIn(call_line(), [r[0] for r in gtutil.rows(
            db, "WITH RECURSIVE up(id) AS (SELECT o.stack FROM ops o JOIN strings s"
                " ON s.id = o.name WHERE s.text = 'aten::sin'"
                " UNION SELECT st.parent FROM stacks st JOIN up ON st.id = up.id"
                " WHERE st.parent IS NOT NULL)"
                " SELECT f.line FROM up JOIN stacks st ON st.id = up.id"
                " JOIN frames f ON f.id = st.frame")])
        self.assertEqual(gtutil.one(
            db, "SELECT count(*) FROM op_args a JOIN tensors t ON t.id = a.tensor"
                " WHERE t.storage IS NULL"), 0)
        doc, text = self.diagnose(trace)
        self.assertIs(doc["compiled_ran_eagerly"], False)
        self.assertNotIn("torch.compile", text)

    @unittest.skipIf(ENGINE, "the dispatch adapter's case")
    def test_compiled_says_so_once(self):
        trace, cp = gtutil.record(SCRIPT, "compiled", timeout=600)
        plain = gtutil.run_plain(SCRIPT, "compiled", timeout=600)
        self.assertIn("captured True", plain.stdout)  # it does compile unrecorded
        self.assertIn("captured False", cp.stdout)
        self.assertEqual(cp.stderr.count(NOTICE), 1, cp.stderr)
        self.assertNotIn(NOTICE, plain.stderr)
        # same gradients, and the region's ops are in the trace, twice
        self.assertEqual(cp.stdout.splitlines()[0], plain.stdout.splitlines()[0])
        db = gtutil.connect(trace)
        self.assertEqual(gtutil.one(db, "SELECT count(*) FROM ops o JOIN strings s"
                                        " ON s.id = o.name WHERE s.text = 'aten::sin'"), 2)
        # and the diagnosis says so too: what it reports is the eager run
        doc, text = self.diagnose(trace)
        self.assertIs(doc["compiled_ran_eagerly"], True)
        self.assertIn("note: torch.compile'd code ran eagerly while recording", text)
        # several traces (a distributed run's ranks): on the rank that ran it only
        other, _ = gtutil.record(SCRIPT, "plain")
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", trace, other],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        first = 0 if os.path.basename(trace) < os.path.basename(other) else 1
        self.assertEqual(r.stdout.count("torch.compile'd code ran eagerly"), 1, r.stdout)
        self.assertIn("note: rank %d: torch.compile'd code ran eagerly" % first, r.stdout)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace, other],
                           capture_output=True, text=True, timeout=120)
        doc = json.loads(r.stdout)
        self.assertEqual([t["diagnosis"]["compiled_ran_eagerly"] for t in doc["traces"]],
                         [first == 0, first == 1])
        self.assertEqual([(n["ranks"], n["kind"]) for n in doc["notes"]],
                         [([first], "compiled_ran_eagerly")])

    def diagnose(self, trace):
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace],
                           capture_output=True, text=True, timeout=120)
        t = subprocess.run([gtutil.GRADTRACE, "diagnose", trace], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual((r.returncode, t.returncode), (0, 0), r.stdout + r.stderr)
        return json.loads(r.stdout), t.stdout

    @unittest.skipUnless(ENGINE, "the engine adapter's case")
    def test_calls_the_compiler_makes_are_not_the_users(self):
        """aot_eager's AOTAutograd calls torch.autograd.grad while compiling:
        the trace marks that call (its api prefixed 'torch.compile: '),
        info lists only the user's two calls and says one more was the
        compiler's, its JSON marks it, and diagnose notes nothing about it."""
        trace, cp = gtutil.record(SCRIPT, "aot", timeout=600)
        plain = gtutil.run_plain(SCRIPT, "aot", timeout=600)
        self.assertEqual(cp.stdout, plain.stdout)
        db = gtutil.connect(trace)
        apis = [r[0] for r in db.execute(
            "SELECT s.text FROM backward_calls b JOIN strings s ON s.id = b.api"
            " ORDER BY b.id")]
        self.assertEqual([a for a in apis if not a.startswith("torch.compile: ")],
                         ["Tensor.backward", "Tensor.backward"], apis)
        self.assertIn("torch.compile: torch.autograd.grad", apis)
        info = subprocess.run([gtutil.GRADTRACE, "info", trace], capture_output=True,
                              text=True, timeout=120).stdout
        self.assertIn("backward calls: 2 (2 ok)", info)
        self.assertIn("torch.compile made while compiling the backward graph, not listed",
                      info)
        self.assertNotIn("  torch.autograd.grad", info)
        js = json.loads(subprocess.run([gtutil.GRADTRACE, "info", "--json", trace],
                                       capture_output=True, text=True, timeout=120).stdout)
        self.assertEqual(js["backward_counts"]["by_compiler"], apis.count(
            "torch.compile: torch.autograd.grad"))
        self.assertEqual([c["by_compiler"] for c in js["backward_calls"]],
                         [a.startswith("torch.compile: ") for a in apis])
        doc, text = self.diagnose(trace)
        self.assertEqual((doc["findings"], doc["outside_recording"]), ([], []))
        self.assertNotIn("note:", text)

    def test_nothing_compiled_no_line(self):
        trace, cp = gtutil.record(SCRIPT, "plain")
        self.assertNotIn(NOTICE, cp.stderr)
        doc, text = self.diagnose(trace)
        self.assertIs(doc["compiled_ran_eagerly"], False)
        self.assertNotIn("torch.compile", text)


if __name__ == "__main__":
    unittest.main()
