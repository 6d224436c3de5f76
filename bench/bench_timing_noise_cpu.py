"""Timing noise with several execution children at once, device lock on and off, on the cpu backend.

N copies of one honest ReLU candidate (one build, cached) are verified in one batch with
``--exec-workers`` children at a time, so a child's timing phase can overlap another child's
correctness trials and the verifier's reference runs. Printed per setting: the coefficient of
variation of the N runtime medians, their min/median/max, how many timings had the device (here: the
cores) to themselves, and the batch wall time. The same protocol on cuda is bench/bench_verifier.py.

    python3 bench/bench_timing_noise_cpu.py [--n 12] [--exec-workers 2] [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelmill.schema import Candidate, Task  # noqa: E402
from bench.common import emit  # noqa: E402
from verifier import fixtures as fx  # noqa: E402
from verifier.api import VerifyConfig, verify_batch  # noqa: E402


def run(n: int, workers: int, lock: bool, build_dir: str, trials: int) -> dict:
    task = Task.from_code(fx.CUDA_RELU_TASK, name="relu_2048x4096", source="seed", level=1)
    cfg = VerifyConfig(build_dir=build_dir, timing_trials=trials, warmup=2, time_torch_compile=False,
                       other_shape=False, exec_workers=workers, run_timeout_s=120, device_lock=lock)
    items = [(task, Candidate(candidate_id=f"c{i}", task_id=task.task_id, backend="cpu", generator="bench",
                              code=fx.HONEST_RELU)) for i in range(n)]
    t = time.perf_counter()
    vs = verify_batch(items, config=cfg, compile_workers=2)
    wall = time.perf_counter() - t
    bad = [v for v in vs if v.status != "pass"]
    times = [v.runtime_us for v in vs if v.runtime_us]
    excl = [v.versions.get("timing", {}).get("exclusive") for v in vs]
    return {"lock": lock, "passed": n - len(bad), "cv": statistics.pstdev(times) / statistics.mean(times),
            "min": min(times), "median": statistics.median(times), "max": max(times),
            "exclusive": sum(bool(e) for e in excl), "wall": wall,
            "errors": [(v.candidate_id, v.status, v.feedback[:200]) for v in bad]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--exec-workers", type=int, default=2)
    ap.add_argument("--timing-trials", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="lock on / off alternated this many times")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    build_dir = tempfile.mkdtemp(prefix="km-noise-")
    run(1, 1, True, build_dir, 3)  # the one build, outside the measurements
    rows = []
    for _ in range(a.rounds):
        for lock in (True, False):
            r = run(a.n, a.exec_workers, lock, build_dir, a.timing_trials)
            print(r, flush=True)
            rows.append(r)
    from verifier.backends import CpuBackend

    cpu = CpuBackend().describe()
    lines = [f"# Timing noise with {a.exec_workers} execution children at once, cpu backend",
             "", f"`python3 bench/bench_timing_noise_cpu.py --n {a.n} --exec-workers {a.exec_workers} --timing-trials "
             f"{a.timing_trials} --rounds {a.rounds}` on {cpu} ({os.cpu_count()} cores). Task: ReLU on 2048x4096 fp32; "
             f"{a.n} copies of one honest candidate (fixtures.HONEST_RELU) per batch; each verdict's runtime is the "
             f"median of {a.timing_trials} timed calls.", "",
             "| device lock | passed | CV of the medians | min / median / max us | timings with the device alone | batch wall s |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {'on' if r['lock'] else 'off'} | {r['passed']}/{a.n} | **{100 * r['cv']:.1f}%** | "
                     f"{r['min']:.0f} / {r['median']:.0f} / {r['max']:.0f} | "
                     f"{r['exclusive'] if r['lock'] else '-'} | {r['wall']:.1f} |")
    text = "\n".join(lines) + "\n"
    emit(text, a.out, "timing_noise_cpu.md")


if __name__ == "__main__":
    main()
