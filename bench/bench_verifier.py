"""Verifier benchmark on a GPU box: compile seconds per candidate (cold and cached), execution seconds,
distinct candidates verified per hour (compile pool sized to the cores), where every second of a candidate
goes, GPU busy fraction, and timing noise (one kernel, 5 repeated measurements: CV of the median).

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 bench/bench_verifier.py --batch mixed --per-task 12

``--batch mixed`` (default): 8 tasks of levels 1-2 (bench/lib/mixed_batch.py), ``--per-task`` distinct candidates
each; ``--batch relu``: ``--n`` variants of one ReLU (the session-5 figure). Prints a table and writes
bench/results/verifier_<device>_<batch>.md and the verdicts (candidate, status, cheats) as
verdicts_<device>_<batch>_<commit>.jsonl, to compare two verifiers' verdicts on the same batch."""

import argparse
import dataclasses
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.lib import fixtures as fx, lock_trace  # noqa: E402
from bench.lib.pch_warm import headers_made, warm_pch  # noqa: E402
from bench.lib.proc_cpu import GpuSampler, ProcCpu, cpu_model  # noqa: E402
from bench.lib.testbed import verify_keys  # noqa: E402
from bench.lib.real_report import real_record, real_report, real_row, write_real_verdicts  # noqa: E402
from kernelmill.schema import Candidate, Task  # noqa: E402
from kernelmill.settings import parse_section  # noqa: E402
from verifier.engine import VerifyConfig, usable_cores, verify_batch  # noqa: E402
from verifier.serve.cost import mean_or_nan, exec_breakdown, seconds_table, write_verdicts  # noqa: E402


def run_batch(items, cfg, workers):
    """verdicts, wall s, GPU util mean, GPU busy fraction, host CPU busy fraction over the batch, and the host
    CPU seconds by kind of process (bench/lib/proc_cpu.py)."""
    sampler, procs = GpuSampler(), ProcCpu()
    sampler.start(), procs.start()
    t0 = time.perf_counter()
    vs = verify_batch(items, config=cfg, compile_workers=workers)
    wall = time.perf_counter() - t0
    sampler.stop.set(), sampler.join()
    by_kind = procs.finish()
    s = sampler.samples
    return (vs, wall, (sum(s) / len(s) / 100 if s else float("nan")),
            (sum(x > 0 for x in s) / len(s) if s else float("nan")), procs.host_busy, by_kind)


# ----------------------------------------------------------------------------- the real-code batch (issue 38)
# ``--batch real``: the test bed's model-written solutions (bench/lib/testbed.py picks them) through the verify entry
# with the verifier's default settings (torch.compile of each reference timed, the sandbox on), at 1 candidate per
# task and at --per-task k, each in a fresh process with a fresh build directory (the in-process caches of task
# plans and reference timings, and the build cache, would otherwise let the second batch ride on the first).

def _commit() -> str:
    return os.environ.get("KERNELMILL_VERIFIER_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
        cwd=Path(__file__).resolve().parents[1]).stdout.strip() or "unknown"


def _device(backend: str) -> str:
    return torch.cuda.get_device_name(0) if backend == "cuda" else "cpu"


