"""Recording: gradtrace.record() and the Recording it returns (re-exported
by the package, whose docstring is the user's guide to them)."""
import itertools
import json
import linecache
import os
import signal
import socket
import sys
import threading
import types
from typing import Optional, Sequence, Tuple

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_current = None
_serial = itertools.count(1)


def _fork_child():
    global _current
    if _current is not None:
        _current._forked()
        _current = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fork_child)


class Recording:
    """One trace being recorded; gradtrace.record() describes the options."""

    def __init__(self, path, *, overwrite=False, max_size=None, backward_calls=None,
                 argv=None, per_rank=None, check_saved=False, keep_last=None, quiet=False):
        from . import _dist
        self.template = os.fspath(path)
        self.path = _dist.trace_path(self.template, per_rank)
        self.file = None  # self.path made absolute at start()
        self._start_cwd = None
        self.announce = False  # spawned workers print where their trace went
        self.spawn_index = None  # set in a torch.multiprocessing worker
        self.overwrite = bool(overwrite)
        # the option that replaces a file that is not a trace, as the caller
        # spells it (`gradtrace record` says --force)
        self.overwrite_option = "overwrite=True"
        self.kept = None  # where start() kept the trace that was at path
        self.status = None  # the terminal's status line (_status.StatusLine), if shown
        self.max_size = int(max_size) if max_size else 0
        if backward_calls is not None:
            first, last = backward_calls
            if not (1 <= first <= last):
                raise ValueError("backward_calls must be (first, last) with 1 <= first <= last")
            backward_calls = (int(first), int(last))
        self.backward_calls = backward_calls
        self.keep_last = int(keep_last) if keep_last else 0
        if self.keep_last < 0 or self.keep_last > 1000000:
            raise ValueError("keep_last must be a number of backward calls from 1 to 1000000")
        if self.keep_last and backward_calls is not None:
            raise ValueError("keep_last and backward_calls cannot be combined")
        self.argv = list(sys.argv if argv is None else argv)
        self.check_saved = bool(check_saved)
        self.quiet = bool(quiet)  # no line saying it records through the dispatch adapter
        self._rec = None
        self._mode = None
        self._patch = None
        self._done_calls = 0
        self._old_xfsz = None
        self._old_term = None
        self._thread = None
        self._backward_exc = None
        self._orig_bootstrap = None
        self._dist_patch = None
        self._os_exit = None
        self.adapter = None  # "engine" or "dispatch" once started
        self.error = None  # the recorder's error message after stop(), if any
        self.finished = True  # False if stop() could not finish the trace file

    # -- lifecycle -------------------------------------------------------

    def start(self):
        """Create the trace and start recording; a trace at the path is kept
        as path + ".old" first (record() says how). Raises FileExistsError
        if a file that is not a trace is there and overwrite is False (the
        message names overwrite_option), OSError if the trace cannot be
        created, RuntimeError if another recording is on."""
        global _current
        if _current is not None:
            raise RuntimeError("gradtrace: a recording is already running")
        import torch
        from . import _pin
        _pin.check(torch.__version__)  # the torch this installation was built for
        import _gradtrace
        from . import _mode

        # the script may chdir (hydra does): the recorder's files (the trace,
        # its row log) are reopened by absolute path
        self._start_cwd = os.getcwd()
        self.file = os.path.abspath(self.path)
        if not self.overwrite:
            from . import _previous
            self.kept = _previous.keep(self.path, self.overwrite_option)
            if self.kept is not None:
                sys.stderr.write("gradtrace: kept the previous trace as %s\n" % self.kept)
        torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        hidden = (_PKG_DIR + os.sep, "<frozen runpy>",
                  os.path.join(os.path.dirname(os.__file__), "runpy.py"))
        # adapter selection (GRADTRACE_ADAPTER=dispatch|engine): see _engine.py
        from . import _engine
        engine_mod, fallback = _engine.choose(torch.__version__)
        self.adapter = "engine" if engine_mod is not None else "dispatch"
        if engine_mod is not None:
            self._rec = _engine.EngineRecorder(
                # a compiled graph's generated forward (torch.fx) is torch's: its
                # ops are the line's that called the compiled function
                engine_mod, self.file, hidden=hidden,
                engine=(torch_dir,) + _wrapper_files() + ("<eval_with_key>",),
                getline=linecache.getline, overwrite=self.overwrite,
                max_bytes=self.max_size, keep_last=self.keep_last,
                check_saved=self.check_saved)
        else:
            self._rec = _gradtrace.Recorder(
                self.file,
                tensor_type=torch.Tensor,
                op_meta=_mode.op_meta,
                saved_names=_mode.saved_names,
                grad_enabled=torch.is_grad_enabled,
                getline=linecache.getline,
                hidden=hidden,
                engine=(torch_dir,) + _wrapper_files(),
                # nodes keep our ids in grad_fn.metadata: a key per recording
                key="gradtrace:%d:%d" % (os.getpid(), next(_serial)),
                via_autograd=_mode.via_autograd_probe(),
                overwrite=self.overwrite,
                max_bytes=self.max_size,
                has_sequence_nr=hasattr(torch._C._functions.AccumulateGrad, "_sequence_nr"),
                has_untyped_storage=hasattr(torch.Tensor, "untyped_storage"),
                increment_version=getattr(torch._C, "_increment_version", None),
                check_saved=self.check_saved,
                keep_last=self.keep_last,
            )
        if fallback and not self.quiet:
            _engine.announce(fallback)  # once the trace is created
        options = {"adapter": self.adapter,
                   "max_size": self.max_size or None, "check_saved": self.check_saved,
                   "keep_last": self.keep_last or None,
                   "backward_calls": list(self.backward_calls) if self.backward_calls else None}
        self._rec.set_run(
            engine_version=torch.__version__,
            python_version=sys.version.split()[0],
            argv_json=json.dumps(self.argv),
            cwd=os.getcwd(),
            host=socket.gethostname(),
            options_json=json.dumps(options),
            pid=os.getpid(),
        )
        self._set_dist()
        self._done_calls = 0
        self._update_window()
        _current = self
        self._thread = threading.current_thread()
        if threading.current_thread() is threading.main_thread():
            if hasattr(signal, "SIGXFSZ"):
                self._old_xfsz = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                self._old_term = signal.signal(signal.SIGTERM, self._on_signal)
        self._patch = _mode.BackwardPatch(self)
        self._patch.install()
        self._patch_os_exit()
        from . import _dist
        self._dist_patch = _dist.Patches(self)
        self._dist_patch.install()
        if self.adapter == "engine":
            self._rec.start()  # one callback for every thread
        else:
            self._patch_threads()
            self._mode = _mode.DispatchMode(self._rec.dispatch)
            self._mode.__enter__()
        return self

    def _patch_threads(self):
        """Threads started while recording run under their own dispatch mode
        (modes are per thread), so their ops are recorded with their thread."""
        from . import _mode
        orig = threading.Thread._bootstrap_inner
        rec = self

        def _bootstrap_inner(thread):
            if rec._rec is None:
                return orig(thread)
            with _mode.DispatchMode(rec._rec.dispatch):
                return orig(thread)

        threading.Thread._bootstrap_inner = _bootstrap_inner
        self._orig_bootstrap = orig

    def _patch_os_exit(self):
        """os._exit(n) in the recording's process closes the trace first:
        it skips atexit and finally blocks, and the trace held none of the
        run's rows (a training script ending with os._exit(0) to skip
        worker teardown). Forked children (multiprocessing, DataLoader
        workers) exit through the original."""
        orig = os._exit
        pid = os.getpid()
        rec = self

        def _exit(status):
            if os.getpid() == pid and rec._rec is not None and isinstance(status, int):
                rec.stop("ok", status)
                for hook in _exit_hooks:
                    hook(rec.path, status)
            orig(status)

        os._exit = _exit
        self._os_exit = (orig, _exit)

    def _unpatch_os_exit(self):
        if self._os_exit is not None:
            orig, ours = self._os_exit
            if os._exit is ours:
                os._exit = orig
            self._os_exit = None

    def stop(self, status=None, exit_code=0, sig=0, exc=None):
        """Stop recording and close the trace. status: 'ok', 'exception' or
        'signal' (default: 'exception' if exc is given, else 'ok'); exc: the
        exception that ended the run, recorded as an error. Returns the
        recorder's error message (also kept in .error), or None."""
        global _current
        if self._rec is None:
            return self.error
        if self.status is not None:
            self.status.stop()
            self.status = None
        import _gradtrace
        if self._mode is not None:
            mode, self._mode = self._mode, None
            try:
                mode.__exit__(None, None, None)
            except Exception:
                pass  # the mode stack was unwound by someone else
        if self._patch is not None:
            self._patch.remove()
            self._patch = None
        self._unpatch_os_exit()
        if self._orig_bootstrap is not None:
            threading.Thread._bootstrap_inner = self._orig_bootstrap
            self._orig_bootstrap = None
        if self._dist_patch is not None:
            self._dist_patch.remove()
            self._dist_patch = None
            self._set_dist(group_only=True)  # if the process group is still up
        if exc is not None and exc is not self._backward_exc:
            self._rec.error(exc)  # a backward's exception is recorded already
        if status is None:
            status = "exception" if exc is not None else "ok"
        code = {"ok": _gradtrace.RUN_OK, "exception": _gradtrace.RUN_EXCEPTION,
                "signal": _gradtrace.RUN_SIGNAL}[status]
        from . import _status
        try:
            with _status.CloseNote(getattr(self._rec, "seq", 0), self.path_now()):
                self.error = self._rec.close(code, exit_code, sig)
        except OSError as e:
            # the trace could not be made one finished file: say so, once,
            # without changing whether the user's run raises
            self.error = str(e)
            self.finished = False
            sys.stderr.write("%s\n" % e)
        self._rec = None
        from . import _notebook
        _notebook.relabel_cells(self.file)  # "In [3]", not /tmp/ipykernel_*/*.py
        if threading.current_thread() is threading.main_thread():
            if self._old_xfsz is not None:
                signal.signal(signal.SIGXFSZ, self._old_xfsz)
            if self._old_term is not None and signal.getsignal(signal.SIGTERM) == self._on_signal:
                signal.signal(signal.SIGTERM, self._old_term)
        self._old_xfsz = self._old_term = None
        if _current is self:
            _current = None
        return self.error

    def __enter__(self):
        return self.start()

    def __exit__(self, etype, exc, tb):
        if exc is not None:
            # the traceback shows the user's frames and torch's, not the
            # backward wrappers' (as under `gradtrace record`)
            strip_frames(exc, own_frame)
        if exc is None:
            self.stop("ok")
        elif isinstance(exc, SystemExit):
            self.stop("ok", _exit_code(exc))
        elif isinstance(exc, KeyboardInterrupt):
            self.stop("signal", -1, signal.SIGINT)
        else:
            self.stop("exception", 1, 0, exc)
            self._report_failure()
        return False

    def _report_failure(self):
        """After a failed `with` block: print the diagnosis when the trace
        explains the failure (in a notebook, inline; see _report)."""
        from . import _report
        _report.after_failure(self.path_now())

    def path_now(self):
        """The trace's path for a command run now: self.path as given while
        the working directory is the one recording started in (so messages
        show it as the user wrote it), else the absolute path."""
        try:
            if self.file is None or os.getcwd() == self._start_cwd:
                return self.path
        except OSError:
            pass  # the working directory was removed
        return self.file

    # -- used by the backward wrappers ------------------------------------

    def is_on(self):
        return self._rec is not None

    def _set_dist(self, group_only=False):
        """Write the process's rank, world size, backend and launcher run id
        to the run row (gradtrace/_dist.py says where they come from);
        group_only: only if the default process group is initialised."""
        from . import _dist
        if group_only and _dist._process_group() is None:
            return
        if self._rec is not None:
            self._rec.set_run(**_dist.run_fields(self.spawn_index))

    def _update_window(self):
        if self.backward_calls is None:
            return
        first, last = self.backward_calls
        self._rec.set_active(first - 1 <= self._done_calls < last)

    def backward_begin(self, api, roots, retain, create, inputs):
        if self._rec is None:
            return 0
        return self._rec.backward_begin(api, roots, retain, create, inputs)

    def backward_end(self, bid, exc):
        if self._rec is None:
            return
        self._rec.backward_end(bid, exc)
        if exc is not None and bid:
            self._backward_exc = exc
        self._done_calls += 1
        self._update_window()

    @property
    def recording(self):
        """True while ops are being recorded (inside the window, no failure)."""
        return self._rec is not None and self._rec.recording

    # -- signals and fork ---------------------------------------------------

    def _on_signal(self, signum, frame):
        self.stop("signal", -1, signum)
        _on_signal_exit(self.path, signum)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _forked(self):
        if self._rec is not None:
            self._rec.forked()
        self._rec = None
        self._mode = None  # left on the child's mode stack, now pass-through
        if self._patch is not None:
            self._patch.remove()
            self._patch = None
        self._unpatch_os_exit()
        if self._dist_patch is not None:
            self._dist_patch.remove()
            self._dist_patch = None


