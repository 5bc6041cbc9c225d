"""The binary wheel (scripts/wheel) as a user without Graphviz, SQLite or a
compiler meets it: installed into a fresh venv that has torch 2.13.0, run
with LD_LIBRARY_PATH unset and no GVBINDIR, it records the seed through the
engine adapter, diagnoses it and renders DOT, SVG and PNG; every shared
object it installs resolves (ldd) to nothing outside the wheel but the
manylinux policy's libraries, libtorch's own and libpython; and no Graphviz
file of the system is loaded while it renders.

    python3 tests/wheel/test_wheel.py dist/gradtrace-...manylinux...whl

(scripts/test builds the wheel with scripts/wheel and runs this as its own
stage). Prints the wheel's size and the installed package's.
"""
import glob
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
import gtutil  # noqa: E402
SEED = os.path.join(SOURCE, "examples", "seed_class_weights.py")
WHEEL = None
TMP = None
VENV = None
SITE = None

# The libraries the manylinux policies let a wheel take from the system
# (auditwheel 6.8's lib_whitelist, the same from manylinux_2_28 to
# manylinux_2_39), and the dynamic loader.
POLICY = {
    "libGL.so.1", "libICE.so.6", "libSM.so.6", "libX11.so.6", "libXext.so.6",
    "libXrender.so.1", "libanl.so.1", "libatomic.so.1", "libc.so.6", "libdl.so.2",
    "libexpat.so.1", "libgcc_s.so.1", "libglib-2.0.so.0", "libgobject-2.0.so.0",
    "libgthread-2.0.so.0", "libm.so.6", "libmvec.so.1", "libnsl.so.1",
    "libpthread.so.0", "libresolv.so.2", "librt.so.1", "libstdc++.so.6", "libutil.so.1",
    "libz.so.1", "ld-linux-x86-64.so.2", "linux-vdso.so.1",
}


def clean_env(**extra):
    """The user's environment: nothing of the build tree, no library path,
    no Graphviz plugin directory, the venv's bin first on PATH."""
    return gtutil.installed_env(VENV, drop=("LD_LIBRARY_PATH", "GVBINDIR", "LD_PRELOAD",
                                            "GRADTRACE_ADAPTER"), **extra)


def run(cmd, check=True, timeout=900, env=None):
    return gtutil.run_checked(cmd, check=check, timeout=timeout, cwd=TMP,
                              env=env or clean_env())


def bin_(name):
    return os.path.join(VENV, "bin", name)