def real_once(a, out_json: Path) -> None:
    """One real-code batch at ``a.per_task`` in this process, within ``a.budget_s``; writes its record to
    ``out_json``. At the budget it stops waiting, records what finished, and exits the process (os._exit: what
    still runs in the verifier's threads is abandoned; its sandboxes die with it)."""
    import json

    from verifier.common.config import VerifyConfig
    from verifier.entry import VerifyStats, verify
    from bench.lib.testbed import load_manifest, real_batch

    t_start = time.perf_counter()
    batch = real_batch(load_manifest(Path(a.manifest)), per_task=a.per_task,
                       levels=[int(x) for x in a.levels.split(",") if x], n_tasks=a.n_tasks,
                       sources=[x for x in a.sources.split(",") if x], backend=a.backend, pad=a.pad_copies)
    # the verifier's defaults but where builds go (fresh: a cold cache, a new machine's first run) and the keys asked
    cfg = dataclasses.replace(parse_section("verify", verify_keys(a.verify, a.exec_workers, a.no_split), "--verify"),
                              build_dir=tempfile.mkdtemp(prefix=f"km-bench-real-k{a.per_task}-"))
    done: list = []  # (seconds since the batch started, item index, verdict)
    trace = lock_trace.for_batch(cfg, a.backend)  # the device lock's timeline (bench/lib/lock_trace.py)
    lock = threading.Lock()
    stats = VerifyStats()
    sampler, procs = GpuSampler(), ProcCpu()
    if a.backend == "cuda":
        sampler.start()
    procs.start()
    t0 = time.perf_counter()

    def on_verdict(i, v):
        with lock:
            done.append((time.perf_counter() - t0, i, v))
            print(f"[k={a.per_task} {len(done)}/{len(batch.items)} {done[-1][0]:.0f}s] {batch.items[i][1].candidate_id}: "
                  f"{v.status} {','.join(v.cheats)}", flush=True)

    errors: list = []

    def work():
        try:
            verify(batch.items, config=cfg, compile_workers=usable_cores(), on_verdict=on_verdict, stats=stats)
        except Exception as e:  # noqa: BLE001 - recorded in the result, the batch's rows stay
            errors.append(f"{type(e).__name__}: {e}")

    th = threading.Thread(target=work, daemon=True)
    th.start()
    th.join(max(1.0, a.budget_s - (t0 - t_start)))
    cut = th.is_alive()
    wall = time.perf_counter() - t0
    sampler.stop.set()
    by_kind = procs.finish()
    with lock:
        rows = [dict(real_row(batch.items[i][1], v), t=round(t, 1)) for t, i, v in sorted(done, key=lambda d: d[1])]
    record = real_record(batch, stats, cfg, rows, per_task=a.per_task, cut=cut, wall_s=wall, errors=errors,
                         gpu_samples=sampler.samples, host_busy=procs.host_busy, cpu_by_kind=by_kind)
    record["cpu_windows"] = procs.windows()
    record["lock"] = lock_trace.summarize(trace)
    out_json.write_text(json.dumps(record))
    if cut:
        print(f"budget reached after {wall:.0f} s: {len(rows)} of {len(batch.items)} verdicts recorded", flush=True)
        os._exit(0)


def _real_argv(a, k: int, budget_s: float, out_json: Path) -> list[str]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--batch", "real", "--manifest", a.manifest,
            "--per-task", str(k), "--levels", a.levels, "--n-tasks", str(a.n_tasks), "--sources", a.sources,
            "--backend", a.backend, "--budget-s", f"{budget_s:.0f}", "--one-batch", str(out_json)]
    return argv + (["--exec-workers", str(a.exec_workers)] if a.exec_workers else []) + \
        (["--stacks", a.stacks] if a.stacks else []) + \
        (["--pad-copies"] if a.pad_copies else []) + (["--no-split"] if a.no_split else []) + \
        [x for kv in a.verify for x in ("--verify", kv)]


