"""gradtrace: record what PyTorch's autograd does into a SQLite trace.

    with gradtrace.record("run.db"):
        train()

or, as a start/stop object (like torch.profiler.profile):

    rec = gradtrace.record("run.db")
    rec.start()
    ...
    rec.stop()

Then `gradtrace diagnose run.db` names the in-place write that broke a
backward. From the shell: `gradtrace record -o run.db -- script.py args...`.

Options are record()'s keyword parameters (help(gradtrace.record)). A trace
already at the path is kept as path + ".old"; a file that is not a trace is
refused unless overwrite=True.

Reading a trace: gradtrace.open("run.db") gives a Trace (diagnose(),
sql(), history(), graph()).

Distributed training: the run row records rank, local rank, world size,
backend and the launcher's run id (gradtrace/_dist.py), and workers that
torch.multiprocessing.spawn / start_processes starts while recording record
into their own trace each, named as above with the process index as rank.

Processes and threads: a forked child (DataLoader workers) does not record
and never touches the parent's trace. Ops run on threads other than the one
that started recording are not seen (a dispatch mode is per thread), except
the autograd engine's work for a backward called on the recording thread.
While recording, SIGXFSZ is ignored so that hitting a file size limit stops
recording instead of killing the process, and SIGTERM (if it had its
default disposition) closes the trace before the process dies of it.
"""
from ._inspect import Result, Trace, TraceError, open
from ._recording import Recording, record

__all__ = ["record", "Recording", "open", "Trace", "TraceError", "Result"]


def __getattr__(name):
    """gradtrace.__version__, looked up on first use: the installed
    distribution's version (importlib.metadata) where pip installed this
    package, else the version the build compiled into the adapter (a source
    tree, where PYTHONPATH names build/python)."""
    if name != "__version__":
        raise AttributeError("module 'gradtrace' has no attribute %r" % name)
    try:
        from . import _build
    except ImportError:
        import _gradtrace
        return _gradtrace.version
    from importlib import metadata
    try:
        return metadata.version("gradtrace")
    except metadata.PackageNotFoundError:
        return _build.VERSION
