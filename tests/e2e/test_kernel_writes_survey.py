"""The kernel-write list (include/gradtrace/kwrites.h) found by running ops,
not by hand: every registered aten op with a running-statistics argument
(each overload, out= included, in training mode and not), the OpInfo
sample inputs of every op PyTorch's test suite describes (under a dispatch
mode that sees each aten op they reach), and the ops known to write
arguments their schema marks but PyTorch does not bump (fused optimizers,
AMP's unscale and scale update, BatchNorm's with-update variants). Each
run compares every tensor argument's bytes before and after with its
version counter. Asserted:

- every write of an argument the schema does not mark, with no version
  bump, is an entry of the list (read from the built _gradtrace, so
  removing an entry fails here), with the condition the list gives (no
  write with training=False);
- every entry whose op has a CPU kernel was found writing (no stale entry);
- every write of a marked argument without a bump is by an op the
  adapters treat as able to write without one (no ADInplaceOrView kernel:
  the dispatch adapter's BUMP_NONE with kernel writes on);
- docs/diagnose.md lists every entry.

Prints the figures (ops surveyed, writes found). Env: GT_SOURCE_DIR, and
PYTHONPATH with the built _gradtrace (set by ctest).
"""
import os
import sys
import types
import unittest
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

import _gradtrace  # noqa: E402
from gradtrace import _mode  # noqa: E402

STATS = ("running_mean", "running_var")


def name_of(schema):
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


def marked(arg):
    return arg.alias_info is not None and arg.alias_info.is_write


def raw(x):
    """x's bytes as a flat uint8 tensor (a copy)."""
    return x.detach().contiguous().reshape(-1).view(torch.uint8).clone()


class Watch:
    """The tensor arguments of one call: (schema position, name, tensor,
    marked, bytes, version) before it; changed() after it."""

    def __init__(self, schema, args, kwargs):
        self.items = []
        for i, a in enumerate(schema.arguments):
            v = args[i] if i < len(args) else kwargs.get(a.name)
            for x in tree_flatten(v)[0]:
                if isinstance(x, torch.Tensor) and x.layout == torch.strided \
                        and x.device.type == "cpu" and not x.is_meta:
                    self.items.append((i, a.name, x, marked(a), raw(x), x._version))

    def changed(self):
        """(position, name, marked, bumped) of each argument whose bytes
        changed, leaving out those sharing memory with a marked one."""
        written = {x.untyped_storage().data_ptr() for _, _, x, m, _, _ in self.items if m}
        out = []
        for i, n, x, m, before, v in self.items:
            if not m and x.untyped_storage().data_ptr() in written:
                continue
            if not torch.equal(before, raw(x)):
                out.append((i, n, m, x._version != v))
        return out


class Spy(TorchDispatchMode):
    """Every aten op a call reaches: unmarked arguments written without a
    bump, as {op name: {argument name}} (below autograd no bump shows for
    marked ones: those are checked outside any mode)."""

    def __init__(self):
        super().__init__()
        self.found = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        w = Watch(func._schema, args, kwargs)
        out = func(*args, **kwargs)
        for _, n, m, bumped in w.changed():
            if not m and not bumped:
                self.found.setdefault(func._schema.name, set()).add(n)
        return out


def value_for(arg, c=3):
    """An input for schema argument arg of a running-statistics op
    (channels c, batch (4, c, 5)), or raise KeyError."""
    t, n = str(arg.type), arg.name
    if marked(arg) and arg.kwarg_only:
        return torch.empty(0)  # an out= tensor (call shapes it)
    if t in ("Tensor", "Optional[Tensor]"):
        return {"input": torch.randn(4, c, 5), "weight": torch.rand(c) + 0.5,
                "bias": torch.randn(c), "running_mean": torch.randn(c),
                "running_var": torch.rand(c) + 0.5, "mean": torch.randn(2, c),
                "invstd": torch.rand(2, c) + 0.5, "counts": torch.tensor([20.0, 20.0]),
                "save_mean": torch.randn(c), "save_invstd": torch.rand(c) + 0.5,
                "save_var": torch.rand(c) + 0.5, "reserve": torch.empty(0),
                "grad_out": torch.randn(4, c, 5), "grad_output": torch.randn(4, c, 5),
                "sum_dy": torch.randn(c), "sum_dy_xmu": torch.randn(c),
                "count": torch.tensor([20, 20], dtype=torch.int32)}[n]
    if t == "bool":
        return True
    if t == "float":
        return {"momentum": 0.1, "exponential_average_factor": 0.1}.get(n, 1e-5)
    if t == "int":
        return 20
    if t in ("List[bool]", "bool[3]"):
        return [True, True, True]
    raise KeyError(n)


