"""Run a script under recording, as `python3 script.py args...` would.

Used by `gradtrace record` (which validates its input first):

    python -m gradtrace.run --output run.db [--force] [--max-size BYTES]
        [--keep-last N] [--backward-calls A-B] [--command gradtrace] [--quiet]
        [--module] -- script.py|module args...

The script gets the same sys.argv, sys.path[0], __main__, working
directory, stdout/stderr, traceback (gradtrace's and runpy's frames are
removed from it), stack (a script's module frame is the bottom one, as under
python3; a module's sits on gradtrace's frames) and exit status as without recording; with --module, as
`python3 -m module args...`. When the run failed and the trace explains why,
the diagnosis (`gradtrace diagnose`'s text) follows the traceback on stderr
unless --quiet. At exit one line on stderr says where the trace is and, if
the run failed, how to diagnose it.
"""
import importlib.util
import atexit
import os
import runpy
import signal
import sys
import types
import zipfile

import gradtrace
from gradtrace import _pin, _report


def _parse(argv):
    opts = {"output": "gradtrace.db", "force": False, "max_size": 0, "window": None, "keep_last": 0,
            "command": "gradtrace", "quiet": False, "module": False, "check_saved": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return opts, argv[i + 1:]
        if a in ("--force", "--quiet", "--module"):
            opts[a[2:]] = True
            i += 1
            continue
        if a == "--check-saved":
            opts["check_saved"] = True
            i += 1
            continue
        if i + 1 >= len(argv):
            break
        v = argv[i + 1]
        if a == "--output":
            opts["output"] = v
        elif a == "--max-size":
            opts["max_size"] = int(v)
        elif a == "--keep-last":
            opts["keep_last"] = int(v)
        elif a == "--backward-calls":
            first, _, last = v.partition("-")
            opts["window"] = (int(first), int(last or first))
        elif a == "--command":
            opts["command"] = v
        else:
            break
        i += 2
    sys.stderr.write("usage: python -m gradtrace.run [options] -- script.py [args...]\n")
    sys.exit(2)


def _hidden(filename):
    return (filename.startswith(gradtrace._PKG_DIR + os.sep) or filename == "<frozen runpy>"
            or filename == runpy.__file__)


def _strip(exc):
    """Drop gradtrace's and runpy's frames from exc's traceback (and from
    the exceptions chained to it), wherever they are."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        keep = []
        tb = exc.__traceback__
        while tb is not None:
            if not _hidden(tb.tb_frame.f_code.co_filename):
                keep.append(tb)
            tb = tb.tb_next
        new = None
        for tb in reversed(keep):
            new = types.TracebackType(new, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
        exc.__traceback__ = new
        exc = exc.__cause__ or exc.__context__


def _hook_stripping():
    """Strip at print time: frames re-enter the traceback as the exception
    leaves this module and runpy's -m machinery."""
    orig = sys.excepthook

    def hook(etype, value, tb):
        _strip(value)
        orig(etype, value, value.__traceback__)

    sys.excepthook = hook


def _exec_at_bottom(argv0):
    """Make runpy's next exec run the script with no frame under it, as
    `python3 script.py` does (see _gradtrace.exec_bottom): runpy's
    _run_code calls `exec`, looked up in runpy's globals before builtins.
    Once: a runpy call of the script's own runs as it would. sys.argv[0]
    becomes argv0, the script as given (run_path set it to the absolute path
    it was given, which __file__ is, as under python3)."""
    import _gradtrace

    def once(code, globs):
        runpy.__dict__.pop("exec", None)
        sys.argv[0] = argv0
        return _gradtrace.exec_bottom(code, globs)

    runpy.exec = once


def main(argv):
    opts, rest = _parse(argv)
    if not rest:
        sys.stderr.write("gradtrace: no script given\n")
        return 2
    script = rest[0]
    out = opts["output"]
    try:
        import torch
    except Exception as e:
        sys.stderr.write("gradtrace: interpreter %s cannot import torch (%s): choose another "
                         "with --python PATH or GRADTRACE_PYTHON\n" % (sys.executable, e))
        return 2
    try:
        _pin.check(torch.__version__)
    except RuntimeError as e:
        sys.stderr.write("gradtrace: %s\n" % e)
        return 2
    try:
        import _gradtrace  # noqa: F401
    except Exception as e:
        sys.stderr.write("gradtrace: interpreter %s cannot import gradtrace's extension (%s): "
                         "build it for this interpreter (cmake -DGT_PYTHON=%s) or choose "
                         "another with --python PATH or GRADTRACE_PYTHON\n"
                         % (sys.executable, e, sys.executable))
        return 2
    failed = [False]
    recs = []

    def footer():
        if recs and not recs[0].finished:
            return  # stop() said why the trace is not finished
        if failed[0] and not opts["quiet"]:
            _report.print_diagnosis(recs[0].path_now() if recs else out)
        sys.stderr.write(_report.written_line(out, failed[0], opts["command"]) + "\n")
        sys.stderr.flush()

    # registered before the script's own atexit handlers, so it runs last
    atexit.register(footer)
    gradtrace._signal_hooks.append(lambda path, signum: (failed.__setitem__(0, True), footer()))
    gradtrace._exit_hooks.append(lambda path, status: (failed.__setitem__(0, status != 0),
                                                       footer()))

    # `gradtrace record` put gradtrace on PYTHONPATH: the script's children
    # get the user's value back ("=value", or "" when it was unset)
    orig_pp = os.environ.pop("GRADTRACE_ORIG_PYTHONPATH", None)
    if orig_pp is not None:
        if orig_pp.startswith("="):
            os.environ["PYTHONPATH"] = orig_pp[1:]
        else:
            os.environ.pop("PYTHONPATH", None)

    sys.argv = list(rest)
    if opts["module"]:
        # as `python -m`: the working directory first on sys.path, the
        # module found before anything runs
        sys.path[0] = os.getcwd()
        try:
            spec = importlib.util.find_spec(script)
        except Exception as e:
            spec, why = None, "%s: %s" % (type(e).__name__, e)
        else:
            why = "no module named %s" % script
        if spec is None:
            atexit.unregister(footer)
            sys.stderr.write("gradtrace: cannot run module %s: %s\n" % (script, why))
            return 2
    else:
        path = os.path.abspath(script)
        if os.path.isdir(path) or zipfile.is_zipfile(path):
            # as python3 dir/ or app.zip: the path itself first on sys.path
            # (runpy puts it there) and the runner's directory not at all
            del sys.path[0]
        else:
            # as python3: the directory of the file a symlinked script links to
            sys.path[0] = os.path.dirname(os.path.realpath(path))
    rec = gradtrace.Recording(out, overwrite=opts["force"], max_size=opts["max_size"],
                              backward_calls=opts["window"], argv=rest,
                              keep_last=opts["keep_last"],
                              check_saved=opts["check_saved"])
    recs.append(rec)
    out = rec.path  # rank N of a launched job writes out.rankN (gradtrace/_dist.py)
    rec.announce = True
    try:
        rec.start()
    except OSError as e:
        atexit.unregister(footer)
        sys.stderr.write("%s\n" % e)
        return 2
    if not opts["module"]:
        # (python3 -m runs the module under runpy's two frames; these runs
        # show gradtrace's too)
        _exec_at_bottom(script)
    try:
        if opts["module"]:
            runpy.run_module(script, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = gradtrace._exit_code(e)
        failed[0] = code != 0
        rec.stop("ok", code)
        if code == 0 and not rec.finished:
            sys.exit(1)
        raise
    except KeyboardInterrupt as e:
        failed[0] = True
        rec.stop("signal", -1, signal.SIGINT)
        _hook_stripping()
        raise
    except BaseException as e:
        failed[0] = True
        rec.stop("exception", 1, 0, e)
        _hook_stripping()
        raise
    finally:
        runpy.__dict__.pop("exec", None)  # left set when runpy failed before the exec
    rec.stop("ok", 0)
    return 0 if rec.finished else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