def strip_frames(exc, hidden):
    """Drop the frames hidden(frame) says are the runner's from exc's
    traceback (and from the exceptions chained to it), wherever they are."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        keep = []
        tb = exc.__traceback__
        while tb is not None:
            if not hidden(tb.tb_frame):
                keep.append(tb)
            tb = tb.tb_next
        new = None
        for tb in reversed(keep):
            new = types.TracebackType(new, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
        exc.__traceback__ = new
        exc = exc.__cause__ or exc.__context__


def own_frame(frame):
    """True for a frame of gradtrace's own code (this package's files)."""
    return frame.f_code.co_filename.startswith(_PKG_DIR + os.sep)


def _wrapper_files():
    """Files of the decorator modules torch wraps its own functions with
    (typing_extensions.deprecated, around torch.distributed's): their frames
    between two torch frames are torch's, not the user's."""
    mod = sys.modules.get("typing_extensions")
    f = getattr(mod, "__file__", None)
    return (os.path.abspath(f),) if f else ()


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


_signal_hooks = []
# called with (trace path, status) when os._exit(status) ends a recorded run
_exit_hooks = []


def _on_signal_exit(path, signum):
    for hook in _signal_hooks:
        hook(path, signum)


def record(path: "str | os.PathLike[str]" = "gradtrace.db", *, overwrite: bool = False,
           max_size: Optional[int] = None,
           backward_calls: Optional[Tuple[int, int]] = None,
           keep_last: Optional[int] = None, check_saved: bool = False,
           per_rank: Optional[bool] = None,
           argv: Optional[Sequence[str]] = None, quiet: bool = False) -> "Recording":
    """A Recording of everything autograd does, into the trace at path.
    Use it as a context manager (``with gradtrace.record("run.db"):``), or
    call start() and stop().

    path: the trace file. A gradtrace trace already there is kept as
        path + ".old" (replacing an older one) and one line on stderr says
        so; an empty file is replaced; any other file is refused
        (FileExistsError) unless overwrite=True.
    overwrite: replace whatever file is at path, without keeping it.
    max_size: stop recording, with one warning, once the trace file would
        grow past this many bytes; the run goes on.
    backward_calls: (first, last), 1-based: record only the ops from the end
        of backward call first-1 (so the forward feeding call `first` is
        included) to the end of call `last`.
    keep_last: flight recorder: keep in memory only the last N backward
        calls (and what they use); the trace is written at stop, at an
        exception, on SIGTERM and at max_size. Not with backward_calls.
    check_saved: fingerprint every saved CPU tensor's bytes at save and at
        its use in backward, to catch writes autograd cannot see (NumPy
        views, DLPack, custom kernels).
    per_rank: in a distributed run, write rank N's trace to path with
        ".rankN" before the extension (None: when a rank is known).
    argv: the command line kept in the trace's run row (default sys.argv).
    quiet: no line on stderr when the recording goes through the dispatch
        adapter (the engine adapter not built for this torch, failing its
        self-test, or GRADTRACE_ADAPTER=dispatch asking for it).

    Raises ValueError for option values out of range; start() raises
    FileExistsError, OSError or RuntimeError as Recording.start says."""
    return Recording(path, overwrite=overwrite, max_size=max_size,
                     backward_calls=backward_calls, keep_last=keep_last,
                     check_saved=check_saved, per_rank=per_rank, argv=argv, quiet=quiet)