def stats_ops():
    """Every registered aten schema with a running-statistics argument."""
    return [s for s in torch._C._jit_get_all_schemas()
            if s.name.startswith("aten::") and any(a.name in STATS for a in s.arguments)]


def call(schema, training):
    """Run schema's op on made-up inputs; the Watch of the call, or None if
    it has no kernel here or refuses them."""
    packet = getattr(torch.ops.aten, schema.name[len("aten::"):])
    op = getattr(packet, schema.overload_name or "default")
    try:
        args = [value_for(a) for a in schema.arguments if not a.kwarg_only]
        kwargs = {a.name: value_for(a) for a in schema.arguments if a.kwarg_only}
    except KeyError:
        return None
    for i, a in enumerate(schema.arguments):
        if a.name == "training" and not a.kwarg_only:
            args[i] = training
    outs = [a.name for a in schema.arguments if a.kwarg_only and marked(a)]
    if outs:
        # out= tensors shaped as the functional overload's results (some
        # kernels take a wrong shape for granted)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = packet.default(*[a.clone() if isinstance(a, torch.Tensor) else a
                                       for a in args])
        except Exception:
            return None
        res = res if isinstance(res, tuple) else (res,)
        if len(res) != len(outs):
            return None
        kwargs.update({n: torch.empty_like(r) for n, r in zip(outs, res)})
    w = Watch(schema, args, kwargs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(*args, **kwargs)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError):
        return None
    return w