def real_main(a) -> int:
    """``--batch real``: the batch at 1 per task, then at ``--per-task`` k (when k > 1), each in its own process
    within its share of ``--budget-s``; prints and writes throughput_real_<device>_<commit>.md and the verdicts."""
    import json

    if a.one_batch:
        if a.stacks:  # every thread's stack each minute: where a batch that stops is waiting (92b516b's stopped)
            import faulthandler

            stacks = open(f"{a.stacks}.k{a.per_task}", "w")
            faulthandler.dump_traceback_later(60, repeat=True, file=stacks)
        real_once(a, Path(a.one_batch))
        return 0
    t_start = time.perf_counter()
    pch_s = warm_pch(a.backend, a.budget_s / 2)
    ks = ([] if a.k_only and a.per_task > 1 else [1]) + ([a.per_task] if a.per_task > 1 else [])
    records = []
    work = Path(tempfile.mkdtemp(prefix="km-bench-real-"))
    for j, k in enumerate(ks):
        left = a.budget_s - (time.perf_counter() - t_start)
        share = left / (len(ks) - j) if k == 1 else left - 15  # the k batch gets what the first left
        if share < 30:
            print(f"k={k}: not run ({left:.0f} s of the budget left)", flush=True)
            continue
        rec_path = work / f"k{k}.json"
        try:  # the batch process keeps its own budget; this bound is for a process that hangs past it
            rc = subprocess.run(_real_argv(a, k, share, rec_path), timeout=share + 60).returncode
        except subprocess.TimeoutExpired:
            rc = "killed 60 s past its budget"
        if not rec_path.is_file():
            print(f"k={k}: the batch process ended ({rc}) without a record", flush=True)
            continue
        records.append(json.loads(rec_path.read_text()))
    device, commit = _device(a.backend), _commit()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{device.replace(' ', '_')}_{commit}" + ("_nosplit" if a.no_split else "") + \
        "".join("_" + re.sub(r"[^\w-]+", "", kv.replace("=", "-")) for kv in a.verify)
    write_real_verdicts(records, out / f"verdicts_real_{tag}.jsonl")
    cmd = "PYTHONPATH=. python3 bench/bench_verifier.py " + shlex.join(sys.argv[1:])  # as it was run
    text = real_report(records, device=device, cmd=cmd, commit=commit, backend=a.backend, pch_s=pch_s,
                       versions=f"torch {torch.__version__}, python {sys.version.split()[0]}, "
                                f"{usable_cores()} cores (the compile pool), CPU: {cpu_model()}")
    print(text, flush=True)
    (out / f"throughput_real_{tag}.md").write_text(text)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="mixed", choices=["mixed", "relu", "real"])
    ap.add_argument("--per-task", type=int, default=None,
                    help="mixed batch: candidates per task (8 tasks; default 12); real batch: k distinct solutions "
                         "per task, run after the batch at 1 per task (default 8)")
    ap.add_argument("--n", type=int, default=32, help="relu batch: candidates")
    ap.add_argument("--exec-workers", type=int, default=None,
                    help="execution workers (mixed/relu default 4; real: the verifier's default unless given)")
    ap.add_argument("--timing-trials", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=540, help="skip a phase that would not fit")
    ap.add_argument("--style", default="light", choices=["light", "bare"], help="light: CUDA sources include "
                    "torch/extension.h (KernelBench style); bare: torch-free CUDA, torch wrapper in cpp_sources")
    ap.add_argument("--skip-cached", action="store_true")
    ap.add_argument("--no-split", action="store_true", help="real batch: --verify split_build=false (the slower path)")
    ap.add_argument("--verify", action="append", default=[], help="real batch: KEY=VALUE, a [verify] key (TOML)")
    ap.add_argument("--k-only", action="store_true", help="real batch: only the batch at k (not the one at 1 per task)")
    ap.add_argument("--out", default="bench/results")
    # --batch real (issue 38): the test bed's model-written solutions (bench/lib/testbed.py)
    ap.add_argument("--manifest", default="ext/testbed/manifest.jsonl", help="real batch: the test bed manifest")
    ap.add_argument("--levels", default="1,2,3", help="real batch: levels, comma-separated")
    ap.add_argument("--n-tasks", type=int, default=16, help="real batch: tasks (0: every task of the levels)")
    ap.add_argument("--sources", default="", help="real batch: test bed sources, comma-separated (default: all)")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"],
                    help="real batch: the candidates' backend (cpu: a smoke run on a manifest of cpu solutions)")
    ap.add_argument("--pad-copies", action="store_true",
                    help="real batch: fill a task with fewer than k distinct solutions with identical copies")
    ap.add_argument("--stacks", default="", help="real batch: write every thread's stack each minute to STACKS.k<k> "
                    "(faulthandler), to see where a batch that stops waits")
    ap.add_argument("--one-batch", default="", help=argparse.SUPPRESS)  # the child process of one real batch
    a = ap.parse_args()
    if a.batch == "real":
        a.per_task = 8 if a.per_task is None else a.per_task
        return real_main(a)
    a.per_task = 12 if a.per_task is None else a.per_task
    a.exec_workers = 4 if a.exec_workers is None else a.exec_workers
    t_start = time.perf_counter()
    left = lambda: a.budget_s - (time.perf_counter() - t_start)  # noqa: E731
    cores = usable_cores()
    device = torch.cuda.get_device_name(0)
    task = Task.from_code(fx.CUDA_RELU_TASK, name="relu_cuda", source="seed", level=1)
    if a.batch == "mixed":
        from bench.lib.mixed_batch import mixed_batch
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
    from verifier.build.pool import build_blocking
    pre = build_blocking(cfg.build_root(), {"cpp_sources": ["int km_pch_warm() { return 1; }"],
                                            "functions": ["km_pch_warm"], "cuda_sources": ["__global__ void k(){}"],
                                            "extra_cuda_cflags": ["-O3"]}, 600, host=cfg.host())
    headers_made(600)
    rows.append(("one-off: precompiled header + first build s (not in the batches)",
                 f"{time.perf_counter() - t:.1f} (ok={pre.ok}, variant={pre.variant}, pch={pre.pch})"))
    print(rows[-1], flush=True)
    cold, cold_wall, util_c, busy_c, host_c, kinds_c = run_batch(items, cfg, cores)
    ok_cold = sum(v.status == "pass" for v in cold)
    comp_cold = mean_or_nan(v.stage_seconds.get("compile", 0.0) for v in cold)
    print(f"[cold] wall {cold_wall:.1f} s, passed {ok_cold}/{a.n}, compile s/cand {comp_cold:.1f}, "
          f"gpu util {util_c:.2f}, busy {busy_c:.2f}; exec means: {exec_breakdown(cold)}", flush=True)
    rows += [("passed, cold batch", f"{ok_cold} / {a.n}"),
             ("compile s per candidate, cold (build process time, pool of cores)", f"{comp_cold:.1f}"),
             # CPU seconds of the compilers: against the wall above it says whether the pool's builds wait for
             # cores (cpu < wall) or each costs more CPU under load than alone (bench_build_phases.py)
             ("compile CPU s per candidate, cold (user + system of the build and its compilers)",
              f"{mean_or_nan(v.stage_seconds.get('compile_cpu', 0.0) for v in cold):.1f}"),
             ("compile CPU s of the batch / (batch wall s x cores)",
              f"{sum(v.stage_seconds.get('compile_cpu', 0.0) for v in cold) / max(cold_wall * usable_cores(), 1e-9):.2f}"),
             ("execution s per candidate, cold batch (prepare + child)", f"{mean_or_nan(v.stage_seconds.get('execute', 0) for v in cold):.2f}"),
             ("batch wall s, cold", f"{cold_wall:.1f}"),
             ("**distinct candidates per hour, cold (compile + execute, overlapped)**", f"**{a.n / cold_wall * 3600:.0f}**"),
             ("GPU utilization mean / busy fraction (samples > 0%), cold", f"{util_c:.2f} / {busy_c:.2f}"),
             ("host CPU busy fraction over the batch (/proc/stat, all cores), cold", f"{host_c:.2f}"),
             ("timings with the device alone (device lock), cold",
              f"{sum(bool(v.versions.get('timing', {}).get('exclusive')) for v in cold)} / {a.n}")]
    rows += [(f"host CPU s per candidate, cold: {k} ({n} processes)", f"{sec / a.n:.2f}")
             for k, (sec, n) in kinds_c.items() if sec >= 0.05 * a.n]
    rows += seconds_table(cold)
    commit = _commit()
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
                 ("compile s per candidate, cached", f"{mean_or_nan(v.stage_seconds.get('compile', 0.0) for v in warm):.3f}"),
                 ("execution s per candidate, cached batch (prepare + child)",
                  f"{mean_or_nan(v.stage_seconds.get('execute', 0) for v in warm):.2f}"),
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
    what = (f"Batch: {a.n} distinct CUDA candidates over 8 tasks of levels 1-2 (bench/lib/mixed_batch.py: ReLU, GELU, "
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
    sys.exit(main())