def setUpModule():
    global TMP, VENV, SITE
    TMP = tempfile.mkdtemp(prefix="gtwheel-")
    VENV = os.path.join(TMP, "venv")
    subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    run([bin_("python"), "-m", "pip", "install", "-q", "torch==2.13.0"], timeout=1800)
    run([bin_("python"), "-m", "pip", "install", "-q", WHEEL])
    SITE = run([bin_("python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
               ).stdout.strip()
    # what lands in site-packages (the .data/ entries, shell completion, go
    # to the environment's share/)
    size = sum(os.path.getsize(os.path.join(SITE, n))
               for n in zipfile.ZipFile(WHEEL).namelist()
               if not n.endswith("/") and ".data/" not in n)
    print("wheel_size: %d KiB" % (os.path.getsize(WHEEL) // 1024))
    print("wheel_installed_size: %d KiB" % (size // 1024))


def tearDownModule():
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


class Wheel(unittest.TestCase):
    def test_tag_names_the_torch_release(self):
        torch = run([bin_("python"), "-c", "import torch; print(torch.__version__)"]
                    ).stdout.strip().split("+")[0]
        name = os.path.basename(WHEEL)
        self.assertRegex(name, r"^gradtrace-[0-9.]+\+torch%s-cp3\d+-cp3\d+-manylinux_2_\d+_"
                         % torch.replace(".", r"\."))

    def test_one_version(self):
        """pip, gradtrace.__version__, `gradtrace --version` and `gradtrace
        info` say the same version; --version names the engine's torch."""
        name = os.path.basename(WHEEL)
        want = name.split("-")[1]
        got = run([bin_("python"), "-c", "import gradtrace; print(gradtrace.__version__)"]
                  ).stdout.strip()
        self.assertEqual(got, want)
        show = run([bin_("python"), "-m", "pip", "show", "gradtrace"]).stdout
        self.assertIn("Version: %s\n" % want, show)
        out = run([bin_("gradtrace"), "--version"]).stdout.splitlines()
        self.assertRegex(out[0], r"^gradtrace %s \(trace schema \d+\)$" % want.replace("+", r"\+"))
        self.assertRegex(out[1], r"^adapters: engine \(torch 2\.13\.0[+a-z0-9]*\), dispatch$")

    def test_libtorch_left_out(self):
        names = zipfile.ZipFile(WHEEL).namelist()
        libs = [n for n in names if n.startswith("gradtrace.libs/")]
        self.assertTrue(any("libgvc" in n for n in libs), libs)
        self.assertTrue(any("libgvplugin_pango" in n for n in libs), libs)
        self.assertTrue(any("libsqlite3" in n for n in libs), libs)
        self.assertFalse([n for n in libs if os.path.basename(n).startswith(
            ("libtorch", "libc10", "libpython"))], libs)

    def test_every_shared_object_resolves_inside(self):
        """Every ELF file the wheel installed: each library it names
        (DT_NEEDED, readelf) resolves (ldd) into the wheel (gradtrace.libs,
        or beside the modules), to the venv's torch, or is one the
        manylinux policy allows or libpython; ldd finds every library. (The
        policy libraries' own dependencies are the system's: libgobject's
        libffi.)"""
        files = [os.path.join(SITE, n) for n in zipfile.ZipFile(WHEEL).namelist()
                 if ".dist-info/" not in n and ".data/" not in n and not n.endswith("/")]
        elves = []
        for f in files:
            with open(f, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    elves.append(f)
        self.assertGreater(len(elves), 10, elves)  # modules, the command, the libs
        inside = (os.path.join(SITE, "gradtrace.libs") + os.sep,
                  os.path.join(SITE, "torch", "lib") + os.sep)
        bad = []
        for f in elves:
            dyn = run(["readelf", "-d", f]).stdout
            needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", dyn)
            where = {}
            for line in run(["ldd", f]).stdout.splitlines():
                parts = line.split()
                if "not found" in line:
                    bad.append((os.path.basename(f), line.strip()))
                elif len(parts) > 2 and parts[1] == "=>":
                    where[parts[0]] = parts[2]
            for lib in needed:
                path = os.path.normpath(where[lib]) if lib in where else ""
                if lib in POLICY or lib.startswith("libpython3"):
                    continue
                if not (path.startswith(inside) or os.path.dirname(path) == SITE):
                    bad.append((os.path.basename(f), "%s => %s" % (lib, path or "?")))
        self.assertEqual(bad, [], "\n".join("%s: %s" % b for b in bad))


class Installed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(dir=TMP)
        cls.trace = os.path.join(cls.dir, "seed.db")
        cls.cp = run([bin_("gradtrace"), "record", "-o", cls.trace, "--", SEED],
                     check=False)

    def test_record_through_the_engine(self):
        self.assertEqual(self.cp.returncode, 1, self.cp.stderr)
        self.assertIn("RuntimeError: one of the variables needed", self.cp.stderr)
        db = sqlite3.connect(self.trace)
        options, version = db.execute("SELECT options, gradtrace_version FROM run").fetchone()
        self.assertEqual(json.loads(options)["adapter"], "engine")
        self.assertEqual(version, os.path.basename(WHEEL).split("-")[1])
        info = run([bin_("gradtrace"), "info", self.trace]).stdout
        self.assertIn("written by gradtrace %s)" % version, info)

    def test_diagnose(self):
        cp = run([bin_("gradtrace"), "diagnose", self.trace, "--json"], check=False)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        doc = json.loads(cp.stdout)
        self.assertEqual(doc["findings"][0]["kind"], "inplace_invalidated_saved")
        self.assertEqual(doc["findings"][0]["saved"]["names"], ["class_weights"])

    def test_schema_and_guide_installed(self):
        """sql --help names the installed SCHEMA.md, and the user guide is
        beside it."""
        out = run([bin_("gradtrace"), "sql", "--help"]).stdout
        path = out.split("queries, in\n", 1)[1].split("\n", 1)[0].strip()
        self.assertTrue(path.startswith(SITE), path)
        with open(path, encoding="utf-8") as f:
            self.assertIn("saved_tensors", f.read())
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(path), "guide.md")))

    def render(self, fmt, **env):
        out = os.path.join(self.dir, "seed-%s-%d.%s" % (fmt, len(env), fmt))
        cp = run([bin_("gradtrace"), "graph", self.trace, "--format", fmt, "-o", out],
                 env=clean_env(**env))
        with open(out, "rb") as f:
            return f.read(), cp

    def test_dot(self):
        dot, _ = self.render("dot")
        self.assertTrue(dot.startswith(b"digraph"), dot[:40])
        self.assertIn(b"class_weights", dot)

    def test_svg(self):
        svg, _ = self.render("svg")
        root = ET.fromstring(svg)
        self.assertTrue(root.tag.endswith("svg"), root.tag)
        self.assertIn(b"class_weights", svg)
        self.assertIn(b"NllLossBackward0", svg)

    def test_png(self):
        png, _ = self.render("png")
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(len(png), 2000)

    def test_no_system_graphviz(self):
        """With GVBINDIR naming an empty directory (where gvc would look for
        plugins and find none) the wheel still renders, and the loader opens
        no Graphviz library of the system (LD_DEBUG=libs)."""
        empty = tempfile.mkdtemp(dir=self.dir)
        for fmt in ("svg", "png"):
            data, cp = self.render(fmt, GVBINDIR=empty, LD_DEBUG="libs")
            self.assertTrue(data.startswith((b"<?xml", b"\x89PNG")), data[:20])
            loaded = [ln for ln in cp.stderr.splitlines() if "calling init:" in ln]
            self.assertTrue([ln for ln in loaded if "libgvc" in ln], cp.stderr[-2000:])
            system = [ln for ln in loaded
                      if ("libgvc" in ln or "libgvplugin" in ln or "libcgraph" in ln
                          or "libsqlite3" in ln) and "gradtrace.libs" not in ln]
            self.assertEqual(system, [])


if __name__ == "__main__":
    if len(sys.argv) < 2 or not sys.argv[1].endswith(".whl"):
        sys.exit("usage: test_wheel.py WHEEL [unittest options]")
    WHEEL = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
