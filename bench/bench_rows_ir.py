"""Instructions per trace row, counted by callgrind: bench_rows --callgrind.

    python bench/bench_rows_ir.py [--steps 100]

Runs build/bench/bench_rows under valgrind --tool=callgrind (one round, the
engine adapter's row mix: the whole run to the trace file row by row, the
same through the row log (as the adapters record), the flight recorder with
keep_last 2, and the plain SQLite insert loop as the anchor, each mode's
writing counted on its own and the closes of file and log on their own) and
prints `name: value unit` lines: instructions per row for each mode (during
the run, at close, and both) and the ratio to the anchor. Instruction counts do not move with the load of a shared
machine, as CPU time does. Prints a note and nothing else if valgrind or
the program is missing; never fails.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    prog = os.path.join(root, "build", "bench", "bench_rows")
    valgrind = shutil.which("valgrind")
    if not valgrind or not os.access(prog, os.X_OK):
        print("note: bench_rows_ir needs valgrind and %s" % prog)
        return
    with tempfile.TemporaryDirectory(prefix="gtrows-") as tmp:
        env = dict(os.environ, TMPDIR=tmp)
        run = subprocess.run(
            [valgrind, "--tool=callgrind", "--collect-atstart=no",
             "--callgrind-out-file=" + os.path.join(tmp, "cg.%p"),
             prog, "--callgrind", str(args.steps)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        m = re.search(r"^rows_per_run: (\d+)", run.stdout, re.M)
        if run.returncode != 0 or not m:
            print("note: bench_rows under callgrind failed (status %d)" % run.returncode)
            return
        rows = int(m.group(1))
        ir = {}
        for name in os.listdir(tmp):
            if not name.startswith("cg."):
                continue
            with open(os.path.join(tmp, name), errors="replace") as f:
                text = f.read()
            what = re.search(r"^desc: Trigger: Client Request: rows:(\w+)", text, re.M)
            total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if what and total:
                ir[what.group(1)] = int(total.group(1))
    print("rows_ir_rows: %d rows" % rows)
    for mode in ("file", "log", "keep2", "anchor"):
        if mode in ir:
            print("rows_ir_%s_per_row: %.0f instructions" % (mode, ir[mode] / rows))
    for mode in ("file", "log"):
        if mode in ir and mode + "_close" in ir:
            print("rows_ir_%s_close_per_row: %.0f instructions"
                  % (mode, ir[mode + "_close"] / rows))
            print("rows_ir_%s_with_close_per_row: %.0f instructions"
                  % (mode, (ir[mode] + ir[mode + "_close"]) / rows))
    for mode in ("file", "log", "keep2"):
        if mode in ir and ir.get("anchor"):
            print("rows_ir_%s_vs_anchor: %.2f x" % (mode, ir[mode] / ir["anchor"]))


if __name__ == "__main__":
    sys.exit(main())
