"""Run a script under recording, as `python3 script.py args...` would.

Used by `gradtrace record` (which validates its input first):

    python -m gradtrace.run --output run.db [--force] [--max-size BYTES]
        [--keep-last N] [--backward-calls A-B] [--command gradtrace] [--quiet]
        [--module] -- script.py|module args...

The script gets the same sys.argv, sys.path[0], __main__, working
directory, stdout/stderr, traceback and stack (its module frame is the
bottom one, as under python3; gradtrace's and runpy's frames are in
neither) and exit status as without recording; with --module, as
`python3 -m module args...` gives them (the module runs in a fresh
__main__ under runpy's two frames, _run_module_as_main and _run_code, and
nothing else). When the run failed and the trace explains why,
the diagnosis (`gradtrace diagnose`'s text) follows the traceback on stderr
unless --quiet. At exit one line on stderr says where the trace is and, if
the run failed, how to diagnose it; after SIGINT or SIGTERM, that the trace
holds the run up to the signal. While the script runs, a status line on a
terminal's stderr (gradtrace/_status.py), unless --quiet.
"""
import atexit
import builtins
import importlib.util
import os
import runpy
import signal
import sys
import types
import zipfile

import gradtrace
from gradtrace import _pin, _recording, _report

# python3 puts an empty __annotations__ in __main__ before running it (3.11
# to 3.13); this module, run as __main__ by `python -m gradtrace.run`, got it
_MAIN_ANNOTATIONS = "__annotations__" in globals()


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


def _runner_frames():
    """The frames of the runner's stack, caller's included (those under what
    call_bottom runs: a traceback passes through them on the way out)."""
    frames = set()
    f = sys._getframe(1)
    while f is not None:
        frames.add(f)
        f = f.f_back
    return frames


def _hook_stripping(hidden):
    """Strip at print time: frames re-enter the traceback as the exception
    leaves this module and runpy's -m machinery."""
    orig = sys.excepthook

    def hook(etype, value, tb):
        _recording.strip_frames(value, hidden)
        orig(etype, value, value.__traceback__)

    sys.excepthook = hook


def _as_python_main(globs):
    """Give globs what python3 gives __main__'s before running it: the
    builtins module as __builtins__ (exec with no frame would put the
    builtins' dict) and an empty __annotations__ where it does."""
    globs.setdefault("__builtins__", builtins)
    if _MAIN_ANNOTATIONS:
        globs.setdefault("__annotations__", {})


def _exec_at_bottom(argv0):
    """Make runpy's next exec run the script with no frame under it, as
    `python3 script.py` does (see _gradtrace.call_bottom): runpy's
    _run_code calls `exec`, looked up in runpy's globals before builtins.
    Once: a runpy call of the script's own runs as it would. sys.argv[0]
    becomes argv0, the script as given (run_path set it to the absolute path
    it was given, which __file__ is, as under python3)."""
    import _gradtrace

    def once(code, globs):
        runpy.__dict__.pop("exec", None)
        sys.argv[0] = argv0
        _as_python_main(globs)
        return _gradtrace.call_bottom(exec, code, globs)

    runpy.exec = once


def _run_module_as_python_m(name):
    """Run module `name` as `python3 -m name` does: runpy's
    _run_module_as_main (what the interpreter calls for -m) with no frame
    under it, in a fresh __main__ that stays (the runner's module, this one,
    is kept alive by its functions)."""
    import _gradtrace

    main = types.ModuleType("__main__")
    _as_python_main(vars(main))
    sys.modules["__main__"] = main
    _gradtrace.call_bottom(runpy._run_module_as_main, name, True)


def _stderr_is_terminal():
    try:
        return sys.stderr.isatty() and os.isatty(2)
    except Exception:
        return False


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
    stopped_by = [0]  # the signal that stopped the run, if one did
    recs = []

    def footer():
        if recs and not recs[0].finished:
            return  # stop() said why the trace is not finished
        if stopped_by[0]:
            sys.stderr.write(_report.stopped_line(out, stopped_by[0]) + "\n")
            sys.stderr.flush()
            return
        if failed[0] and not opts["quiet"]:
            _report.print_diagnosis(recs[0].path_now() if recs else out)
        sys.stderr.write(_report.written_line(out, failed[0], opts["command"]) + "\n")
        sys.stderr.flush()

    # registered before the script's own atexit handlers, so it runs last
    atexit.register(footer)
    _recording._signal_hooks.append(lambda path, signum: (stopped_by.__setitem__(0, signum),
                                                          footer()))
    _recording._exit_hooks.append(lambda path, status: (failed.__setitem__(0, status != 0),
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
        if spec is not None:
            # what python3 -m refuses (a package with no __main__) is
            # refused before recording starts
            try:
                runpy._get_module_details(script)
            except Exception as e:
                spec, why = None, str(e)
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
                              check_saved=opts["check_saved"], quiet=opts["quiet"])
    recs.append(rec)
    out = rec.path  # rank N of a launched job writes out.rankN (gradtrace/_dist.py)
    rec.announce = True
    rec.overwrite_option = "--force"
    try:
        rec.start()
    except OSError as e:
        atexit.unregister(footer)
        sys.stderr.write("%s\n" % e)
        return 2
    # a traceback's frames the script did not run: the runner's stack, and
    # gradtrace's (the dispatch adapter's mode) and, for a script, runpy's
    # (run_path's; under python3 -m runpy's two frames are the module's)
    runner = _runner_frames()
    runpys = () if opts["module"] else ("<frozen runpy>", runpy.__file__)

    def hidden(frame):
        name = frame.f_code.co_filename
        return frame in runner or name.startswith(_recording._PKG_DIR + os.sep) or name in runpys

    if not opts["module"]:
        _exec_at_bottom(script)
    if not opts["quiet"] and _stderr_is_terminal():
        from gradtrace import _status
        rec.status = _status.StatusLine(rec)
        rec.status.start()
    try:
        if opts["module"]:
            _run_module_as_python_m(script)
        else:
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = _recording._exit_code(e)
        failed[0] = code != 0
        rec.stop("ok", code)
        if code == 0 and not rec.finished:
            sys.exit(1)
        raise
    except KeyboardInterrupt as e:
        failed[0] = True
        stopped_by[0] = signal.SIGINT
        rec.stop("signal", -1, signal.SIGINT)
        _hook_stripping(hidden)
        raise
    except BaseException as e:
        failed[0] = True
        rec.stop("exception", 1, 0, e)
        _hook_stripping(hidden)
        raise
    finally:
        runpy.__dict__.pop("exec", None)  # left set when runpy failed before the exec
    rec.stop("ok", 0)
    return 0 if rec.finished else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
