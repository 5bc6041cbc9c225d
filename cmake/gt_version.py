"""The Python package's version, for scikit-build-core (pyproject.toml,
tool.scikit-build.metadata.version): CMakeLists.txt's project(gradtrace
VERSION x.y.z), plus the local label in GT_WHEEL_LOCAL_VERSION when set
(scripts/wheel: x.y.z+torch2.13.0, the torch release a binary wheel is
for). The build passes the result to CMake (SKBUILD_PROJECT_VERSION_FULL),
which compiles it into the programs and gradtrace/_build.py."""
import os
import re


def dynamic_metadata(field, settings=None):
    """The version string; raises RuntimeError if CMakeLists.txt has none or
    the label is not a PEP 440 local version."""
    if field != "version":
        raise RuntimeError("gt_version provides the version only, not %r" % field)
    with open("CMakeLists.txt", encoding="utf-8") as f:
        m = re.search(r"project\(gradtrace VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("no project(gradtrace VERSION x.y.z) in CMakeLists.txt")
    local = os.environ.get("GT_WHEEL_LOCAL_VERSION", "").strip()
    if not local:
        return m.group(1)
    if not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9]+)*", local):
        raise RuntimeError("GT_WHEEL_LOCAL_VERSION=%r is not a local version label "
                           "(letters, digits and dots)" % local)
    return m.group(1) + "+" + local
