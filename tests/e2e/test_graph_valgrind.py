"""One `gradtrace graph` render of each format under valgrind: no invalid
reads or writes, and no leak whose stack runs through gradtrace's own code
without passing through Graphviz's layout/font stack (Graphviz 2.42, pango,
cairo and fontconfig keep caches that valgrind reports as lost; those are
listed, not failed).

In a sanitizer build (GT_SANITIZE=ON in the build's CMakeCache.txt) valgrind
cannot run the binary; there LeakSanitizer checks every e2e run instead, so
this test says so and passes.

Env: GRADTRACE, GT_BUILD_DIR, GT_SOURCE_DIR.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from test_graph_cli import awkward_trace  # noqa: E402

GRADTRACE = os.environ.get("GRADTRACE", "gradtrace")
BUILD = os.environ.get("GT_BUILD_DIR", "")

# A leak record is Graphviz's own when its stack passes through one of these.
THIRD_PARTY = re.compile(
    r"libgvplugin_\w+\.so|libgvc\.so|libpango|libcairo|libfontconfig|libglib|"
    r"libharfbuzz|libfreetype|libexpat")


def sanitizer_build():
    cache = os.path.join(BUILD, "CMakeCache.txt")
    if not BUILD or not os.path.exists(cache):
        return False
    with open(cache, encoding="utf-8", errors="replace") as f:
        return bool(re.search(r"^GT_(SANITIZE|TSAN):BOOL=ON$", f.read(), re.M))


def records(log):
    """The valgrind error/leak records of a log, as lists of lines."""
    out, cur = [], []
    for line in log.splitlines():
        body = re.sub(r"^==\d+== ?", "", line)
        if not body.strip():
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(body)
    if cur:
        out.append(cur)
    return out


class GraphValgrind(unittest.TestCase):
    def test_one_render_each_format(self):
        if sanitizer_build():
            print("sanitizer build: LeakSanitizer checks gradtrace graph instead")
            return
        valgrind = shutil.which("valgrind")
        self.assertIsNotNone(valgrind, "valgrind is not installed (debian: valgrind)")
        with tempfile.TemporaryDirectory(prefix="gt_e2e_graph_vg_") as tmp:
            trace = os.path.join(tmp, "awkward.db")
            awkward_trace(trace)
            for fmt in ("dot", "svg", "png"):
                with self.subTest(format=fmt):
                    log = os.path.join(tmp, f"vg.{fmt}.log")
                    r = subprocess.run(
                        [valgrind, "--leak-check=full", "--num-callers=60",
                         f"--log-file={log}", GRADTRACE, "graph", trace, "-o",
                         os.path.join(tmp, f"g.{fmt}")],
                        capture_output=True, text=True, timeout=600)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    with open(log, encoding="utf-8", errors="replace") as f:
                        text = f.read()
                    ours, theirs = [], 0
                    for rec in records(text):
                        head = rec[0]
                        if head.startswith(("Invalid", "Conditional jump",
                                            "Use of uninitialised", "Syscall param",
                                            "Mismatched free", "Source and destination")):
                            ours.append(rec)
                        elif "definitely lost" in head or "indirectly lost" in head:
                            if any(THIRD_PARTY.search(line) for line in rec):
                                theirs += 1
                            else:
                                ours.append(rec)
                    self.assertEqual(ours, [], "\n\n".join("\n".join(r) for r in ours))
                    if fmt == "dot":
                        # No layout, no fonts: nothing lost at all.
                        self.assertNotIn("definitely lost in", text)
                    print(f"{fmt}: clean; {theirs} leak records inside Graphviz/fonts")


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=[sys.argv[0]])
