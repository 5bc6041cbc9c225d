"""Notebook cells in traces: code run in a Jupyter cell comes from a file
IPython names after a temporary path (/tmp/ipykernel_123/456.py). When a
recording made in an IPython kernel closes, those names in the trace become
the cells' own, "In [3]", so `gradtrace diagnose` reads "In [3], line 4" as
Jupyter shows it. Nothing happens outside IPython.
"""
import sqlite3
import sys


def cell_names():
    """{code file name: "In [N]"} of the cells this IPython shell ran, or {}."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return {}
    try:
        shell = ipython.get_ipython()
        files = dict(shell.compile._filename_map)  # name -> execution count
    except Exception:
        return {}
    return {name: "In [%s]" % n for name, n in files.items() if n is not None}


def relabel_cells(path):
    """Rename the cells' file names in the closed trace at path. Never
    raises: a trace keeps its temporary names if this fails."""
    names = cell_names()
    if not names:
        return
    try:
        db = sqlite3.connect(path)
        try:
            with db:
                db.executemany("UPDATE strings SET text = ? WHERE text = ?",
                               [(label, name) for name, label in names.items()])
        finally:
            db.close()
    except Exception:
        pass
