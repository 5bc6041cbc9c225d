"""A real notebook, executed by nbclient in an ipykernel kernel: `with
gradtrace.record(...)` in a cell records the cell's code under the cell's own
name ("In [3], line 4", not /tmp/ipykernel_*/*.py); when the cell raises, the
diagnosis is printed under it and the graph shown inline; gradtrace.open's
graph displays inline (image/svg+xml).

nbclient, nbformat, ipykernel and pandas come from PyPI: scripts/test installs them
into build/notebook-venv (a venv over the test interpreter's site-packages,
so it has torch). Run under another interpreter, this file re-runs itself
with that venv's; without it the tests are skipped, saying how to install.
"""
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gtutil  # noqa: E402


def _nb_python():
    build = os.environ.get("GT_BUILD_DIR", os.path.join(gtutil.SOURCE, "build"))
    py = os.path.join(build, "notebook-venv", "bin", "python")
    return py if os.access(py, os.X_OK) else None


try:
    import nbclient  # noqa: F401
    import nbformat
    HAVE_NB = True
except ImportError:
    HAVE_NB = False
    if __name__ == "__main__" and _nb_python() and not os.environ.get("GT_NB_REEXEC"):
        os.environ["GT_NB_REEXEC"] = "1"
        os.execv(_nb_python(), [_nb_python(), os.path.abspath(__file__)] + sys.argv[1:])

CELLS = [
    "import torch\nimport gradtrace",
    "torch.manual_seed(0)\nx = torch.randn(4, requires_grad=True)",
    # cell 3: the mistake, recorded; line 4 is the in-place write
    "with gradtrace.record(TRACE, overwrite=True):\n"
    "    h = torch.sigmoid(x)\n"
    "    y = h * 2\n"
    "    h.relu_()\n"
    "    y.sum().backward()",
    "t = gradtrace.open(TRACE)\nt.graph()",
    "print(t.diagnose()['findings'][0]['kind'])\nt.sql('SELECT count(*) FROM backward_calls')",
    "t.sql('SELECT seq, op FROM op_log WHERE seq < ?', (40,), dataframe=True).shape[1]",
]


@unittest.skipUnless(HAVE_NB, "nbclient/ipykernel missing: scripts/test installs them into "
                     "build/notebook-venv")
class Notebook(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from nbclient import NotebookClient
        cls.trace = os.path.join(gtutil.tmpdir(), "nb.db")
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("TRACE = %r" % cls.trace)]
        for i, src in enumerate(CELLS):
            cell = nbformat.v4.new_code_cell(src)
            if i == 2:
                cell.metadata["tags"] = ["raises-exception"]
            nb.cells.append(cell)
        env_cwd = gtutil.tmpdir()
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": env_cwd}}).execute()
        cls.nb = nb

    def outputs(self, n):
        """Outputs of the cell with execution count n."""
        cell = [c for c in self.nb.cells if c.get("execution_count") == n]
        self.assertEqual(len(cell), 1)
        return cell[0].outputs

    def test_failing_cell_shows_diagnosis_and_graph(self):
        outs = self.outputs(4)  # TRACE=..., imports, x, then the recorded cell
        err = [o for o in outs if o.output_type == "error"]
        self.assertEqual([e.ename for e in err], ["RuntimeError"])
        text = "".join(o.text for o in outs if o.output_type == "stream"
                       and o.name == "stderr")
        self.assertIn("1 finding", text)
        self.assertIn("h modified in place after SigmoidBackward0", text)
        self.assertIn("modified at In [4], line 4", text)
        self.assertIn("saved at    In [4], line 2", text)
        self.assertNotIn("ipykernel", text)
        svgs = [o for o in outs if o.output_type == "display_data"
                and "image/svg+xml" in o.data]
        self.assertEqual(len(svgs), 1)
        self.assertIn("In [4], line 4", svgs[0].data["image/svg+xml"])

    def test_graph_inline(self):
        outs = self.outputs(5)
        res = [o for o in outs if o.output_type == "execute_result"]
        self.assertEqual(len(res), 1, outs)
        svg = res[0].data["image/svg+xml"]
        self.assertTrue(svg.lstrip().startswith("<?xml") or "<svg" in svg[:400])
        self.assertIn("SigmoidBackward0", svg)

    def test_reading_from_the_kernel(self):
        outs = self.outputs(6)
        self.assertEqual(outs[0].text, "inplace_invalidated_saved\n")
        # Trace.sql()'s Result: rows with their column names
        self.assertEqual(outs[1].data["text/plain"],
                         "Result(columns=('count(*)',), rows=[Row(_0=1)])")

    def test_dataframe(self):
        outs = self.outputs(7)
        self.assertEqual(outs[0].data["text/plain"], "2")

    def test_trace_names_the_cells(self):
        db = gtutil.connect(self.trace)
        files = {r[0] for r in db.execute(
            "SELECT DISTINCT s.text FROM frames f JOIN strings s ON s.id = f.file")}
        self.assertIn("In [4]", files)
        # no cell left under its temporary file name (/tmp/ipykernel_123/456.py)
        self.assertFalse([f for f in files if re.search(r"ipykernel_\d+/", f)], files)


if __name__ == "__main__":
    unittest.main(verbosity=2)
