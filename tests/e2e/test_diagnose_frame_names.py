"""Names of what the frame that calls backward() sees.

A function's globals that its code names: a model bound at module level
and used by the function that calls backward() (`policy` in
tests/e2e/realbugs/reinforce_resample_151.py) names its parameters
(policy.affine1.weight); they had no name, as only the frame's locals were
read. A global the function does not name, or whose name a local shadows,
lends none.

A tensor held in a list, a tuple or a dict bound to a variable is named
by it: laterals[2], pair[0], feats['p3'], feats[4] (one level deep). It had
no name ("a tensor modified in place"), as in the FPN top-down path
`laterals[i - 1] += ...` (tests/e2e/realbugs/fpn_laterals_4.py).

A tensor that a variable of its own or a module names in the same frame
gets no container name (h, not both[0]); a container of more than 256 items
is not named (a list that grows every step would add its whole length at
every backward call); a list subclass is read without calling its methods.

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import subprocess
import unittest

import gtutil

def record_names(name, text, adapter):
    """Record text (failing) as script `name`: (trace, completed process,
    connection, the set of names the trace holds)."""
    path = os.path.join(gtutil.tmpdir(), name)
    with open(path, "w") as f:
        f.write(text)
    env = dict(os.environ, GRADTRACE_ADAPTER=adapter)
    trace, cp = gtutil.record(path, env=env, expect_fail=True, options=("-q",))
    db = gtutil.connect(trace)
    names = {r[0] for r in gtutil.rows(
        db, "SELECT DISTINCT s.text FROM names n JOIN strings s ON s.id = n.name")}
    return trace, cp, db, names


SCRIPT = r'''
import torch


class Loud(list):
    def __iter__(self):
        raise AssertionError("iterated")

    def __getitem__(self, i):
        raise AssertionError("indexed")


x = torch.ones(3, requires_grad=True)
laterals = [torch.sigmoid(x * i) for i in range(3)]
feats = {'p3': torch.exp(x), 4: torch.tanh(x), (1, 2): torch.sin(x * 3)}
pair = (torch.sin(x), torch.cos(x))
h = torch.sigmoid(x + 1)
both = [h]
loud = Loud([torch.sigmoid(x + 2)])
big = [torch.sigmoid(x + 3)] * 257
model = torch.nn.Linear(3, 1)
params = list(model.parameters())
laterals[2].mul_(2)
loss = (sum(t.sum() for t in laterals) + sum(t.sum() for t in feats.values()) + pair[0].sum()
        + pair[1].sum() + h.sum() + list.__getitem__(loud, 0).sum() + big[0].sum()
        + model(x).sum())
loss.backward()
'''


class ContainerNames(gtutil.BothAdapters, unittest.TestCase):
    def check(self, adapter):
        trace, cp, db, names = record_names("containers.py", SCRIPT, adapter)
        self.assertNotIn("AssertionError", cp.stderr)
        for want in ("laterals[0]", "laterals[1]", "laterals[2]", "feats['p3']", "feats[4]",
                     "pair[0]", "pair[1]", "h", "loud[0]", "model.weight"):
            self.assertIn(want, names)
        for unwanted in ("both[0]", "params[0]", "big[0]"):
            self.assertNotIn(unwanted, names)
        self.assertFalse([n for n in names if n.startswith("feats[(")], names)
        text = subprocess.run([gtutil.GRADTRACE, "diagnose", trace], capture_output=True,
                              text=True).stdout
        self.assertIn("[1] laterals[2] modified in place after SigmoidBackward0", text)


GLOBALS_SCRIPT = r'''
import torch

torch.manual_seed(0)
policy = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
scale = torch.full((1,), 2.0, requires_grad=True)
unused = torch.ones(1, requires_grad=True)
shadowed = torch.ones(1, requires_grad=True)
both = [unused * 3, shadowed * 3]


def step(x):
    shadowed = torch.zeros(1) * 4
    out = policy(x) * scale + shadowed
    h = torch.sigmoid(out)
    h.mul_(2)
    h.sum().backward()


step(torch.ones(3))
'''


class GlobalNames(gtutil.BothAdapters, unittest.TestCase):
    def check(self, adapter):
        _, _, db, names = record_names("global_names.py", GLOBALS_SCRIPT, adapter)
        self.assertEqual(names, {"policy.0.weight", "policy.0.bias", "policy.2.weight",
                                 "policy.2.bias", "scale", "shadowed", "out", "h", "x"})
        # the local `shadowed`, not the global
        self.assertEqual(len(gtutil.tensors_named(db, "shadowed")), 1)
        self.assertEqual(gtutil.one(
            db, "SELECT DISTINCT t.requires_grad FROM tensors t JOIN names n ON n.tensor = t.id"
                " JOIN strings s ON s.id = n.name WHERE s.text = 'shadowed'"), 0)


if __name__ == "__main__":
    unittest.main()
