"""The PyTorch hooks gradtrace needs, and nothing else: a TorchDispatchMode
whose __torch_dispatch__ hands every aten op to the C recorder, the per-op
and per-node-class metadata the C side caches, and wrappers around the three
backward entry points (Tensor.backward, torch.autograd.backward,
torch.autograd.grad) that record each call, its roots and its exception.

No saved-tensor hooks are ever registered: they would switch off PyTorch's
own version check (SavedVariable::unpack skips it when hooks are set), and
the recorded run must fail exactly where the unrecorded one does.
"""
import functools
import inspect
import os
import sys
import threading
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SAVED_PREFIX = "_saved_"


def _direct_call(func):
    """What calling func(*args, **kwargs) calls: the C++ operator (`_op`)
    when func's __call__ is OpOverload's own, which only forwards to it
    (one Python frame less per op); func itself otherwise (subclasses such
    as TorchBindOpOverload do more)."""
    try:
        from torch._ops import OpOverload
    except ImportError:  # pragma: no cover
        return func
    op = getattr(func, "_op", None)
    if op is None or not callable(op) or type(func).__call__ is not OpOverload.__call__:
        return func
    return op


# How the versions of an op's written arguments move (adapters/dispatch/state.h BUMP_*)
BUMP_AFTER, BUMP_FOREACH, BUMP_NONE = 0, 1, 2


def _bump_kind(name, written):
    """BUMP_AFTER when PyTorch's ADInplaceOrView kernel bumps the written
    arguments after __torch_dispatch__ returns; BUMP_FOREACH for _foreach_
    ops, whose per-tensor ops bump only when no dispatch mode runs (the
    recorder then bumps for them); BUMP_NONE for other ops without that
    kernel (fused optimizer kernels), which PyTorch does not bump."""
    has_kernel = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)
    if not written or has_kernel is None:
        return BUMP_AFTER
    try:
        if has_kernel(name, "ADInplaceOrView"):
            return BUMP_AFTER
    except RuntimeError:
        return BUMP_AFTER
    if name.startswith("aten::_foreach_"):
        return BUMP_FOREACH
    return BUMP_NONE


@functools.lru_cache(maxsize=None)
def _kernel_writes():
    """{op: (argument names, when, reason)} of the kernel-write list and the
    set of ops whose schema marks a write of no element
    (include/gradtrace/kwrites.h, as _gradtrace has it)."""
    import _gradtrace
    table = {op: (tuple(args.split(",")), when, reason)
             for op, args, when, reason in _gradtrace.KERNEL_WRITES}
    return table, frozenset(_gradtrace.WRITES_NO_ELEMENT)


def _kernel_write_args(schema):
    """The schema positions the kernel-write list says the op writes, and
    its condition as (position, name), or (-1, '')."""
    table, _ = _kernel_writes()
    entry = table.get(schema.name)
    if entry is None:
        return [], (-1, "")
    names, when, _ = entry
    pos = [i for i, a in enumerate(schema.arguments)
           if a.name in names and a.alias_info is None and "Tensor" in str(a.type)]
    if not when:
        return pos, (-1, "")
    cond = [i for i, a in enumerate(schema.arguments)
            if a.name == when and str(a.type) == "bool"]
    return (pos, (cond[0], when)) if cond else ([], (-1, ""))


