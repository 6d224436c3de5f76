"""Verifier benchmark on a GPU box: compile seconds per candidate (cold and cached), execution seconds,
distinct candidates verified per hour (compile pool sized to the cores), where every second of a candidate
goes, GPU busy fraction, and timing noise (one kernel, 5 repeated measurements: CV of the median).

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 bench/bench_verifier.py --batch mixed --per-task 12

``--batch mixed`` (default): 8 tasks of levels 1-2 (bench/mixed_batch.py), ``--per-task`` distinct candidates
each; ``--batch relu``: ``--n`` variants of one ReLU (the session-5 figure). Prints a table and writes
bench/results/verifier_<device>_<batch>.md and the verdicts (candidate, status, cheats) as
verdicts_<device>_<batch>_<commit>.jsonl, to compare two verifiers' verdicts on the same batch."""

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
from bench.proc_cpu import ProcCpu  # noqa: E402
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


def run_batch(items, cfg, workers):
    """verdicts, wall s, GPU util mean, GPU busy fraction, host CPU busy fraction over the batch, and the host
    CPU seconds by kind of process (bench/proc_cpu.py)."""
    sampler, procs = GpuSampler(), ProcCpu()
    sampler.start()
    procs.start()
    t0 = time.perf_counter()
    vs = verify_batch(items, config=cfg, compile_workers=workers)
    wall = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    by_kind = procs.finish()
    s = sampler.samples
    return (vs, wall, (sum(s) / len(s) / 100 if s else float("nan")),
            (sum(x > 0 for x in s) / len(s) if s else float("nan")), procs.host_busy, by_kind)


def _mean(xs) -> float:
    xs = list(xs)
    return statistics.mean(xs) if xs else float("nan")


def exec_breakdown(vs) -> str:
    keys = ["execute_prepare", "child_load", "child_trials", "child_first_trial", "child_timing_lock_wait",
            "child_timing", "child_own_kernel_check", "execute_child", "execute"]
    return ", ".join(f"{k} {_mean(v.stage_seconds.get(k, 0.0) for v in vs):.2f}" for k in keys)


# where a candidate's seconds go: (label, stage_seconds key or a function of the stage seconds)
SECONDS = [
    ("compile: build process, per candidate (CPU-bound, pool of cores)", "compile"),
    ("prepare: task plan (reference, float64 check; once per task) + reference timing (once per task)",
     "execute_prepare"),
    ("child: wait for the shared device lock", "child_shared_lock_wait"),
    ("child: reference module + reference model built", "child_load_reference"),
    ("child: profiler start", "child_load_profiler"),
    ("child: torch state snapshot (tamper guard)", "child_load_guard"),
    ("child: candidate module imported (extension loaded)", "child_load_candidate_import"),
    ("child: ModelNew built", "child_load"),
    ("child: correctness trials", "child_trials"),
    ("child: wait for the timing lock", "child_timing_lock_wait"),
    ("child: timing", "child_timing"),
    ("execution process: start + end not in its own phases", lambda st: st.get("execute_child", 0) - sum(
        st.get(k, 0) for k in ("child_shared_lock_wait", "child_load_reference", "child_load_profiler",
                               "child_load_guard", "child_load_candidate_import", "child_load", "child_trials",
                               "child_timing_lock_wait", "child_timing"))),
    ("judge: outputs compared, float64 reference on the trial inputs", lambda st: st.get("execute", 0)
     - st.get("execute_prepare", 0) - st.get("execute_child", 0)),
    ("total per candidate (wall, one worker)", "total"),
]


def seconds_table(vs) -> list[tuple[str, str]]:
    rows = []
    for label, key in SECONDS:
        vals = [key(v.stage_seconds) if callable(key) else float(v.stage_seconds.get(key, 0.0) or 0.0) for v in vs
                if v.stage_seconds.get("execute") is not None or key == "compile"]
        rows.append((f"s per candidate: {label}", f"{_mean(vals):.2f} (max {max(vals, default=0):.2f})"))
    return rows


