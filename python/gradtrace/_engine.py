"""The engine adapter's Python side: choosing it, and the little it needs
Python for (variable names; the backward wrappers are _mode.BackwardPatch).

The C++ shim (_gradtrace_engine) is built for the torch release found at
build time, from its headers (adapters/engine/torch_layout.h), and only
where that release passes the build's layout check. choose() loads it, checks
the running torch against the one it was built for and runs the shim's
self-test. GRADTRACE_ADAPTER=dispatch|engine overrides the default, the
engine adapter (it records the same facts as the dispatch adapter at a
fraction of its cost). Whenever gradtrace records through the dispatch
adapter, one line on stderr says so and why (announce), unless the
recording is quiet.
"""
import os
import sys
import threading

DEFAULT = "engine"


def announce(why):
    """Say in one line on stderr that the recording goes through the
    dispatch adapter, and why (choose's second value)."""
    sys.stderr.write("gradtrace: recording through the dispatch adapter: %s\n" % why)
    sys.stderr.flush()


def choose(torch_version):
    """(module, why): the _gradtrace_engine module to record with and None,
    or None and why the recording goes through the dispatch adapter (for
    announce)."""
    asked = os.environ.get("GRADTRACE_ADAPTER", "").strip().lower()
    want = asked or DEFAULT
    if want == "dispatch":
        return None, "GRADTRACE_ADAPTER=dispatch asked for it"
    if want != "engine":
        return None, "unknown GRADTRACE_ADAPTER=%r" % asked
    try:
        import _gradtrace_engine
    except ImportError as e:
        why = "the engine adapter is not built for torch %s" % torch_version
        if not isinstance(e, ModuleNotFoundError):
            why += " (it does not load: %s)" % e  # built, for another libtorch
        return None, why
    built = _gradtrace_engine.built_for()
    if torch_version.split("+")[0] != built:
        return None, "the engine adapter is built for torch %s, not %s" % (built,
                                                                           torch_version)
    why = _gradtrace_engine.selftest(torch_version)
    if why is not None:
        return None, "the engine adapter's self-test failed: %s" % why
    _check_wrappers(_gradtrace_engine)
    return _gradtrace_engine, None


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
        self._eng.backward_end(bid, exc)

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
