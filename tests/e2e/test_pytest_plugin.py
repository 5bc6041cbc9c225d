"""pytest --gradtrace, tested with pytester: every test is recorded, only
failing tests keep their trace, and a failure gradtrace explains gets the
diagnosis in its report (the same text as `gradtrace diagnose`).

Run by ctest as a script: it runs pytest on itself with the pytester
plugin. The inner runs are subprocesses with the plugin loaded by -p (an
installed package registers it through its pytest11 entry point, which
tests/e2e/test_pip_wheel.py covers).
"""
import os
import sys

import pytest

pytest_plugins = ["pytester"]

TESTS = '''
import torch

def test_inplace_breaks_backward():
    x = torch.randn(4, requires_grad=True)
    h = torch.sigmoid(x)
    h.relu_()
    h.sum().backward()

def test_passes():
    x = torch.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]

def test_fails_otherwise():
    x = torch.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]
'''


def run(pytester, *args):
    pytester.makepyfile(test_model=TESTS)
    return pytester.runpytest_subprocess("-p", "gradtrace.pytest_plugin", *args)


def test_keeps_failing_traces_and_explains(pytester):
    result = run(pytester, "--gradtrace", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    traces = pytester.path / ".gradtrace"
    kept = sorted(p.name for p in traces.iterdir())
    assert kept == ["test_model.py_test_fails_otherwise.db",
                    "test_model.py_test_inplace_breaks_backward.db"], kept
    # the explained failure carries the diagnosis in its report section
    section = out[out.index("test_inplace_breaks_backward"):]
    section = section[section.index("gradtrace"):]
    assert "h modified in place after SigmoidBackward0 saved it as result" in section
    diag = pytester.run(os.environ.get("GRADTRACE", "gradtrace"), "diagnose",
                        "--color", "never",
                        str(traces / "test_model.py_test_inplace_breaks_backward.db"))
    assert diag.ret == 1
    body = [ln for ln in diag.stdout.lines if ln.startswith(("[1]", "    saved at"))]
    assert body and all(ln in out for ln in body), (body, out)
    # the unexplained failure has its trace named, no diagnosis
    other = out[out.index("_ test_fails_otherwise _"):]
    assert "trace: " in other and "finding" not in other


def test_off_by_default(pytester):
    result = run(pytester, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    assert not (pytester.path / ".gradtrace").exists()
    assert "gradtrace" not in result.stdout.str()


def test_gradtrace_dir(pytester):
    result = run(pytester, "--gradtrace", "--gradtrace-dir", "traces",
                 "-k", "inplace", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert [p.name for p in (pytester.path / "traces").iterdir()] == [
        "test_model.py_test_inplace_breaks_backward.db"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "pytester", "-p", "no:cacheprovider"]))
