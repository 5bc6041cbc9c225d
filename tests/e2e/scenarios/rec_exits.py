"""Ends in the way argv[1] says: exit3, sigterm, sigint, kill9, fork, thread."""
import os
import signal
import sys
import threading
import time

import torch

how = sys.argv[1]
w = torch.ones(3, requires_grad=True)
loss = (w * 2).sum()
loss.backward()
print("started", how, flush=True)

if how == "exit3":
    sys.exit(3)
elif how == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
elif how == "sigint":
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
elif how == "kill9":
    t0 = time.time()
    while time.time() - t0 < 0.6:  # long enough for a batch commit
        torch.ones(4).add_(1)
    os.kill(os.getpid(), signal.SIGKILL)
elif how == "fork":
    pid = os.fork()
    if pid == 0:
        torch.arange(7).mul_(3)
        print("child ok", flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    torch.zeros(2).sub_(1)
    print("parent ok", os.WEXITSTATUS(status), flush=True)
elif how == "thread":
    def work():
        torch.full((5,), 2.0).mul_(2)
    t = threading.Thread(target=work, name="worker")
    t.start()
    t.join()
    print("thread ok", flush=True)