def op_meta(func):
    """(name, written-argument positions, written-argument names, view
    argument, callable, bump kind, kernel writes) of an OpOverload, from its
    schema:
    alias_info.is_write marks what the op mutates (in-place, out= and copy_
    alike); a return with non-write alias info is a view of the first
    argument with alias info. The callable is what func(*args, **kwargs)
    ends up calling; the bump kind says how PyTorch moves the written
    arguments' versions (_bump_kind). An in-place c10d collective's output,
    which its schema does not mark, is written too, without a bump
    (_dist.collective_writes), and so are the arguments of the kernel-write
    list (_kernel_write_args). Kernel writes: None, or for an op whose
    written arguments PyTorch does not bump (BUMP_NONE) (when position,
    when name, unmarked positions): a written argument whose version did not
    move once it returned is a write no version shows (_gradtrace.c
    kw_meta)."""
    schema = func._schema
    name = schema.name
    if schema.overload_name:
        name += "." + schema.overload_name
    positions = []
    written = []
    for i, arg in enumerate(schema.arguments):
        info = arg.alias_info
        if info is not None and info.is_write:
            positions.append(i)
            written.append(arg.name)
    view_arg = -1
    if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and not arg.alias_info.is_write:
                view_arg = i
                break
    bump = _bump_kind(name, written)
    from ._dist import collective_writes  # c10d writes its schema does not mark
    listed, when = _kernel_write_args(schema)
    silent = [i for i in collective_writes(schema) + listed if i not in positions]
    if silent:
        positions.extend(silent)
        # a conditional write (training=True) is read from positional
        # arguments only, as ops reach the mode from C++
        written.extend(schema.arguments[i].name for i in silent
                       if when[0] < 0 or i not in listed)
        bump = BUMP_NONE
    kw = None
    if bump == BUMP_NONE and schema.name not in _kernel_writes()[1]:
        kw = (when[0], when[1], tuple(silent))
    return (name, tuple(positions), tuple(written), view_arg, _direct_call(func), bump, kw)


def saved_names(cls):
    """((attribute, slot), ...) of the tensors a node class saves: the
    `_saved_<slot>` attributes of built-in nodes, `saved_tensors` of custom
    autograd.Function nodes."""
    names = sorted(n for n in dir(cls) if n.startswith(SAVED_PREFIX))
    pairs = tuple((n, n[len(SAVED_PREFIX):]) for n in names)
    if not pairs and issubclass(cls, torch.autograd.function.BackwardCFunction):
        pairs = (("saved_tensors", "saved_tensors"),)
    return pairs


def via_autograd_probe():
    """A no-argument function telling, inside __torch_dispatch__, whether the
    op came through the autograd kernels (x.detach()) rather than straight
    from a shallow copy (x.data), or None where PyTorch cannot tell."""
    keys = torch._C.DispatchKey
    probe = getattr(torch._C, "_dispatch_tls_is_dispatch_key_excluded", None)
    key = getattr(keys, "AutogradFunctionality", None)
    if probe is None or key is None:
        return None
    return functools.partial(probe, key)


class DispatchMode(TorchDispatchMode):
    """Hands each op straight to the recorder, which records it and calls it.

    The instance's __torch_dispatch__ is the recorder's C method itself, so
    no Python frame runs per op. PyTorch 2.x wraps a subclass's
    __torch_dispatch__ in torch._disable_dynamo (two more Python frames and a
    context switch per op); _should_skip_dynamo opts out of that, so ops are
    not protected from torch.compile tracing into the recorder (it graph-breaks
    on the C call instead)."""

    def __init__(self, dispatch):
        super().__init__()
        # a real bound method (PyTorch insists), whose function is C
        self.__dict__["__torch_dispatch__"] = types.MethodType(dispatch, self)

    @classmethod
    def _should_skip_dynamo(cls):
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.__dict__["__torch_dispatch__"](func, types, args, kwargs)  # pragma: no cover


_tls = threading.local()


def _binder(sig):
    """bind(args, kwargs): the arguments given by name, as
    sig.bind(*args, **kwargs).arguments, or TypeError for a call that does
    not fit. Signature.bind costs 10-25 us a call, at every backward call:
    calls that pass no argument twice take a dict instead."""
    params = list(sig.parameters.values())
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind not in plain for p in params):
        return lambda args, kwargs: sig.bind(*args, **kwargs).arguments
    names = tuple(p.name for p in params if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD)
    known = frozenset(p.name for p in params)
    required = frozenset(p.name for p in params if p.default is inspect.Parameter.empty)

    def bind(args, kwargs):
        if len(args) <= len(names):
            a = dict(zip(names, args))
            if not kwargs or (known.issuperset(kwargs) and a.keys().isdisjoint(kwargs)):
                a.update(kwargs)
                if required.issubset(a):
                    return a
        return sig.bind(*args, **kwargs).arguments  # raises TypeError

    return bind


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return [x]
    return list(x)


