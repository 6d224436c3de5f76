"""CPU seconds (user + system, all threads) and wall seconds of each phase of a cuda execution process's
warm-up (verifier/worker.py _warm_up, in a child its fork server forked): interpreter + ``import torch``, the CUDA context, the profiler's
first CUDA session (CUPTI), ``import torch._dynamo``. One fresh process per run, as the verifier starts one
per candidate. On a GPU box:

    PYTHONPATH=. python3 bench/diag_warm_cpu.py --runs 3 [--env OMP_NUM_THREADS=1] [--import-only]

``--env K=V`` (repeatable) runs the probes with that environment too, beside the default; ``--import-only``
stops after ``import torch.utils.cpp_extension`` (what a build process imports); ``--env KM_PROF_CPU_FIRST=1`` runs a
CPU-only profiler session before the CUDA context (is kineto's start, not CUPTI's, the cost). The profiler's first
CUDA session is timed in three parts: its start (CUPTI's activities enabled), one kernel, its stop and events.
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
import torch.utils.cpp_extension
out["import torch (+ cpp_extension)"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
out["threads after the import"] = (len(os.listdir("/proc/self/task")), 0.0)
if os.environ.get("KM_IMPORT_ONLY"):
    print(json.dumps(out))
    raise SystemExit(0)
from torch.profiler import ProfilerActivity, profile
if os.environ.get("KM_PROF_CPU_FIRST"):  # kineto's own start, without CUDA (what a fork server could pay once)
    with profile(activities=[ProfilerActivity.CPU]):
        torch.empty(1).add_(1)
    out["profiler CPU-only session before CUDA"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
torch.empty(1, device="cuda")
out["CUDA context"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
prof.__enter__()
out["profiler first session: start (CUPTI activities enabled)"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
torch.empty(1, device="cuda").add_(1)
torch.cuda.synchronize()
out["profiler first session: one kernel"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
prof.__exit__(None, None, None)
out["profiler first session: stop + events"] = (time.time() - w, cpu() - c); w, c = time.time(), cpu()
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
    ap.add_argument("--env", action="append", default=[], metavar="K=V")
    ap.add_argument("--import-only", action="store_true")
    a = ap.parse_args()
    import os
    import time
    print("| environment | phase | wall s (runs) | CPU s (runs) |\n|---|---|---|---|")
    for extra in ["", *a.env]:
        env = dict(os.environ, **dict([extra.split("=", 1)] if extra else []))
        if a.import_only:
            env["KM_IMPORT_ONLY"] = "1"
        rows: dict[str, list] = {}
        for _ in range(a.runs):
            r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                               env=dict(env, KM_T0=repr(time.time())))
            if r.returncode:
                print(r.stderr[-2000:])
                continue
            for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items():
                rows.setdefault(k, []).append(v)
        for k, vs in rows.items():
            print(f"| {extra or 'default'} | {k} | {', '.join(f'{w:.2f}' for w, _ in vs)} | "
                  f"{', '.join(f'{c:.2f}' for _, c in vs)} |", flush=True)


if __name__ == "__main__":
    main()
