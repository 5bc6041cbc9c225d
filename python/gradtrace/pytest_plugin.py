"""pytest --gradtrace: record each test, keep the traces of failing tests,
and put gradtrace's diagnosis into the failure report.

Installed with the package (entry point pytest11 "gradtrace"); from a
source tree, `pytest -p gradtrace.pytest_plugin --gradtrace`.

    pytest --gradtrace                      traces in .gradtrace/
    pytest --gradtrace --gradtrace-dir=DIR  traces in DIR
    pytest --gradtrace --gradtrace-fixtures record the fixtures too

Each test's call phase (with --gradtrace-fixtures, its setup too: the
fixtures it uses) is recorded into DIR/<test id>.db. A forward run in a
fixture that is not recorded is outside the recording: the diagnosis
says so in a note. A passing test's trace is deleted; a failing test's is
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
    group.addoption("--gradtrace-fixtures", action="store_true", default=False,
                    help="with --gradtrace, record each test's fixtures (its setup) too, "
                         "so that tensors a fixture makes are in the trace")


def _trace_path(item):
    config = item.config
    base = config.getoption("gradtrace_dir") or os.path.join(str(config.rootpath),
                                                             ".gradtrace")
    name = re.sub(r"[^A-Za-z0-9_.\[\]-]+", "_", item.nodeid).strip("_") or "test"
    return os.path.join(base, name[:200] + ".db")


def _start(item):
    """Start recording item into its trace; the recording, or None when the
    test records by itself (or recording cannot start: a warning says why).
    Remembered on the item for the report."""
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
    return rec


def _stop(item, outcome):
    """Stop item's recording as the phase whose outcome this is ended; the
    error's traceback loses gradtrace's frames (the backward wrappers)."""
    rec = getattr(item, _KEY, (None, None))[0]
    if rec is None or not rec.is_on():
        return
    from gradtrace import _recording
    exc = outcome.excinfo[1] if outcome.excinfo else None
    if exc is None:
        rec.stop("ok")
        return
    _recording.strip_frames(exc, _recording.own_frame)
    if isinstance(exc, KeyboardInterrupt):
        rec.stop("signal", -1, 2)
    else:
        rec.stop("exception", 1, 0, exc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    if not (item.config.getoption("gradtrace") and
            item.config.getoption("gradtrace_fixtures")):
        yield
        return
    _start(item)
    outcome = yield
    if outcome.excinfo:  # a fixture failed: the test does not run
        _stop(item, outcome)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not item.config.getoption("gradtrace"):
        yield
        return
    if not hasattr(item, _KEY):
        _start(item)
    outcome = yield
    _stop(item, outcome)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when not in ("setup", "call") or not hasattr(item, _KEY):
        return
    if call.when == "setup" and not call.excinfo:
        return  # the test runs on, recorded
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
            # pytest's report shows the error's message already
            from gradtrace._report import without_message
            text = without_message(out)
    except Exception:
        pass
    text += "trace: %s (gradtrace diagnose %s)\n" % (path, path)
    report.sections.append(("gradtrace", text))
