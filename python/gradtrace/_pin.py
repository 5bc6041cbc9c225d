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


def _release(version):
    """The public release of a torch version: 2.13.0 of 2.13.0+cpu."""
    return version.split("+", 1)[0]


def check(torch_version):
    """Raise RuntimeError if torch_version is not the release gradtrace was
    built for; return None otherwise. The local label (+cpu, +cu130) is not
    compared: the CPU and CUDA builds of one release share libtorch's CPU
    side, the only part gradtrace's extensions use, so a wheel built against
    2.13.0+cpu serves PyPI's 2.13.0 too."""
    want = built_for()
    if want is None or _release(torch_version) == _release(want):
        return
    raise RuntimeError(
        "gradtrace was built for torch %s but this environment has torch %s: rebuild "
        "gradtrace for it with pip install --force-reinstall --no-deps "
        "<gradtrace's source directory>" % (want, torch_version))