def marked_without_bump():
    """Calls known to write marked arguments: {op: set of argument names}
    written with no version bump (checked outside any dispatch mode, as
    the program runs them), and the aten ops each reached."""
    found, reached = {}, set()

    class Names(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            reached.add(name_of(func._schema))
            return func(*args, **(kwargs or {}))

    def step(opt, **kw):
        p = torch.nn.Parameter(torch.randn(3))
        p.grad = torch.randn(3)
        o = opt([p], fused=True, **kw)
        v = p._version
        before = raw(p)
        o.step()
        with Names():
            o.step()
        if p._version == v and not torch.equal(before, raw(p)):
            found.setdefault(opt.__name__, set()).add("params")

    for opt, kw in ((torch.optim.Adam, {}), (torch.optim.AdamW, {}),
                    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
                    (torch.optim.Adagrad, {})):
        step(opt, **kw)
    for name, args in (
            ("_native_batch_norm_legit", lambda: (torch.randn(4, 3, 5), None, None,
                                                  torch.zeros(3), torch.ones(3), True,
                                                  0.1, 1e-5)),
            ("_batch_norm_with_update", lambda: (torch.randn(4, 3, 5), None, None,
                                                 torch.zeros(3), torch.ones(3), 0.1,
                                                 1e-5)),
            ("_amp_foreach_non_finite_check_and_unscale_",
             lambda: ([torch.randn(3)], torch.zeros(1), torch.full((1,), 0.5))),
            ("rrelu_with_noise", lambda: (torch.randn(6), torch.zeros(6), 0.1, 0.3,
                                          True))):
        op = getattr(torch.ops.aten, name).default
        a = args()
        w = Watch(op._schema, a, {})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(*a)
        with Names():
            op(*args())
        for _, n, m, bumped in w.changed():
            if m and not bumped:
                found.setdefault("aten::" + name, set()).add(n)
    return found, reached


def opinfo_db():
    """PyTorch's OpInfo list, or None where it cannot be imported (its test
    helpers import expecttest only for a TestCase base class: a stand-in
    does for reading sample inputs)."""
    if "expecttest" not in sys.modules:
        try:
            import expecttest  # noqa: F401
        except ImportError:
            stub = types.ModuleType("expecttest")
            stub.TestCase = unittest.TestCase
            sys.modules["expecttest"] = stub
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db
    except Exception as e:  # pragma: no cover - depends on the torch build
        print("OpInfo not importable: %s" % e)
        return None
    return op_db


def sweep_opinfo(spy, samples=2):
    """Run the first `samples` sample inputs of each OpInfo (float32, CPU)
    under spy. Returns (OpInfos run, samples run)."""
    db = opinfo_db()
    if db is None:
        return 0, 0
    nops = nsamples = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in db:
            try:
                if torch.float32 not in info.supported_dtypes("cpu"):
                    continue
                it = info.sample_inputs("cpu", torch.float32, requires_grad=False)
                nops += 1
                for k, s in enumerate(it):
                    if k >= samples:
                        break
                    nsamples += 1
                    try:
                        with spy:
                            info(s.input, *s.args, **s.kwargs)
                    except Exception:
                        pass
            except Exception:
                pass
    return nops, nsamples


class Survey(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.table = {op: (set(args.split(",")), when)
                     for op, args, when, _ in _gradtrace.KERNEL_WRITES}
        # 1. every op with a running-statistics argument, training and not
        cls.stats = stats_ops()
        cls.found, cls.found_eval, cls.ran = {}, {}, set()
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        # an op that decomposes before autograd (batch_norm, instance_norm)
        # writes through the ops it runs, which the adapters record
        cls.composite = {s.name for s in cls.stats
                         if has(name_of(s), "CompositeImplicitAutograd")}
        for s in cls.stats:
            if s.name in cls.composite:
                continue
            for training, into in ((True, cls.found), (False, cls.found_eval)):
                w = call(s, training)
                if w is None:
                    continue
                cls.ran.add(name_of(s))
                for _, n, m, bumped in w.changed():
                    if not m and not bumped:
                        into.setdefault(s.name, set()).add(n)
        # 2. every OpInfo's samples, each aten op they reach
        spy = Spy()
        cls.opinfos, cls.samples = sweep_opinfo(spy)
        cls.swept = spy.found
        # 3. marked arguments written without a bump
        cls.marked, cls.reached = marked_without_bump()
        print("surveyed: %d aten ops with a running-statistics argument (%d decompose "
              "into others: %s; %d ran on the CPU), %d OpInfos (%d samples)"
              % (len(cls.stats), len(cls.composite), ", ".join(sorted(cls.composite)),
                 len(cls.ran), cls.opinfos, cls.samples))
        for op, args in sorted({**cls.swept, **cls.found}.items()):
            print("unmarked write, no bump: %s %s" % (op, ",".join(sorted(args))))
        for op, args in sorted(cls.marked.items()):
            print("marked write, no bump:   %s %s" % (op, ",".join(sorted(args))))

    def test_unmarked_writes_are_listed(self):
        self.assertIn("aten::native_batch_norm", self.found)  # the survey runs at all
        for found in (self.found, self.swept):
            for op, args in found.items():
                self.assertIn(op, self.table, "%s writes %s without a bump: not in "
                              "include/gradtrace/kwrites.h" % (op, args))
                self.assertLessEqual(args, self.table[op][0], op)

    def test_condition(self):
        for op, args in self.found_eval.items():
            self.assertEqual(self.table[op][1], "", "%s wrote %s with training=False"
                             % (op, args))
        for op, (args, when) in self.table.items():
            if when and op in self.found:
                self.assertNotIn(op, self.found_eval)

    def test_no_stale_entry(self):
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        for op, (args, _) in self.table.items():
            if not any(has(name_of(s), "CPU") for s in self.stats if s.name == op):
                print("not run here (no CPU kernel): %s" % op)
                continue
            self.assertEqual(self.found.get(op), args, op)

    def test_marked_writes_are_kernel_writes(self):
        self.assertIn("Adam", self.marked)  # a fused step writes without a bump
        self.assertIn("aten::_native_batch_norm_legit", self.marked)
        checked = []
        for name in sorted(self.reached):
            if "_fused_" not in name and name.split(".")[0] not in self.marked:
                continue
            checked.append(name)
            packet, _, overload = name[len("aten::"):].partition(".")
            op = getattr(getattr(torch.ops.aten, packet), overload or "default")
            meta = _mode.op_meta(op)
            self.assertEqual(meta[5], _mode.BUMP_NONE, name)
            self.assertIsNotNone(meta[6], name)
        self.assertIn("aten::_fused_adam_", checked)
        self.assertIn("aten::_native_batch_norm_legit", checked)

    def test_documented(self):
        with open(os.path.join(gtutil.SOURCE, "docs", "diagnose.md")) as f:
            doc = f.read()
        section = doc[doc.index("## Kernel writes"):]
        for op in self.table:
            self.assertIn("`%s`" % op, section)


if __name__ == "__main__":
    unittest.main()
