"""What recording costs, in instructions: bench_overhead.py's loops counted by callgrind.

    python bench/bench_overhead_ir.py [--steps N] [--warm N] [--models mlp,cnn,block]
                                      [--modes plain,engine,engine_fp_off,keep2]
                                      [--keep DIR]

CPU time on a shared machine moves with the load (bench_overhead.py's ratios
move by about 0.15 between runs on a loaded 2-core host); instruction counts do not. Each
model is trained (SGD, one thread) under valgrind --tool=callgrind with
instrumentation off while Python and torch start and the loop warms up
(3 steps, then --warm steps recorded, all from the same line: by default
100 for the MLP and CNN, 20 for the transformer block); it
is switched on (callgrind_control) for exactly the measured steps (--steps:
by default 60, 10 for the block, whose step is some 40 times the MLP's), every
thread counted: the training thread and, in engine mode, the fold thread
persisting what was captured (the trace's close is not counted). Prints
`name: value unit` lines: instructions per step for each mode, and each
recording mode's ratio to plain, the anchor counted in the same run, and
with engine and engine_fp_off (check_saved="off") both run, what the
default fingerprints add to recording (`_fp_cost_ir`, engine over
engine_fp_off). Prints
a note and nothing else when valgrind is missing; never fails.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time


def child(mode, model_name, steps, flag, warm):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_overhead as b
    import gradtrace
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, x, y = b.MODELS[model_name]()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rec = None
    # every phase trains from this one line, as a training loop does: the
    # window's ops have the Python stacks the warm-up's had (a stack's first
    # sighting, described once, is no per-step cost), and the recorder's
    # maps, free lists and buffers are past their growth
    for phase, n in enumerate((3, warm, steps)):
        if phase == 1 and mode != "plain":
            os.environ["GRADTRACE_ADAPTER"] = "dispatch" if mode == "dispatch" else "engine"
            rec = gradtrace.record(flag + ".db", keep_last=2 if mode == "keep2" else 0,
                                   check_saved="off" if mode == "engine_fp_off" else None)
            rec.start()
        if phase == 2:
            # the fold thread persists on its own clock: fold what came
            # before the window first, and the window's steps before it
            # closes, so the count is the steps' whole cost and nothing else
            # (without it a lagging fold moved up to 0.4 M instructions a
            # step out of the window)
            if rec is not None:
                rec._rec.flush()
            open(flag + ".ready", "w").close()
            while not os.path.exists(flag + ".go"):
                time.sleep(0.02)
        b.train(model, opt, x, y, n)
    if rec is not None:
        rec._rec.flush()
    open(flag + ".done", "w").close()
    while not os.path.exists(flag + ".end"):
        time.sleep(0.02)
    if rec is not None:
        rec.stop()


def wait_for(path, proc):
    while not os.path.exists(path):
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return True


def start(tmp, mode, model, steps, warm):
    flag = os.path.join(tmp, "%s-%s" % (model, mode))
    out = flag + ".cg"
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out,
           sys.executable, os.path.abspath(__file__), "--child", mode, model, str(steps), flag,
           str(warm)]
    log = open(flag + ".log", "w")
    return flag, out, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def finish(flag, out, proc):
    """Instructions the loop took, or None."""
    ctl = ["callgrind_control"]
    if not wait_for(flag + ".ready", proc):
        return None
    subprocess.run(ctl + ["-i", "on", str(proc.pid)], capture_output=True)
    open(flag + ".go", "w").close()
    ok = wait_for(flag + ".done", proc)
    subprocess.run(ctl + ["-i", "off", str(proc.pid)], capture_output=True)
    open(flag + ".end", "w").close()
    proc.wait()
    if not ok or not os.path.exists(out):
        return None
    with open(out) as f:
        for line in f:
            if line.startswith("totals:"):
                return int(line.split()[1])
    return None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int,
                    help="steps counted (default 60, 10 for block)")
    ap.add_argument("--warm", type=int,
                    help="steps recorded before the counted window (default 100, 20 for block)")
    ap.add_argument("--models", default="mlp,cnn,block")
    ap.add_argument("--modes", default="plain,engine,engine_fp_off,keep2",
                    help="plain (the anchor, always run), engine, engine_fp_off (the "
                    "engine with check_saved='off'), dispatch, keep2 (the engine with "
                    "keep_last=2)")
    ap.add_argument("--keep", metavar="DIR",
                    help="leave callgrind's output files in DIR (model-mode.cg)")
    args = ap.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("bench_overhead_ir: valgrind not found, nothing measured")
        return
    modes = ["plain"] + [m for m in args.modes.split(",") if m and m != "plain"]
    for m in modes:
        if m not in ("plain", "engine", "engine_fp_off", "dispatch", "keep2"):
            ap.error("unknown mode %r" % m)
    with tempfile.TemporaryDirectory(prefix="gtbench-ir-") as tmp:
        for model in args.models.split(","):
            steps = args.steps or (10 if model == "block" else 60)
            warm = args.warm or (20 if model == "block" else 100)
            got = {}
            # two at a time: counts do not depend on what runs beside
            # them
            for i in range(0, len(modes), 2):
                runs = [(m,) + start(tmp, m, model, steps, warm)
                        for m in modes[i:i + 2]]
                for m, flag, out, proc in runs:
                    got[m] = finish(flag, out, proc)
            for m in modes:
                if got[m] is None:
                    print("%s_%s_ir: not measured (see the valgrind log)" % (model, m))
                    continue
                print("%s_%s_ir: %.0f instructions/step" % (model, m, got[m] / steps))
                if args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    shutil.copy(os.path.join(tmp, "%s-%s.cg" % (model, m)),
                                os.path.join(args.keep, "%s-%s.cg" % (model, m)))
            for m in modes[1:]:
                if got[m] and got["plain"]:
                    print("%s_%s_ir_vs_plain: %.2f x" % (model, m, got[m] / got["plain"]))
            if got.get("engine") and got.get("engine_fp_off"):
                print("%s_engine_fp_cost_ir: %.1f %% (of engine_fp_off)" % (
                    model, 100 * (got["engine"] - got["engine_fp_off"]) / got["engine_fp_off"]))


if __name__ == "__main__":
    main()
