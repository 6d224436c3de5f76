"""CPU seconds (user + system, all threads) and wall seconds of each phase of a cuda execution process's
warm-up (verifier/worker.py wait_for_job): interpreter + ``import torch``, the CUDA context, the profiler's
first CUDA session (CUPTI), ``import torch._dynamo``. One fresh process per run, as the verifier starts one
per candidate. On a GPU box:

    PYTHONPATH=. python3 bench/diag_warm_cpu.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

PROBE = r"""
import json, os, time
t0w, t0c = float(os.environ["KM_T0"]), None
def cpu():
    r = os.times()
    return r.user + r.system
out = {}
w, c = time.time(), cpu()
out["interpreter start (to the first line)"] = (w - t0w, c)
import torch
out["import torch"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
torch.empty(1, device="cuda")
out["CUDA context"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
    torch.empty(1, device="cuda").add_(1)
torch.cuda.synchronize()
out["profiler first session (CUPTI)"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
    torch.empty(1, device="cuda").add_(1)
torch.cuda.synchronize()
out["profiler second session"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
import torch._dynamo
out["import torch._dynamo"] = (time.time() - w, cpu() - c)
out["threads at the end"] = (len(os.listdir("/proc/self/task")), 0.0)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    import os
    import time
    rows: dict[str, list] = {}
    for _ in range(a.runs):
        r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                           env=dict(os.environ, KM_T0=repr(time.time())))
        if r.returncode:
            print(r.stderr[-2000:])
            continue
        for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items():
            rows.setdefault(k, []).append(v)
    print("| warm-up phase | wall s (runs) | CPU s (runs) |\n|---|---|---|")
    for k, vs in rows.items():
        print(f"| {k} | {', '.join(f'{w:.2f}' for w, _ in vs)} | {', '.join(f'{c:.2f}' for _, c in vs)} |")


if __name__ == "__main__":
    main()
