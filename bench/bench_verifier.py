"""Verifier benchmark on a GPU box: compile seconds per candidate (cold and cached), execution seconds,
distinct candidates verified per hour (compile pool sized to the cores), GPU busy fraction, and timing
noise (one kernel, 5 repeated measurements: coefficient of variation of the median).

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 bench/bench_verifier.py --n 48 --out bench/results

Prints a table and writes bench/results/verifier_<device>.md (the device named)."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier import fixtures as fx  # noqa: E402
from verifier.api import VerifyConfig, verify_batch  # noqa: E402


class GpuSampler(threading.Thread):
    """nvidia-smi utilization samples every 0.5 s while running."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stop = [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout.split()
                self.samples.append(float(out[0]))
            except Exception:  # noqa: BLE001
                pass
            self.stop.wait(0.5)


def run_batch(cands, task, cfg, workers):
    items = [(task, Candidate(candidate_id=f"b{k}", task_id=task.task_id, backend="cuda", generator="bench", code=c))
             for k, c in enumerate(cands)]
    sampler = GpuSampler()
    sampler.start()
    t0 = time.perf_counter()
    vs = verify_batch(items, config=cfg, compile_workers=workers)
    wall = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    s = sampler.samples
    return vs, wall, (sum(s) / len(s) / 100 if s else float("nan")), (sum(x > 0 for x in s) / len(s) if s else float("nan"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--exec-workers", type=int, default=4)
    ap.add_argument("--timing-trials", type=int, default=20)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    device = torch.cuda.get_device_name(0)
    task = Task.from_code(fx.CUDA_RELU_TASK, name="relu_cuda", source="seed", level=1)
    cands = [fx.cuda_relu_candidate(1000 + k) for k in range(a.n)]
    cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-bench-"), timing_trials=a.timing_trials,
                       time_torch_compile=False, exec_workers=a.exec_workers, run_timeout_s=300)
    cold, cold_wall, util_c, busy_c = run_batch(cands, task, cfg, cores)
    # printed as soon as known, so a run stopped at its time limit still leaves numbers behind
    print(f"[cold] wall {cold_wall:.1f} s, passed {sum(v.status == 'pass' for v in cold)}/{a.n}, "
          f"gpu util {util_c:.2f}, busy {busy_c:.2f}", flush=True)
    warm, warm_wall, util_w, busy_w = run_batch(cands, task, cfg, cores)
    print(f"[cached] wall {warm_wall:.1f} s, gpu util {util_w:.2f}, busy {busy_w:.2f}", flush=True)
    ok_cold = sum(v.status == "pass" for v in cold)
    ok_warm = sum(v.status == "pass" for v in warm)
    comp_cold = statistics.mean(v.stage_seconds.get("compile", 0.0) for v in cold)
    comp_warm = statistics.mean(v.stage_seconds.get("compile", 0.0) for v in warm)
    exec_s = statistics.mean(v.stage_seconds.get("execute", 0.0) for v in warm)
    # timing noise: one kernel, 5 repeated full measurements (compile timing of the reference on)
    cfg_n = VerifyConfig(build_dir=cfg.build_dir, timing_trials=a.timing_trials, time_torch_compile=False,
                         exec_workers=1, run_timeout_s=300)
    rep = verify_batch([(task, Candidate(candidate_id=f"n{r}", task_id=task.task_id, backend="cuda", generator="bench",
                                         code=cands[0])) for r in range(5)], config=cfg_n, compile_workers=cores)
    times = [v.runtime_us for v in rep if v.runtime_us]
    cv = statistics.pstdev(times) / statistics.mean(times) if len(times) >= 2 else float("nan")
    rows = [
        ("device", device), ("cores (compile pool size)", cores), ("execution workers", a.exec_workers),
        ("distinct candidates", a.n), ("passed (cold / cached)", f"{ok_cold} / {ok_warm}"),
        ("compile s per candidate, cold (build process time)", f"{comp_cold:.1f}"),
        ("compile s per candidate, cached", f"{comp_warm:.3f}"),
        ("execution s per candidate (child wall, cached run)", f"{exec_s:.2f}"),
        ("batch wall s, cold", f"{cold_wall:.1f}"), ("batch wall s, cached", f"{warm_wall:.1f}"),
        ("distinct candidates per hour, cold (compile + execute)", f"{a.n / cold_wall * 3600:.0f}"),
        ("candidates per hour, cached builds", f"{a.n / warm_wall * 3600:.0f}"),
        ("GPU utilization mean, cold / cached (nvidia-smi)", f"{util_c:.2f} / {util_w:.2f}"),
        ("GPU busy fraction (samples > 0%), cold / cached", f"{busy_c:.2f} / {busy_w:.2f}"),
        ("timing noise: CV of median over 5 measurements", f"{100 * cv:.2f}% (medians us: "
         + ", ".join(f"{t:.1f}" for t in times) + ")"),
        ("eager reference us (same process)", f"{rep[0].eager_us:.1f}" if rep[0].eager_us else "n/a"),
        ("timing trials per measurement", a.timing_trials),
    ]
    w = max(len(r[0]) for r in rows)
    table = "\n".join(f"| {k.ljust(w)} | {v} |" for k, v in rows)
    header = f"| {'metric'.ljust(w)} | value |\n|{'-' * (w + 2)}|-------|"
    text = (f"# Verifier benchmark on {device}\n\nCommand: `PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 "
            f"bench/bench_verifier.py --n {a.n} --exec-workers {a.exec_workers}`\n\ntorch {torch.__version__}, "
            f"python {sys.version.split()[0]}. Task: ReLU on 2048x4096 fp32; {a.n} distinct CUDA candidates "
            "(different kernel names and block sizes). Throughput and noise runs time the eager reference; "
            "torch.compile of the reference is timed in tests/gpu.\n\n" + header + "\n" + table + "\n")
    print(text)
    for v in cold:
        if v.status != "pass":
            print("NOT PASS", v.candidate_id, v.status, v.feedback[:500])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"verifier_{device.replace(' ', '_')}.md").write_text(text)


if __name__ == "__main__":
    main()
