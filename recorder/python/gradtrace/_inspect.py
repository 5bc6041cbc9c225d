"""Reading traces from Python: gradtrace.open(path).

    t = gradtrace.open("run.db")
    t.diagnose()                  # dict, as `gradtrace diagnose --json`
    t.sql("SELECT ... WHERE op = ?", ("aten::mul_.Tensor",))   # list of tuples
    t.sql("SELECT * FROM ops", dataframe=True)                  # pandas.DataFrame
    t.history("class_weights")    # list of dicts, as `gradtrace history --json`
    t.memory()                    # dict, as `gradtrace memory --json`
    t.graph()                     # shown inline by a notebook; .save("g.png")

Everything here calls the C inspector through the _gtinspect extension
(inspector/python/_gtinspect.c): the same code, guards and output as the
`gradtrace` command, run in this process. Nothing is computed in Python.
"""
import json
import os

__all__ = ["open", "Trace", "Graph", "TraceError"]


class TraceError(Exception):
    """The inspector refused: the file is not a readable trace, or the
    arguments are wrong. The message is the command's one line."""


def _ext():
    try:
        import _gtinspect
    except ImportError as e:
        raise ImportError("gradtrace's inspector extension _gtinspect is not importable "
                          "(%s): install gradtrace with pip, or put build/python on "
                          "PYTHONPATH" % e) from None
    return _gtinspect


def _run(args, ok=(0,)):
    """Run `gradtrace ARGS` in process; stdout as text, or TraceError."""
    status, out, err = _ext().run([str(a) for a in args])
    if status not in ok:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        msg = lines[0] if lines else "gradtrace %s failed (status %d)" % (args[0], status)
        if msg.startswith("gradtrace: "):
            msg = msg[len("gradtrace: "):]
        raise TraceError(msg)
    return status, out.decode("utf-8", "replace")


def open(path):  # noqa: A001 - gradtrace.open, like sqlite3.connect / tarfile.open
    """A read-only handle on the trace at path. Raises TraceError at once if
    the file is not a trace this gradtrace reads (missing, not SQLite, not a
    trace, a newer schema)."""
    return Trace(path)


class Trace:
    """A trace file, read-only. Each call opens the file read-only through the
    inspector (gt_trace_open), so a trace may be read while another process
    still records into it."""

    def __init__(self, path):
        self.path = os.fspath(path)
        _run(["info", "--json", self.path])  # fails early on a bad file

    def __repr__(self):
        return "<gradtrace.Trace %r>" % self.path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def close(self):
        """Nothing to release (each call opens and closes the file)."""

    def info(self):
        """The summary `gradtrace info --json` prints, as a dict."""
        return json.loads(_run(["info", "--json", self.path])[1])

    def diagnose(self, backward=None):
        """The findings, as the dict `gradtrace diagnose --json` prints
        (keys trace, partial, error, findings, stopped, inconsistent).
        backward: only that backward call (1-based)."""
        args = ["diagnose", "--json", self.path]
        if backward is not None:
            args += ["--backward", int(backward)]
        return json.loads(_run(args, ok=(0, 1))[1])

    def diagnosis(self, backward=None, color=False):
        """The diagnosis as `gradtrace diagnose` prints it (text)."""
        args = ["diagnose", "--color", "always" if color else "never", self.path]
        if backward is not None:
            args += ["--backward", int(backward)]
        return _run(args, ok=(0, 1))[1]

    def sql(self, query, params=None, *, dataframe=False):
        """Run one read-only SQL statement (tables and views of
        schema/SCHEMA.md) with parameters bound from params (a sequence for
        ?, a mapping for :name). Returns a list of tuples, or a
        pandas.DataFrame with dataframe=True (ImportError without pandas).
        Writes, ATTACH and setting pragmas are refused (ValueError)."""
        columns, rows = _ext().query(self.path, query, params)
        if dataframe:
            import pandas
            return pandas.DataFrame.from_records(rows, columns=list(columns))
        return rows

    def columns(self, query, params=None):
        """The column names query would return."""
        return list(_ext().query(self.path, query, params)[0])

    def history(self, name, reads=False, all=False):
        """Every write, save and backward use of a variable's (or tensor
        id's) version counter: the list `gradtrace history --json` prints."""
        args = ["history", "--json", self.path, str(name)]
        if reads:
            args.append("--reads")
        if all:
            args.append("--all")
        return json.loads(_run(args)[1])

    def memory(self, call=None, all=False):
        """What backward holds in memory, as the dict `gradtrace memory
        --json` prints (keys trace, backward, calls; docs/memory.md): every
        backward call's totals, and the breakdowns of the one holding the
        most (call: that backward call, 1-based; all: every call's)."""
        args = ["memory", "--json", self.path]
        if call is not None:
            args += ["--call", int(call)]
        if all:
            args.append("--all")
        return json.loads(_run(args)[1])

    def graph(self, backward=None, hops=None, all=False, legend=True):
        """The autograd graph `gradtrace graph` draws (centred on the
        findings), as a Graph: a notebook shows it inline; .save(path)
        writes SVG, PNG or DOT."""
        return Graph(self.path, backward=backward, hops=hops, all=all, legend=legend)


class Graph:
    """One drawing of a trace's autograd graph; rendered on demand."""

    def __init__(self, path, backward=None, hops=None, all=False, legend=True):
        self.path = path
        self._opts = []
        if backward is not None:
            self._opts += ["--backward", int(backward)]
        if hops is not None:
            self._opts += ["--hops", int(hops)]
        if all:
            self._opts.append("--all")
        if not legend:
            self._opts.append("--no-legend")
        self._svg = None
        self.notes = ""

    def _render(self, fmt):
        status, out, err = _ext().run(["graph", self.path, "-o", "-", "--format", fmt]
                                      + [str(o) for o in self._opts])
        if status != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            raise TraceError(lines[0][len("gradtrace: "):] if lines and
                             lines[0].startswith("gradtrace: ") else
                             (lines[0] if lines else "graph failed"))
        self.notes = err.decode("utf-8", "replace")
        return out

    def svg(self):
        """The graph as SVG text."""
        if self._svg is None:
            self._svg = self._render("svg").decode("utf-8", "replace")
        return self._svg

    def dot(self):
        """The graph in Graphviz's DOT language."""
        return self._render("dot").decode("utf-8", "replace")

    def png(self):
        """The graph as PNG bytes."""
        return self._render("png")

    def _repr_svg_(self):
        return self.svg()

    def save(self, path, format=None):
        """Write the graph to path; the format is format ('svg', 'png',
        'dot') or path's extension. Returns path."""
        path = os.fspath(path)
        args = ["graph", self.path, "-o", path] + [str(o) for o in self._opts]
        if format is not None:
            args += ["--format", format]
        _run(args)
        return path
