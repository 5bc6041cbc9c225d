"""What the engine adapter costs as `pip install .` builds it, beside the
source build's (build/python), measured in the same run: the two are the
same code, so the figures should agree.

    python bench/bench_pip.py [--rounds 5] [--steps 400] [--models mlp,cnn]

The pip-installed gradtrace lives in a venv, build/bench-pip-venv, over this
interpreter's site-packages (the same torch, the same files); it is
(re)installed with `pip install .` (pip's isolated build) when the source
tree's commit differs from the one it was built from. Each round runs
bench/bench_overhead.py once per side (modes plain and engine, one round,
its own process), the sides alternating and their order swapped every round
(the machine is shared; wall time drifts); each figure is the median of the
rounds. Prints `name: value unit` lines; never fails.
"""
import argparse
import hashlib
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
VENV = os.path.join(SOURCE, "build", "bench-pip-venv")


def commit():
    """The source tree's state: its commit, and a hash of its changes when
    it has any (an installed package built from another state is
    rebuilt)."""
    def git(*args):
        return subprocess.run(["git", "-C", SOURCE] + list(args), capture_output=True,
                              text=True).stdout
    head = git("rev-parse", "HEAD").strip() or "unknown"
    diff = git("diff", "HEAD")
    return head + ("+" + hashlib.sha1(diff.encode()).hexdigest()[:12] if diff else "")


def pip_python():
    """The venv's interpreter, gradtrace pip-installed into it from this
    tree; None (after saying why) if that cannot be done."""
    py = os.path.join(VENV, "bin", "python")
    stamp = os.path.join(VENV, "gradtrace-commit")
    want = commit()
    have = open(stamp).read().strip() if os.path.exists(stamp) else None
    if have == want and os.path.exists(py):
        return py
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    steps = []
    if not os.path.exists(py):
        steps.append([sys.executable, "-m", "venv", "--system-site-packages", VENV])
    steps.append([py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                  "-C", "build-dir=" + os.path.join(SOURCE, "build", "bench-pip-build"),
                  SOURCE])
    for cmd in steps:
        cp = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if cp.returncode != 0:
            print("bench_pip: %s failed: %s" % (" ".join(cmd[:4]),
                                                (cp.stderr or cp.stdout)[-500:]))
            return None
    with open(stamp, "w") as f:
        f.write(want + "\n")
    return py


def side_run(side, py, argv):
    """Run py argv for side: the source side with the source tree's
    package (PYTHONPATH, as bench/run sets it), the pip side outside the
    tree with no PYTHONPATH (the installed package)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    if side == "source":
        env["PYTHONPATH"] = os.environ.get("PYTHONPATH") or os.pathsep.join(
            os.path.join(SOURCE, d) for d in ("python", "build/python"))
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([py] + argv, capture_output=True, text=True, env=env,
                          cwd=SOURCE if side == "source" else "/")


def one_round(side, py, args):
    """{figure name: value} of one bench_overhead.py round on side."""
    cp = side_run(side, py, [os.path.join(HERE, "bench_overhead.py"), "--rounds", "1",
                             "--steps", str(args.steps), "--models", args.models,
                             "--modes", "engine"])
    got = {}
    for line in cp.stdout.splitlines():
        m = re.match(r"^(\w+): ([0-9.]+) ms/step$", line)
        if m:
            got[m.group(1)] = float(m.group(2))
    if cp.returncode != 0:
        print("bench_pip: %s side failed: %s" % (side, cp.stderr[-500:]))
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--models", default="mlp,cnn")
    args = ap.parse_args()
    pip_py = pip_python()
    if pip_py is None:
        return
    sides = {"source": sys.executable, "pip": pip_py}
    # what each side imports: the installed package, the source tree's
    probe = ("import torch, gradtrace, _gradtrace_engine as e; "
             "print(gradtrace.__version__, gradtrace.__file__, e.__file__)")
    for side, py in sides.items():
        cp = side_run(side, py, ["-c", probe])
        print("%s_package: %s" % (side, cp.stdout.strip() or
                                  "no engine adapter: " + cp.stderr.strip()[-200:]))
    got = {s: [] for s in sides}
    for r in range(args.rounds):
        for side in (("source", "pip") if r % 2 == 0 else ("pip", "source")):
            got[side].append(one_round(side, sides[side], args))
    for model in args.models.split(","):
        ratios = {}
        for side in sides:
            for clock in ("cpu", "wall"):
                plain = [g.get("%s_plain_%s" % (model, clock)) for g in got[side]]
                eng = [g.get("%s_engine_%s" % (model, clock)) for g in got[side]]
                pairs = [(e, p) for e, p in zip(eng, plain) if e and p]
                if not pairs:
                    print("%s_%s_engine: not measured (the engine adapter did not "
                          "record)" % (side, model))
                    break
                med_e = statistics.median(e for e, _ in pairs)
                med_r = statistics.median(e / p for e, p in pairs)
                ratios[side, clock] = med_r
                print("%s_%s_engine_%s: %.3f ms/step" % (side, model, clock, med_e))
                print("%s_%s_engine_%s_vs_plain: %.2f x" % (side, model, clock, med_r))
        for clock in ("cpu", "wall"):
            if ("pip", clock) in ratios and ("source", clock) in ratios:
                print("%s_engine_%s_overhead_pip_vs_source: %.2f x" % (
                    model, clock, ratios["pip", clock] / ratios["source", clock]))


if __name__ == "__main__":
    main()
