"""The torch release an installed gradtrace was built for.

`pip install .` compiles gradtrace's extensions in the environment that has
torch, without touching that torch, and writes its release into
gradtrace/_build.py. Recording under another release is refused with the
command that rebuilds gradtrace for it: code compiled against one libtorch
must not run inside another. A source-tree build (no _build.py) or a build
that found no torch accepts any torch.
"""


def built_for():
    """The torch release this installation was built against, or None."""
    try:
        from . import _build
    except ImportError:
        return None
    return _build.TORCH_VERSION or None


def check(torch_version):
    """Raise RuntimeError if torch_version is not the release gradtrace was
    built for; return None otherwise."""
    want = built_for()
    if want is None or torch_version == want:
        return
    raise RuntimeError(
        "gradtrace was built for torch %s but this environment has torch %s: rebuild "
        "gradtrace for it with pip install --force-reinstall --no-deps "
        "<gradtrace's source directory>" % (want, torch_version))
