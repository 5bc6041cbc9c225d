"""Correct training code gets no findings: trimmed copies of pytorch/examples
scripts (tests/e2e/examples/: synthetic data, a few iterations each) are
recorded and `gradtrace diagnose` must report nothing on any, in text and
JSON. Among them the recurrent layers whose CPU kernels apply sigmoid_/tanh_
to unsafe_chunk pieces of one gates buffer (nn.LSTMCell in
time_sequence_prediction, nn.GRU in word_language_model, rnn_cells.py): the
test also checks those pieces are in the trace, so it cannot pass by
recording less. Three more scripts hold common training idioms: gradient
checkpointing, double backward (a gradient penalty, MAML), sparse embeddings
with hooks and two optimizers. Two print what they train and must print it
as python3 does: a torch.jit.trace'd conv net (tracing under the dispatch
adapter's mode left the conv's input out of the graph, and its parameters
got no gradient) and a jagged nested tensor through nn.Linear (the dispatch
adapter hung, reading a grad_fn under autograd's lock).

Env: GRADTRACE (the built command), GT_SOURCE_DIR, GT_BUILD_DIR.
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")

# (script, arguments, 1 if its gates are pieces of one buffer written in place)
RUNS = [
    ("time_sequence_prediction.py", ["--steps", "1", "--max-iter", "3"], 1),
    ("word_language_model.py", ["--model", "GRU"], 1),
    ("word_language_model.py", ["--model", "LSTM", "--double"], 1),
    ("word_language_model.py", ["--model", "LSTM", "--tied"], 0),
    ("word_language_model.py", ["--model", "Transformer", "--batches", "2"], 0),
    ("rnn_cells.py", [], 1),
    ("mnist.py", [], 0),
    ("dcgan.py", [], 0),
    ("vae.py", [], 0),
    ("regression.py", [], 0),
    ("actor_critic.py", [], 0),
    ("checkpointing.py", [], 0),
    ("grad_penalty.py", [], 0),
    ("hooks_sparse.py", [], 0),
    ("jit_trace.py", [], 0),
    ("nested_jagged.py", [], 0),
]

# scripts whose recorded stdout must equal the plain run's
SAME_STDOUT = {"jit_trace.py", "nested_jagged.py"}


class Examples(unittest.TestCase):
    def check(self, script, args, pieces):
        path = os.path.join(EXAMPLES, script)
        trace, cp = gtutil.record(path, *args, cwd=gtutil.tmpdir())
        if script in SAME_STDOUT:
            plain = gtutil.run_plain(path, *args, cwd=gtutil.tmpdir())
            self.assertEqual(plain.returncode, 0, plain.stderr)
            self.assertEqual(cp.stdout, plain.stdout)
        db = gtutil.connect(trace)
        self.assertGreater(gtutil.rows(db, "SELECT count(*) FROM backward_calls")[0][0], 0)
        if pieces:
            # Writes through pieces of one buffer, each with its own counter,
            # while another piece of the same storage is saved.
            n = gtutil.rows(db, """
                SELECT count(*) FROM op_args a JOIN tensors w ON w.id = a.tensor
                WHERE a.role = 2 AND EXISTS (
                    SELECT 1 FROM saved_tensors st JOIN tensors s ON s.id = st.tensor
                    WHERE s.storage = w.storage AND s.version_counter != w.version_counter
                    AND st.seq < a.op)""")[0][0]
            self.assertGreater(n, 0, "no write to a piece of a saved tensor's buffer")
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", trace], capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout[:3000] + r.stderr)
        self.assertIn("no findings", r.stdout)
        r = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["findings"], [])
        self.assertIsNone(doc["error"])


def _make(script, args, pieces):
    def test(self):
        self.check(script, args, pieces)
    return test


for _script, _args, _pieces in RUNS:
    _name = "test_" + os.path.splitext(_script)[0] + "".join(
        "_" + a.strip("-").lower() for a in _args if not a.isdigit())
    setattr(Examples, _name, _make(_script, _args, _pieces))


if __name__ == "__main__":
    unittest.main()