def write_verdicts(vs, path: Path) -> None:
    import json
    with open(path, "w") as f:
        for v in vs:
            f.write(json.dumps({"candidate_id": v.candidate_id, "status": v.status, "cheats": v.cheats,
                                "correct": v.correct, "speedup": round(v.speedup_eager or 0, 2)}) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="mixed", choices=["mixed", "relu"])
    ap.add_argument("--per-task", type=int, default=12, help="mixed batch: candidates per task (8 tasks)")
    ap.add_argument("--n", type=int, default=32, help="relu batch: candidates")
    ap.add_argument("--exec-workers", type=int, default=4)
    ap.add_argument("--timing-trials", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=540, help="skip a phase that would not fit")
    ap.add_argument("--style", default="light", choices=["light", "bare"],
                    help="light: CUDA sources include torch/extension.h (KernelBench style); bare: torch-free CUDA "
                         "source, torch wrapper in cpp_sources (the compact teacher's style)")
    ap.add_argument("--skip-cached", action="store_true")
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    t_start = time.perf_counter()
    left = lambda: a.budget_s - (time.perf_counter() - t_start)  # noqa: E731
    cores = os.cpu_count() or 1
    device = torch.cuda.get_device_name(0)
    task = Task.from_code(fx.CUDA_RELU_TASK, name="relu_cuda", source="seed", level=1)
    if a.batch == "mixed":
        from bench.mixed_batch import mixed_batch
        items = mixed_batch(a.per_task)
        a.n = len(items)
    else:
        make = fx.cuda_relu_candidate if a.style == "light" else fx.cuda_relu_bare_candidate
        items = [(task, Candidate(candidate_id=f"b{k}", task_id=task.task_id, backend="cuda", generator="bench",
                                  code=make(1000 + k))) for k in range(a.n)]
    cands = [c.code for _, c in items]
    cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-bench-"), timing_trials=a.timing_trials,
                       time_torch_compile=False, exec_workers=a.exec_workers, run_timeout_s=300)
    rows: list[tuple[str, object]] = [("device", device), ("cores (compile pool size)", cores),
                                      ("execution workers (slots: cuda, two warm fork servers each)", a.exec_workers),
                                      ("distinct candidates", a.n)]
    # the one-off precompiled header build is paid before the clock starts for the batch and reported apart
    t = time.perf_counter()
    from verifier.build import build_blocking
    pre = build_blocking(cfg.build_root(), {"cpp_sources": ["int km_pch_warm() { return 1; }"],
                                            "functions": ["km_pch_warm"], "cuda_sources": ["__global__ void k(){}"],
                                            "extra_cuda_cflags": ["-O3"]}, 600)
    rows.append(("one-off: precompiled header + first build s (not in the batches)",
                 f"{time.perf_counter() - t:.1f} (ok={pre.ok}, variant={pre.variant}, pch={pre.pch})"))
    print(rows[-1], flush=True)
    cold, cold_wall, util_c, busy_c, host_c, kinds_c = run_batch(items, cfg, cores)
    ok_cold = sum(v.status == "pass" for v in cold)
    comp_cold = _mean(v.stage_seconds.get("compile", 0.0) for v in cold)
    print(f"[cold] wall {cold_wall:.1f} s, passed {ok_cold}/{a.n}, compile s/cand {comp_cold:.1f}, "
          f"gpu util {util_c:.2f}, busy {busy_c:.2f}; exec means: {exec_breakdown(cold)}", flush=True)
    rows += [("passed, cold batch", f"{ok_cold} / {a.n}"),
             ("compile s per candidate, cold (build process time, pool of cores)", f"{comp_cold:.1f}"),
             # CPU seconds of the compilers: against the wall above it says whether the pool's builds wait for
             # cores (cpu < wall) or each costs more CPU under load than alone (bench_build_phases.py)
             ("compile CPU s per candidate, cold (user + system of the build and its compilers)",
              f"{_mean(v.stage_seconds.get('compile_cpu', 0.0) for v in cold):.1f}"),
             ("compile CPU s of the batch / (batch wall s x cores)",
              f"{sum(v.stage_seconds.get('compile_cpu', 0.0) for v in cold) / max(cold_wall * (os.cpu_count() or 1), 1e-9):.2f}"),
             ("execution s per candidate, cold batch (prepare + child)", f"{_mean(v.stage_seconds.get('execute', 0) for v in cold):.2f}"),
             ("batch wall s, cold", f"{cold_wall:.1f}"),
             ("**distinct candidates per hour, cold (compile + execute, overlapped)**", f"**{a.n / cold_wall * 3600:.0f}**"),
             ("GPU utilization mean / busy fraction (samples > 0%), cold", f"{util_c:.2f} / {busy_c:.2f}"),
             ("host CPU busy fraction over the batch (/proc/stat, all cores), cold", f"{host_c:.2f}"),
             ("timings with the device alone (device lock), cold",
              f"{sum(bool(v.versions.get('timing', {}).get('exclusive')) for v in cold)} / {a.n}")]
    rows += [(f"host CPU s per candidate, cold: {k} ({n} processes)", f"{sec / a.n:.2f}")
             for k, (sec, n) in kinds_c.items() if sec >= 0.05 * a.n]
    rows += seconds_table(cold)
    commit = os.environ.get("KM_VERIFIER_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_verdicts(cold, out / f"verdicts_{device.replace(' ', '_')}_{a.batch}_{commit}.jsonl")
    rows.append(("statuses, cold", str(dict(sorted(__import__("collections").Counter(v.status for v in cold).items())))))
    for v in cold:
        if v.status != "pass":
            print("NOT PASS", v.candidate_id, v.status, v.feedback[:500], flush=True)
    if not a.skip_cached and left() > cold_wall * 0.8 + 60:
        warm, warm_wall, util_w, busy_w, host_w, _ = run_batch(items, cfg, cores)
        ok_warm = sum(v.status == "pass" for v in warm)
        print(f"[cached] wall {warm_wall:.1f} s, passed {ok_warm}/{a.n}, gpu util {util_w:.2f}, busy {busy_w:.2f}; "
              f"exec means: {exec_breakdown(warm)}", flush=True)
        rows += [("passed, cached batch", f"{ok_warm} / {a.n}"),
                 ("compile s per candidate, cached", f"{_mean(v.stage_seconds.get('compile', 0.0) for v in warm):.3f}"),
                 ("execution s per candidate, cached batch (prepare + child)",
                  f"{_mean(v.stage_seconds.get('execute', 0) for v in warm):.2f}"),
                 ("  of which (means, s)", exec_breakdown(warm)),
                 ("batch wall s, cached", f"{warm_wall:.1f}"),
                 ("candidates per hour, cached builds", f"{a.n / warm_wall * 3600:.0f}"),
                 ("GPU utilization mean / busy fraction, cached", f"{util_w:.2f} / {busy_w:.2f}"),
                 ("host CPU busy fraction over the batch, cached", f"{host_w:.2f}")]
    else:
        rows.append(("cached batch", "not run (budget)"))
    for hide in (50.0, 0.0):
        if left() < 45:
            rows.append((f"timing noise (hide_launch_us={hide:g})", "not run (budget)"))
            continue
        # timing noise: one kernel, 5 repeated full measurements, one at a time
        cfg_n = VerifyConfig(build_dir=cfg.build_dir, timing_trials=a.timing_trials, time_torch_compile=False,
                             exec_workers=1, run_timeout_s=300, hide_launch_us=hide)
        rep = verify_batch([(items[0][0], Candidate(candidate_id=f"n{r}", task_id=items[0][0].task_id, backend="cuda",
                                             generator="bench", code=cands[0])) for r in range(5)],
                           config=cfg_n, compile_workers=cores)
        times = [v.runtime_us for v in rep if v.runtime_us]
        eager = [v.eager_us for v in rep if v.eager_us]
        cv = statistics.pstdev(times) / statistics.mean(times) if len(times) >= 2 else float("nan")
        cv_e = statistics.pstdev(eager) / statistics.mean(eager) if len(eager) >= 2 else float("nan")
        print(f"[noise hide={hide}] medians {times} us, CV {100 * cv:.2f}%; eager {eager}, CV {100 * cv_e:.2f}%",
              flush=True)
        label = "launch hidden (default)" if hide else "launch timed (hide_launch_us=0)"
        rows += [(f"**timing noise, {label}: CV of the median over 5 measurements (candidate)**",
                  f"**{100 * cv:.2f}%** (medians us: " + ", ".join(f"{t:.1f}" for t in times) + ")"),
                 (f"timing noise, {label}: CV over the same 5 runs (eager reference)",
                  f"{100 * cv_e:.2f}% (medians us: " + ", ".join(f"{t:.1f}" for t in eager) + ")")]
    rows.append(("timing trials per measurement", a.timing_trials))
    variants = {}
    for f in Path(cfg.build_dir).glob("*/result.json"):
        import json
        d = json.loads(f.read_text())
        variants[(d.get("variant"), d.get("pch"))] = variants.get((d.get("variant"), d.get("pch")), 0) + 1
    rows.append(("builds by variant (variant, pch used): count", ", ".join(f"{k}: {n}" for k, n in sorted(
        variants.items(), key=str))))
    w = max(len(r[0]) for r in rows)
    table = "\n".join(f"| {k.ljust(w)} | {v} |" for k, v in rows)
    header = f"| {'metric'.ljust(w)} | value |\n|{'-' * (w + 2)}|-------|"
    what = (f"Batch: {a.n} distinct CUDA candidates over 8 tasks of levels 1-2 (bench/mixed_batch.py: ReLU, GELU, "
            "swish, row sum, row max, softmax, tiled matmul, Linear+bias+ReLU+scale; block sizes, kernel and host "
            "function names vary)" if a.batch == "mixed" else
            f"Task: ReLU on 2048x4096 fp32; {a.n} distinct CUDA "
            "candidates (different kernel names and block sizes; style " + a.style + ": " + (
                "each CUDA source includes torch/extension.h, so each builds as the 'light' variant"
                if a.style == "light" else "torch-free CUDA sources, built as the 'bare' variant") + ")")
    text = (f"# Verifier benchmark on {device}\n\nCommand: `PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 "
            f"bench/bench_verifier.py --batch {a.batch} --per-task {a.per_task} --n {a.n} --exec-workers "
            f"{a.exec_workers} --style {a.style}` at {commit}\n\ntorch "
            f"{torch.__version__}, python {sys.version.split()[0]}. {what}"
            ". Throughput and noise runs time the eager reference; "
            "torch.compile of the reference is timed in tests/gpu.\n\n" + header + "\n" + table + "\n")
    print(text, flush=True)
    (out / f"verifier_{device.replace(' ', '_')}_{a.batch}.md").write_text(text)


if __name__ == "__main__":
    main()
