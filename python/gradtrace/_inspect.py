"""Reading traces from Python: gradtrace.open(path).

    t = gradtrace.open("run.db")
    t.diagnose()                  # dict, as `gradtrace diagnose --json`
    t.sql("SELECT ... WHERE op = ?", ("aten::mul_.Tensor",))   # rows, named
    t.sql("SELECT * FROM ops", dataframe=True)                  # pandas.DataFrame
    t.history("class_weights")    # list of dicts, as `gradtrace history --json`
    t.memory()                    # dict, as `gradtrace memory --json`
    t.graph()                     # shown inline by a notebook; .save("g.png")

Everything here calls the C inspector through the _gtinspect extension
(python/_gtinspect.c): the same code, guards and output as the
`gradtrace` command, run in this process. Nothing is computed in Python.
"""
import collections
import json
import os

__all__ = ["open", "Trace", "Graph", "TraceError", "Result"]


class TraceError(Exception):
    """The inspector refused: the file is not a readable trace, or the
    arguments are wrong. The message is the command's one line."""


class Result(list):
    """The rows Trace.sql() returns: a list of named tuples, one a row
    (row.name or row[0]; a column whose name is no Python identifier is
    _0, _1, ... by position), with .columns, the column names in order."""

    def __init__(self, columns, rows):
        self.columns = tuple(columns)
        row = collections.namedtuple("Row", self.columns, rename=True)
        super().__init__(row._make(r) for r in rows)

    def __repr__(self):
        return "Result(columns=%r, rows=%s)" % (self.columns, list.__repr__(self))


def _pandas():
    """The pandas module, or ModuleNotFoundError naming it and the way out."""
    try:
        import pandas
    except ImportError:
        raise ModuleNotFoundError("Trace.sql(dataframe=True) needs pandas, which is not "
                                  "installed: pip install pandas, or call sql() without "
                                  "dataframe=True for a list of rows", name="pandas") from None
    return pandas


def _ext():
    try:
        import _gtinspect
    except ImportError as e:
        raise ImportError("gradtrace's inspector extension _gtinspect is not importable "
                          "(%s): install gradtrace with pip, or put build/python on "
                          "PYTHONPATH" % e) from None
    return _gtinspect


def _call(fn, *args, **kw):
    """Call an _gtinspect function; its OSError or ValueError (the command's
    one line, without "gradtrace: ") as TraceError."""
    try:
        return fn(*args, **kw)
    except (OSError, ValueError) as e:
        raise TraceError(str(e)) from None


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
        _call(_ext().info, self.path)  # fails early on a bad file

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
        return json.loads(_call(_ext().info, self.path))

    def diagnose(self, backward=None):
        """The findings, as the dict `gradtrace diagnose --json` prints
        (keys trace, partial, error, findings, stopped, inconsistent).
        backward: only that backward call (1-based)."""
        return json.loads(self._diagnose(backward, text=False))

    def diagnosis(self, backward=None, color=False):
        """The diagnosis as `gradtrace diagnose` prints it (text)."""
        return self._diagnose(backward, text=True, color=bool(color))

    def _diagnose(self, backward, **kw):
        if backward is not None and int(backward) < 1:
            raise TraceError("diagnose: --backward wants a call number (1, 2, ...), "
                             "not '%s'" % backward)
        status, out = _call(_ext().diagnose, self.path,
                            0 if backward is None else int(backward), **kw)
        if status not in (0, 1):  # no findings in a damaged trace, as the command
            raise TraceError("gradtrace diagnose failed (status %d)" % status)
        return out

    def sql(self, query, params=None, *, dataframe=False):
        """Run one read-only SQL statement (tables and views of
        schema/SCHEMA.md) with parameters bound from params (a sequence for
        ?, a mapping for :name). Returns a Result: a list of named tuples
        with .columns; or a pandas.DataFrame with dataframe=True
        (ModuleNotFoundError naming pandas when it is not installed).
        Writes, ATTACH and setting pragmas are refused (ValueError)."""
        if dataframe:
            pandas = _pandas()
        columns, rows = _ext().query(self.path, query, params)
        if dataframe:
            return pandas.DataFrame.from_records(rows, columns=list(columns))
        return Result(columns, rows)

    def columns(self, query, params=None):
        """The column names query would return."""
        return list(_ext().query(self.path, query, params)[0])

    def history(self, name, reads=False, all=False):
        """Every write, save and backward use of a variable's (or tensor
        id's) version counter: the list `gradtrace history --json` prints."""
        return json.loads(_call(_ext().history, self.path, str(name), reads=bool(reads),
                                all=bool(all)))

    def memory(self, call=None, all=False):
        """What backward holds in memory, as the dict `gradtrace memory
        --json` prints (keys trace, backward, calls; docs/memory.md): every
        backward call's totals, and the breakdowns of the one holding the
        most (call: that backward call, 1-based; all: every call's)."""
        if call is not None and int(call) < 1:
            raise TraceError("memory: --call wants a positive number, not '%s'"
                             % call)
        return json.loads(_call(_ext().memory, self.path,
                                0 if call is None else int(call), all=bool(all)))

    def graph(self, backward=None, hops=None, all=False, legend=True):
        """The autograd graph `gradtrace graph` draws (centred on the
        findings), as a Graph: a notebook shows it inline; .save(path)
        writes SVG, PNG or DOT."""
        return Graph(self.path, backward=backward, hops=hops, all=all, legend=legend)


class Graph:
    """One drawing of a trace's autograd graph; rendered on demand."""

    def __init__(self, path, backward=None, hops=None, all=False, legend=True):
        self.path = path
        self._opts = {"backward": 0 if backward is None else int(backward),
                      "hops": -1 if hops is None else int(hops),
                      "all": bool(all), "legend": bool(legend)}
        self._bad = None  # checked when drawn, as the command checks them
        if backward is not None and self._opts["backward"] < 1:
            self._bad = "graph: --backward wants a positive number, not '%s'" % backward
        elif hops is not None and not 0 <= self._opts["hops"] <= 1000000:
            self._bad = "graph: --hops wants a number >= 0, not '%s'" % hops
        self._svg = None
        self.notes = ""

    def _draw(self, fmt, output=None):
        if self._bad:
            raise TraceError(self._bad)
        data, notes = _call(_ext().graph, self.path, fmt, output, **self._opts)
        self.notes = "".join("gradtrace: graph: %s\n" % line
                             for line in notes.splitlines())
        return data

    def _render(self, fmt):
        return self._draw(fmt)

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
        if format is None:
            ext = os.path.splitext(path)[1].lower().lstrip(".")
            format = {"gv": "dot"}.get(ext, ext)
            if format not in ("dot", "svg", "png"):
                raise TraceError("graph: cannot tell the format of %s from its extension: "
                                 "use --format dot, svg or png" % path)
        self._draw(format, path)
        return path
