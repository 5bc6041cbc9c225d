"""The engine adapter knows which arguments an operator writes whatever
their number (issue 14, item 5): what the shim makes of a schema (the
write flags it keeps per operator) matches the schema's alias annotations
for every operator torch registers, and for operators of more than 64
arguments, which this torch's dispatcher refuses to register (so no such
op can run here) but a schema can describe.

Env: PYTHONPATH with the engine adapter (set by ctest).
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

try:
    import torch
    import _gradtrace_engine as eng
    from gradtrace._dist import collective_writes
    from gradtrace._mode import _kernel_write_args
except ImportError:
    eng = None


def expected(schema):
    """The flags the shim must give: 'w' for an argument the schema marks
    written, 'u' for the one a c10d collective writes unmarked and for those
    of the kernel-write list (include/gradtrace/kwrites.h, as the dispatch
    adapter reads it), '.' else."""
    flags = ["w" if a.alias_info is not None and a.alias_info.is_write else "."
             for a in schema.arguments]
    for i in collective_writes(schema) + _kernel_write_args(schema)[0]:
        flags[i] = "u"
    return "".join(flags)


def wide(name, n, arg):
    """A schema of n arguments, arg(i) giving the i-th."""
    return "%s(%s) -> ()" % (name, ", ".join(arg(i) for i in range(n)))


@unittest.skipUnless(eng is not None and gtutil.adapter() == "engine",
                     "engine adapter not built")
class SchemaWrites(unittest.TestCase):
    def test_every_registered_operator(self):
        import torch.distributed  # noqa: F401 (registers the c10d ops)
        schemas = torch._C._jit_get_all_schemas()
        self.assertGreater(len(schemas), 1000)
        kinds = set()
        for s in schemas:
            want = expected(s)
            kinds.update(want)
            self.assertEqual(eng.schema_writes(str(s)), want, str(s))
        self.assertEqual(kinds, {".", "w", "u"})  # collectives included
        # BatchNorm's running statistics, which its schema does not mark
        bn = torch.ops.aten.native_batch_norm.default._schema
        self.assertEqual(eng.schema_writes(str(bn)), "...uu...")

    def test_more_than_64_arguments(self):
        for n, at in ((65, 64), (70, 67), (130, 129), (300, 70)):
            s = wide("gt_test::scale_", n,
                     lambda i: ("Tensor(a!) a%d" if i == at else "Tensor a%d") % i)
            self.assertEqual(eng.schema_writes(s), "." * at + "w" + "." * (n - at - 1), n)
        # several written, before and beyond the 64th
        s = wide("gt_test::many_", 100, lambda i: "Tensor(a%d!) a%d" % (i, i)
                 if i % 3 == 0 else "Tensor a%d" % i)
        self.assertEqual(eng.schema_writes(s),
                         "".join("w" if i % 3 == 0 else "." for i in range(100)))

    def test_collective_beyond_64(self):
        s = wide("c10d::wide_", 80, lambda i: "Tensor t%d" % i if i >= 70 else "int n%d" % i)
        self.assertEqual(eng.schema_writes(s), "." * 70 + "u" + "." * 9)

    def test_bad_schema(self):
        with self.assertRaises(ValueError):
            eng.schema_writes("not a schema (")


if __name__ == "__main__":
    unittest.main()
