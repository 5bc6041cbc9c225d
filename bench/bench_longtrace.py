"""How fast the inspector reads long traces recorded from a real loop.

    python bench/bench_longtrace.py [--steps 50000] [--small-steps 5000] [--rounds 3]

Three traces of bench/longtrace_loop.py (a linear layer trained with SGD,
about 22 ops a step), recorded with `gradtrace record` once and kept under
build/bench/ (delete them to record again):
  long     STEPS steps recorded whole and closed (50,000 steps: 1.1 M ops,
           about 155 MB, 50,000 backward calls)
  killed   SMALL steps, the process killed with SIGKILL before it could
           close the trace: no close-time indexes. The first command on it
           finishes it (creates the indexes, once); each figure is that
           first command, on a fresh copy.
  live     SMALL steps, the recording still running (paused) while the
           commands read it: the file must not change, so they read an
           indexed private copy.
For each trace and command (info, info --json, history, diagnose, graph,
sql) it prints the command's wall time and CPU time (user + system of the
child), beside the anchor `sqlite3 TRACE "select count(*) from ops"` (the
sqlite3 command, else Python's sqlite3) timed right before it, and their
ratio. Wall time on a shared machine is noisy: CPU time is the steadier
figure. The median of the rounds is printed. Never fails on a figure.
"""
import argparse
import os
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
BUILD = os.environ.get("GT_BUILD_DIR", os.path.join(SOURCE, "build"))
GRADTRACE = os.environ.get("GRADTRACE", os.path.join(BUILD, "bin", "gradtrace"))
LOOP = os.path.join(HERE, "longtrace_loop.py")
OUT = os.path.join(BUILD, "bench")


def record(path, *args, wait=True):
    """Start `gradtrace record -o path -- longtrace_loop.py args`."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [GRADTRACE, "record", "--python", sys.executable, "-o", path, "--force", "--",
           LOOP, *map(str, args)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         text=True)
    if wait:
        p.communicate()
    return p


def long_trace(steps):
    path = os.path.join(OUT, "longtrace_%d.db" % steps)
    if not os.path.exists(path):
        print("(recording %d steps into %s once; this takes minutes)" % (steps, path),
              flush=True)
        record(path + ".tmp", steps)
        os.replace(path + ".tmp", path)
    return path


def killed_trace(steps):
    path = os.path.join(OUT, "longtrace_killed_%d.db" % steps)
    if not os.path.exists(path):
        tmp = path + ".tmp"
        record(tmp, steps, "--kill")
        # the committed batches, write-ahead log included, as a kill leaves them
        con = sqlite3.connect(tmp)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        os.replace(tmp, path)
        for side in ("-wal", "-shm"):
            if os.path.exists(tmp + side):
                os.unlink(tmp + side)
    return path


def timed(argv):
    """(wall s, child cpu s) of running argv, output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def anchor(path):
    if shutil.which("sqlite3"):
        return timed(["sqlite3", path, "select count(*) from ops"])
    return timed([sys.executable, "-c", "import sqlite3,sys; sqlite3.connect(sys.argv[1])"
                  ".execute('select count(*) from ops').fetchone()", path])


def commands(path):
    return [
        ("info", ["info", path]),
        ("info_json", ["info", "--json", path]),
        ("history", ["history", path, "loss"]),
        ("diagnose", ["diagnose", path]),
        ("graph", ["graph", path, "-f", "dot", "-o", os.devnull]),
        ("sql", ["sql", path, "select count(*) from op_log"]),
    ]


def bench(label, path, rounds, fresh=None):
    """Time each command on `path` (a fresh copy of `fresh` before each
    command if given), beside the anchor on the same file."""
    res = {}
    for _ in range(rounds):
        for name, args in commands(path):
            if fresh:
                shutil.copyfile(fresh, path)
            a = anchor(path)
            if fresh:
                shutil.copyfile(fresh, path)  # the anchor read it; start clean
            c = timed([GRADTRACE] + args)
            res.setdefault(name, []).append((c, a))
    f = fresh or path
    size = os.path.getsize(f) + (os.path.getsize(f + "-wal") if os.path.exists(f + "-wal")
                                 else 0)
    print("longtrace_%s_file: %.1f MB" % (label, size / 1e6))
    for name, runs in res.items():
        wall = statistics.median(r[0][0] for r in runs)
        cpu = statistics.median(r[0][1] for r in runs)
        awall = statistics.median(r[1][0] for r in runs)
        acpu = statistics.median(r[1][1] for r in runs)
        print("longtrace_%s_%s: %.3f s wall, %.3f s cpu (anchor sqlite3 count(*): "
              "%.3f s wall, %.3f s cpu; ratio %.1f wall, %.1f cpu)"
              % (label, name, wall, cpu, awall, acpu, wall / max(awall, 1e-3),
                 cpu / max(acpu, 1e-3)))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50000)
    ap.add_argument("--small-steps", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    if not os.path.exists(GRADTRACE):
        print("bench_longtrace: %s not built" % GRADTRACE)
        return 0
    os.makedirs(OUT, exist_ok=True)

    bench("long", long_trace(opts.steps), opts.rounds)

    orig = killed_trace(opts.small_steps)
    work = os.path.join(OUT, "longtrace_killed_work.db")
    bench("killed", work, opts.rounds, fresh=orig)
    os.unlink(work)

    live = os.path.join(OUT, "longtrace_live.db")
    go = live + ".go"
    if os.path.exists(go):
        os.unlink(go)
    p = record(live, opts.small_steps, "--pause", go, wait=False)
    try:
        # the loop has ended (and waits) once it printed its loss
        p.stdout.readline()
        bench("live", live, opts.rounds)
    finally:
        open(go, "w").close()
        try:
            p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
        for f in (go, live, live + "-wal", live + "-shm"):
            if os.path.exists(f):
                os.unlink(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
