"""The engine adapter's Python side: choosing it, and the little it needs
Python for (variable names; the backward wrappers are _mode.BackwardPatch).

The C++ shim (_gradtrace_engine) is built only for the torch found at build
time. choose() loads it, checks the running torch and runs the shim's
self-test; on any failure gradtrace records through the dispatch adapter and
says so in one line on stderr. GRADTRACE_ADAPTER=dispatch|engine overrides
the default: the engine adapter wherever it is built and passes its
self-test (it records the same facts as the dispatch adapter at a fraction
of its cost), else the dispatch adapter, silently unless asked for.
"""
import os
import sys
import threading

DEFAULT = "engine"


def choose(torch_version):
    """The _gradtrace_engine module to record with, or None for the
    dispatch adapter (after printing one line saying why, unless the user
    asked for dispatch)."""
    want = os.environ.get("GRADTRACE_ADAPTER", "").strip().lower() or DEFAULT
    if want == "dispatch":
        return None
    if want != "engine":
        sys.stderr.write("gradtrace: unknown GRADTRACE_ADAPTER=%r, using the dispatch "
                         "adapter\n" % want)
        return None
    try:
        import _gradtrace_engine
    except ImportError:
        if os.environ.get("GRADTRACE_ADAPTER"):
            sys.stderr.write("gradtrace: engine adapter not built for this torch (%s); "
                             "recording through the dispatch adapter\n" % torch_version)
        return None
    why = _gradtrace_engine.selftest(torch_version)
    if why is not None:
        sys.stderr.write("gradtrace: engine adapter self-test failed (%s); recording "
                         "through the dispatch adapter\n" % why)
        return None
    _check_wrappers(_gradtrace_engine)
    return _gradtrace_engine


_wrappers_checked = False


def _check_wrappers(mod):
    """Let the shim check, once, that it reads the tensor a torch.func
    GradTrackingTensor wraps (it then records that tensor's storage and
    geometry, as the dispatch adapter does); if not, wrappers are recorded
    as they are, without geometry."""
    global _wrappers_checked
    if _wrappers_checked:
        return
    _wrappers_checked = True
    try:
        import torch
        run = _wrap_probe(torch, mod)
        # on a thread of its own: torch.func leaves the thread it ran on
        # with a functorch state, which every thread-local-state switch of
        # the autograd engine then copies (two allocations each, 34 switches
        # a step on bench_overhead's MLP); the user's thread keeps none
        t = threading.Thread(target=run, name="gradtrace-probe", daemon=True)
        t.start()
        t.join()
    except Exception:
        pass


def _wrap_probe(torch, mod):
    """A function that makes one GradTrackingTensor and lets the shim check
    it. torch.func.grad would import torch._dynamo (about 800 modules, 1.2 s
    of CPU at every recorded run's start): the wrapper is made with the
    functorch primitives grad() itself uses, which import nothing. Where
    they are missing, grad() is the fallback."""
    f = torch._C._functorch
    unwrap = f.get_unwrapped
    if all(hasattr(f, n) for n in ("_grad_increment_nesting", "_grad_decrement_nesting",
                                   "_wrap_for_grad")):
        def run():
            x = torch.ones(1)  # made outside the level, as grad()'s arguments are
            level = f._grad_increment_nesting()
            try:
                w = f._wrap_for_grad(x, level)
                mod.wrapper_check(w, unwrap(w))
            except Exception:
                pass
            finally:
                f._grad_decrement_nesting()

        return run
    from torch.func import grad

    def probe(x):
        mod.wrapper_check(x, unwrap(x))
        return x.sum()

    def run():
        try:
            grad(probe)(torch.ones(1))
        except Exception:
            pass

    return run


class EngineRecorder:
    """The engine capture behind the interface Recording expects of
    _gradtrace.Recorder (backward_begin/end, error, close, ...)."""

    def __init__(self, mod, path, *, hidden, engine, getline, overwrite, max_bytes,
                 keep_last=0, check_saved=False):
        self._eng = mod.Engine(path, hidden, engine, getline, overwrite, max_bytes,
                               keep_last, check_saved)
        self._hidden = hidden + engine
        self.RUN = {"ok": mod.RUN_OK, "exception": mod.RUN_EXCEPTION,
                    "signal": mod.RUN_SIGNAL}
        # `t.data = v` (see _mode.BackwardPatch._watch_data): the C methods
        # themselves, so the property calls no Python
        self.watch_data = self._eng.watch_data
        self.data_set = self._eng.data_set

    def start(self):
        self._eng.start()

    def set_run(self, **kw):
        self._eng.set_run(**kw)

    def set_active(self, on):
        self._eng.set_active(on)

    @property
    def recording(self):
        return self._eng.recording

    @property
    def seq(self):
        """Events recorded so far (the status line's count)."""
        return getattr(self._eng, "seq", None)

    def _user_frame(self):
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith(self._hidden):
            f = f.f_back
        return f

    def call_begin(self, name, args, region):
        return self._eng.call_begin(name, args, region)

    def call_end(self, seq, result):
        self._eng.call_end(seq, result)

    def backward_begin(self, api, roots, retain, create, inputs):
        bid = self._eng.backward_begin(api, roots, retain, create, inputs)
        try:
            self._eng.bind_names(self._user_frame())
        except Exception:
            pass
        return bid

    def backward_end(self, bid, exc):
        if bid:
            self._eng.backward_end(exc)

    def error(self, exc):
        tb = getattr(exc, "__traceback__", None)
        frame = None
        while tb is not None:
            if not tb.tb_frame.f_code.co_filename.startswith(self._hidden):
                frame = tb.tb_frame
            tb = tb.tb_next
        try:
            self._eng.bind_names(frame)
        except Exception:
            pass
        self._eng.error(exc)

    def flush(self):
        self._eng.flush()

    def forget(self, t):
        self._eng.forget(t)

    def observe_version(self, t):
        self._eng.observe_version(t)

    def close(self, code, exit_code, sig):
        return self._eng.close(code, exit_code, sig)

    def forked(self):
        self._eng.forked()
