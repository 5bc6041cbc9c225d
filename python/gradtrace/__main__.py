"""The `gradtrace` command of an installed package, and `python -m gradtrace`.

pip installs the inspector (a C program) inside the package, at
gradtrace/_bin/gradtrace, and this launcher as the `gradtrace` console
script: it replaces itself with the C program, telling it which interpreter
to record with (this one, whose environment has gradtrace and its torch)
unless --python or GRADTRACE_PYTHON says otherwise.
"""
import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "gradtrace")


def command():
    """The path of the inspector program, or None in a source tree (where it
    is build/bin/gradtrace)."""
    return _BIN if os.access(_BIN, os.X_OK) else None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    exe = command()
    if exe is None:
        sys.stderr.write("gradtrace: the gradtrace program is not installed beside %s "
                         "(a source tree runs build/bin/gradtrace; install the "
                         "package with pip install .)\n" % os.path.dirname(_BIN))
        return 2
    env = dict(os.environ)
    env["GRADTRACE_LAUNCHER_PYTHON"] = sys.executable
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(exe, [exe] + argv, env)
    except OSError as e:
        sys.stderr.write("gradtrace: cannot run %s: %s\n" % (exe, e.strerror))
        return 2


if __name__ == "__main__":
    sys.exit(main())
