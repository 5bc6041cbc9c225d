"""pytest --gradtrace: record each test, keep the traces of failing tests,
and put gradtrace's diagnosis into the failure report.

Installed with the package (entry point pytest11 "gradtrace"); from a
source tree, `pytest -p gradtrace.pytest_plugin --gradtrace`.

    pytest --gradtrace                      traces in .gradtrace/
    pytest --gradtrace --gradtrace-dir=DIR  traces in DIR

Each test's call phase (not its fixtures) is recorded into
DIR/<test id>.db. A passing test's trace is deleted; a failing test's is
kept, its path added to the report, and when gradtrace explains the failure
(diagnose finds something) the diagnosis is appended to the report as a
"gradtrace" section, exactly as `gradtrace diagnose` prints it. A test that
records by itself (with gradtrace.record) is left alone.
"""
import os
import re

import pytest

_KEY = "_gradtrace_recording"


def pytest_addoption(parser):
    group = parser.getgroup("gradtrace", "gradtrace: record autograd, explain failures")
    group.addoption("--gradtrace", action="store_true", default=False,
                    help="record each test with gradtrace; keep the traces of failing "
                         "tests and add the diagnosis to their report")
    group.addoption("--gradtrace-dir", default=None, metavar="DIR",
                    help="where the traces go (default: .gradtrace in the rootdir)")


def _trace_path(item):
    config = item.config
    base = config.getoption("gradtrace_dir") or os.path.join(str(config.rootpath),
                                                             ".gradtrace")
    name = re.sub(r"[^A-Za-z0-9_.\[\]-]+", "_", item.nodeid).strip("_") or "test"
    return os.path.join(base, name[:200] + ".db")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not item.config.getoption("gradtrace"):
        yield
        return
    import gradtrace
    path = _trace_path(item)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rec = gradtrace.Recording(path, overwrite=True, argv=["pytest", item.nodeid])
    try:
        rec.start()
    except (RuntimeError, OSError) as e:
        # a recording already running is the test's own (with
        # gradtrace.record): leave it alone; anything else is worth a word
        if "already running" not in str(e):
            item.warn(pytest.PytestWarning("gradtrace: not recording %s: %s"
                                           % (item.nodeid, e)))
        rec = None
    setattr(item, _KEY, (rec, path))
    outcome = yield
    if rec is not None:
        exc = outcome.excinfo[1] if outcome.excinfo else None
        if exc is None:
            rec.stop("ok")
        elif isinstance(exc, KeyboardInterrupt):
            rec.stop("signal", -1, 2)
        else:
            rec.stop("exception", 1, 0, exc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "call" or not hasattr(item, _KEY):
        return
    rec, path = getattr(item, _KEY)
    delattr(item, _KEY)
    if rec is None:
        return
    report = outcome.get_result()
    if not report.failed:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(path + suffix)
            except OSError:
                pass
        return
    text = ""
    try:
        import _gtinspect
        status, out = _gtinspect.diagnose(path, text=True)
        if status == 1:
            text = out
    except Exception:
        pass
    text += "trace: %s (gradtrace diagnose %s)\n" % (path, path)
    report.sections.append(("gradtrace", text))