def _dynamo_counts():
    """(frames TorchDynamo was asked to compile, calls it captured), or None
    when torch._dynamo was never imported (nothing was compiled)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    counters = getattr(utils, "counters", None)
    if counters is None:
        return None
    return counters["frames"].get("total", 0), counters["stats"].get("calls_captured", 0)


class CompileNotice:
    """TorchDynamo does not compile while a TorchDispatchMode is active: a
    torch.compile'd function called while recording runs eagerly, its aten
    ops recorded one by one. Recording must not change what runs without
    saying so: check() prints one line the first time that happened."""

    MESSAGE = ("gradtrace: torch.compile ran eagerly while recording (TorchDynamo does "
               "not compile under the dispatch mode gradtrace records with); the trace "
               "shows the compiled regions' aten ops")

    def __init__(self):
        self._start = _dynamo_counts() or (0, 0)
        self._said = False

    def check(self):
        if self._said:
            return
        now = _dynamo_counts()
        if now is None or now[0] <= self._start[0]:
            return
        if now[1] > self._start[1]:
            self._start = now  # it did capture: not our case
            return
        self._said = True
        print(self.MESSAGE, file=sys.stderr)


# backward_calls.api of a call torch.compile made while compiling (AOTAutograd
# tracing the backward graph), not the user: the prefix, then the API
# (include/gradtrace/format.h GT_API_BY_COMPILER, schema/SCHEMA.md)
COMPILER_PREFIX = "torch.compile: "
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_COMPILER_DIRS = tuple(_TORCH_DIR + d + os.sep for d in (
    "_dynamo", "_functorch", "_inductor", "fx", "_subclasses", "_higher_order_ops",
    "export"))


def _made_by_compiler():
    """True when the backward entry point was called from torch.compile's
    own code (the frames from the wrapper's caller outward are torch's, one
    of them a compiler's) rather than from the user's or another library's
    code: torch's frames up to the first that is not."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_TORCH_DIR):
        if f.f_code.co_filename.startswith(_COMPILER_DIRS):
            return True
        f = f.f_back
    return False


class BackwardPatch:
    """Wraps the backward entry points while a recording is on.

    A wrapper records one backward call per user call: the call made inside
    another (Tensor.backward calls torch.autograd.backward) is not recorded
    again. Functions imported by name before recording started
    (`from torch.autograd import grad`) are not wrapped."""

    TARGETS = (
        (torch.Tensor, "backward", "Tensor.backward", "self", "inputs"),
        (torch.autograd, "backward", "torch.autograd.backward", "tensors", "inputs"),
        (torch.autograd, "grad", "torch.autograd.grad", "outputs", "inputs"),
    )

    def __init__(self, recording):
        self._recording = recording
        self._saved = []
        # the engine adapter records below TorchDynamo: compiled code runs
        # compiled, and there is nothing to say
        self.compile_notice = CompileNotice() if recording.adapter != "engine" else None

    def install(self):
        for owner, attr, api, roots, inputs in self.TARGETS:
            orig = owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)
            self._saved.append((owner, attr, orig))
            setattr(owner, attr, self._wrap(orig, api, roots, inputs))
        self._wrap_calls()
        self._watch_data()
        self._wrap_swap()
        self._wrap_jit_trace()
        self._wrap_set_version()

    def _wrap_set_version(self):
        """torch.autograd._unsafe_preserve_version_counter sets a counter
        back (torch._C._autograd._unsafe_set_version_counter) after writes it
        hides from autograd: FSDP2 refills a parameter the forward saved,
        before the backward needs it. Without the set, the trace showed the
        write's version at the backward and diagnose reported the saved
        tensor modified; each tensor's version is recorded as it is set."""
        mod = getattr(torch._C, "_autograd", None)
        orig = getattr(mod, "_unsafe_set_version_counter", None)
        if orig is None:
            return
        rec = self._recording

        @functools.wraps(orig)
        def _unsafe_set_version_counter(tensors, versions):
            out = orig(tensors, versions)
            r = rec._rec
            observe = getattr(r, "observe_version", None)
            if observe is not None and r.recording:
                for t in (tensors,) if isinstance(tensors, torch.Tensor) else tensors:
                    if isinstance(t, torch.Tensor):
                        observe(t)
            return out

        self._saved.append((mod, "_unsafe_set_version_counter", orig))
        mod._unsafe_set_version_counter = _unsafe_set_version_counter

    def _wrap_jit_trace(self):
        """torch.jit.trace under a TorchDispatchMode traces wrong: a Conv2d
        module's input is left out of its call in the traced graph (its
        output a constant), so the traced model's parameters got no
        gradient and training went another way. The dispatch adapter's mode
        is popped while torch.jit traces (the tracing run's ops are not
        recorded; the traced module's later calls are)."""
        if not hasattr(self._recording._rec, "call_begin"):
            return  # the engine adapter has no dispatch mode
        try:
            import torch.jit._trace as jit_trace
            from torch.utils._python_dispatch import (_get_current_dispatch_mode,
                                                      _pop_mode_temporarily)
        except ImportError:  # pragma: no cover
            return
        for owner, attr in ((jit_trace, "_trace_impl"), (jit_trace, "trace_module"),
                            (torch.jit, "trace_module")):
            orig = owner.__dict__.get(attr)
            if orig is None:
                continue

            def wrapped(*args, __orig=orig, **kwargs):
                if not isinstance(_get_current_dispatch_mode(), DispatchMode):
                    return __orig(*args, **kwargs)
                with _pop_mode_temporarily():
                    return __orig(*args, **kwargs)

            self._saved.append((owner, attr, orig))
            setattr(owner, attr, functools.wraps(orig)(wrapped))

    def _wrap_swap(self):
        """torch.utils.swap_tensors (nn.Module.to and load_state_dict(assign=)
        under set_swap_module_params_on_conversion) refuses a tensor that has
        weak references, and the recorder holds one on every tensor it has
        seen: before a swap it lets both go (each is recorded anew when next
        seen), so that recording never changes whether the run raises."""
        orig = getattr(torch.utils, "swap_tensors", None)
        if orig is None:
            return
        rec = self._recording

        @functools.wraps(orig)
        def swap_tensors(t1, t2):
            r = rec._rec
            if r is None or not hasattr(r, "forget"):
                return orig(t1, t2)
            on = r.recording
            if on:
                r.flush()  # the references the last op's outputs hold go
            for t in (t1, t2):
                if isinstance(t, torch.Tensor):
                    r.forget(t)
            if on:
                r.set_active(False)  # its checks run ops that must hold none
            try:
                return orig(t1, t2)
            finally:
                if on:
                    r.set_active(True)

        self._saved.append((torch.utils, "swap_tensors", orig))
        torch.utils.swap_tensors = swap_tensors

    def _watch_data(self):
        """`t.data = other` swaps t's storage with no aten op and no version
        bump: a property on torch.Tensor (shadowing the base class's `data`
        descriptor, whose getter it keeps) sends each assignment through the
        recorder, which performs it and records the swap with its line."""
        rec = self._recording._rec
        if not hasattr(rec, "data_set") or "data" in torch.Tensor.__dict__:
            return
        base = getattr(torch._C, "TensorBase", None) or getattr(torch._C, "_TensorBase", None)
        orig = getattr(base, "__dict__", {}).get("data")
        if orig is None or not hasattr(orig, "__set__"):
            return
        rec.watch_data(orig)
        torch.Tensor.data = property(orig.__get__, rec.data_set, doc=orig.__doc__)
        self._saved.append((torch.Tensor, "data", None))

    def _wrap_calls(self):
        """Bracket the calls the engine makes into user code, so that the
        recorder names the line that made them: a custom autograd.Function's
        apply (its node is recorded as apply returns, attributed to the
        calling line, before anything can change what it saved), and a
        non-reentrant torch.utils.checkpoint region (its nodes save through
        saved-tensor hooks, which the recorder must not unpack)."""
        rec = self._recording
        if not hasattr(rec._rec, "call_begin"):
            return  # the engine adapter records these calls' nodes itself
        fn_cls = torch.autograd.function.Function
        apply = fn_cls.__dict__.get("apply")
        if isinstance(apply, classmethod):
            orig_apply = apply.__func__
        elif apply is not None and hasattr(apply, "__get__"):
            # torch 2.14: _C._FunctionBase's own apply, a C classmethod
            def orig_apply(cls, *args, **kwargs):
                return apply.__get__(None, cls)(*args, **kwargs)
        else:  # pragma: no cover
            orig_apply = None
        if orig_apply is not None:

            @functools.wraps(orig_apply)
            def wrapped_apply(cls, *args, **kwargs):
                r = rec._rec
                if r is None or not r.recording:
                    return orig_apply(cls, *args, **kwargs)
                seq = r.call_begin(cls.__qualname__ + ".apply", (args, tuple(kwargs.values())),
                                   False)
                try:
                    out = orig_apply(cls, *args, **kwargs)
                except BaseException:
                    r.call_end(seq, None)
                    raise
                r.call_end(seq, out)
                return out

            self._saved.append((fn_cls, "apply", apply))
            fn_cls.apply = classmethod(wrapped_apply)
        try:
            import torch.utils.checkpoint as ckpt
        except ImportError:  # pragma: no cover
            return
        # torch 2.14 checkpoint() calls the generator's _impl(fn, args,
        # kwargs, ...); before, the generator(fn, options..., *args, **kwargs)
        name = "_checkpoint_without_reentrant_generator_impl"
        gen = getattr(ckpt, name, None)
        if gen is not None:
            def call_args(args, kwargs):
                return (args[1:2], tuple((args[2] if len(args) > 2 else {}).values()))
        else:
            name = "_checkpoint_without_reentrant_generator"
            gen = getattr(ckpt, name, None)

            def call_args(args, kwargs):
                return (args, tuple(kwargs.values()))
        if gen is None:
            return

        @functools.wraps(gen)
        def wrapped_gen(*args, **kwargs):
            r = rec._rec
            seq = 0
            if r is not None and r.recording:
                seq = r.call_begin("torch.utils.checkpoint", call_args(args, kwargs), True)
            try:
                yield from gen(*args, **kwargs)
            finally:
                if r is not None:
                    r.call_end(seq, None)

        self._saved.append((ckpt, name, gen))
        setattr(ckpt, name, wrapped_gen)

    def remove(self):
        if self.compile_notice is not None:
            self.compile_notice.check()
        for owner, attr, orig in reversed(self._saved):
            if orig is None:
                delattr(owner, attr)  # shadowed a base class's attribute
            else:
                setattr(owner, attr, orig)
        self._saved = []

    def _wrap(self, orig, api, roots_name, inputs_name):
        sig = inspect.signature(orig)
        bind = _binder(sig)
        recording = self._recording
        notice = self.compile_notice

        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            __tracebackhide__ = True  # pytest leaves this frame out of its report
            if getattr(_tls, "depth", 0) or not recording.is_on():
                return orig(*args, **kwargs)
            if notice is not None:
                notice.check()
            try:
                a = bind(args, kwargs)
                roots = _as_list(a.get(roots_name))
                create = bool(a.get("create_graph", False))
                retain = a.get("retain_graph")
                retain = create if retain is None else bool(retain)
                inputs = _as_list(a.get(inputs_name))
            except TypeError:
                return orig(*args, **kwargs)  # let PyTorch report the bad call
            _tls.depth = 1
            try:
                bid = recording.backward_begin(
                    COMPILER_PREFIX + api if _made_by_compiler() else api, roots or [],
                    retain, create, inputs)
                try:
                    result = orig(*args, **kwargs)
                except BaseException as exc:
                    recording.backward_end(bid, exc)
                    raise
                recording.backward_end(bid, None)
                return result
            finally:
                _tls.depth = 0

        return wrapper
