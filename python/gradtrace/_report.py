"""The diagnosis printed when a recorded run fails (`gradtrace record`,
`with gradtrace.record(...)`): `gradtrace diagnose TRACE`'s text, on stderr,
when the run failed and the trace explains it (diagnose found something).
"""
import os
import re
import shlex
import signal
import sys


def written_line(path, failed, command="gradtrace"):
    """The line `gradtrace record` ends with: where the trace is and, if
    the run failed, the command that diagnoses it, the path quoted for a
    shell (a path with a space or a non-ASCII letter pasted as printed ran
    `gradtrace diagnose` on two files)."""
    line = "gradtrace: trace written to %s" % path
    if failed:
        line += "; the run failed, diagnose it with: %s diagnose %s" % (command, shlex.quote(path))
    return line


def stopped_line(path, signum):
    """The line `gradtrace record` ends with when a signal (SIGINT, SIGTERM)
    stopped the run: the run did not fail, the trace is complete up to it."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = "signal %d" % signum
    return "gradtrace: stopped by %s; the trace holds everything up to it: %s" % (name, path)


# diagnose's header line naming the error the run raised, then its message
_RAISED = re.compile(r"^(?P<head>.*: the run raised (?:\x1b\[[0-9;]*m)?[\w.]+"
                     r"(?:\x1b\[[0-9;]*m)?): .*$", re.M)


def without_message(text):
    """diagnose's text with the header's copy of the error message left out
    (where the diagnosis follows the error's traceback, which printed it):
    "run.db: the run raised RuntimeError (its message is in the traceback)".
    """
    return _RAISED.sub(r"\g<head> (its message is in the traceback)", text, count=1)


def _color(stream):
    try:
        tty = stream.isatty()
    except Exception:
        tty = False
    return "always" if tty and not os.environ.get("NO_COLOR") else "never"


def print_diagnosis(path, stream=None):
    """Write `gradtrace diagnose path` to stream (default sys.stderr) if it
    has findings. Returns True if something was printed. Never raises: the
    user's own error is what matters, this only adds to it."""
    stream = sys.stderr if stream is None else stream
    try:
        import _gtinspect
        status, out = _gtinspect.diagnose(os.fspath(path), text=True,
                                          color=_color(stream) == "always")
    except Exception:
        return False
    if status != 1 or not out:
        return False
    try:
        stream.flush()
        stream.write("\n" + without_message(out))
        stream.flush()
    except Exception:
        return False
    return True


def _notebook_shell():
    """The IPython kernel's shell when running in a notebook, else None."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        shell = ipython.get_ipython()
    except Exception:
        return None
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        return None
    return shell


def after_failure(path):
    """What `with gradtrace.record(path)` does when its block raised: print
    the diagnosis on stderr if the trace explains the failure and, in a
    notebook, show the graph of it inline under the diagnosis. Never raises."""
    if not print_diagnosis(path):
        return
    if _notebook_shell() is None:
        return
    try:
        from IPython.display import display
        from ._inspect import Trace
        display(Trace(path).graph())
    except Exception:
        pass
