"""Verifier scaling over the GPUs of one host on Ray: the real-code batch on 1, 2, 4 ... GPUs, compile included.

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python bench/bench_verifier_ray.py --gpus 1,2,4 --cores-per-gpu 16 \
        --kill-one                                       # 16 cores a GPU, as a 4-GPU host of 64 has
    PYTHONPATH=. python bench/bench_verifier_ray.py --backend cpu --gpus 0 --n-tasks 3   # smoke run, no GPU

The batch is bench_verifier.py --batch real's: the model-written test bed (bench/lib/testbed.py real_batch;
ext/testbed, fetched, never committed), ``--n-tasks`` tasks x up to ``--per-task`` distinct solutions. For each
GPU count N it starts a local Ray cluster with N GPUs (``ray.init(num_gpus=N)``: Ray hands out GPU ids 0..N-1
and sets ``CUDA_VISIBLE_DEVICES`` per task) and ``--cores-per-gpu`` x N CPUs, verifies the batch through
verifier/ray_pool.py (compile tasks on the CPUs, one execution pool per GPU) in a fresh build root, so compiling
every extension and preparing every task are inside the wall as a user's run pays them, and shuts the cluster
down. Each run prints a line when it ends, so a call cut at its deadline still shows the runs it finished.

Columns: candidates per hour; per-GPU scaling = (rate at N / N) / rate at 1 (the issue asks >= 0.9);
verdict agreement with the 1-GPU run (status, correct, stage reached per candidate id); the devices the
chunks ran on with their candidate counts, and how many pairs of chunks overlapped in time on one device
(0 when no two timings share a device: Ray gives a GPU to one chunk at a time).

``--kill-one``: one more run at the largest count, where a Ray worker running a verify chunk is SIGKILLed
once it has run ``--kill-after`` seconds (as a lost GPU or the OOM killer would end it); the retries column
counts the resubmitted chunks, and the verdicts must still match the 1-GPU run one for one. The scaling rows
themselves run undisturbed.

``--backend cpu``: each "GPU" is a cpu execution pool (a Ray task asking one CPU) and the test bed's CUDA
solutions do not build for it, so the smoke run checks the plumbing, not verdicts or scaling.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1): set in this process before Ray starts (so the raylet and every worker
inherit it) and in the job's runtime_env.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from verifier.ray_pool import NO_MULTICAST_ENV  # noqa: E402

os.environ.update(NO_MULTICAST_ENV)  # before any process is started: ray's and the verifier's inherit it

from bench.common import emit  # noqa: E402
from kernelmill.errors import InputError  # noqa: E402


def real_items(a) -> list[tuple]:
    """The real-code batch of bench_verifier.py --batch real (bench/lib/testbed.py)."""
    from bench.lib.testbed import load_manifest, real_batch

    batch = real_batch(load_manifest(Path(a.manifest)), per_task=a.per_task, n_tasks=a.n_tasks,
                       levels=[int(x) for x in a.levels.split(",") if x], sources=[x for x in a.sources.split(",") if x],
                       backend=a.backend)
    return list(batch.items)


def overlaps_on_one_device(runs) -> int:
    """Pairs of chunks that ran at the same time on the same GPU (one host)."""
    n = 0
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            same = a.host == b.host and a.gpus and set(a.gpus.split(",")) & set(b.gpus.split(","))
            if same and a.started < b.ended and b.started < a.ended:
                n += 1
    return n


def kill_one_chunk(after_s: float, stop: threading.Event, killed: list) -> None:
    """SIGKILL the first Ray worker of this process's cluster seen running a verify chunk for ``after_s``."""
    import psutil

    me, seen = psutil.Process(os.getpid()), {}
    while not stop.is_set() and not killed:
        for p in me.children(recursive=True):  # only our own cluster's workers
            try:
                title = " ".join(p.cmdline())
            except psutil.Error:
                continue
            if title.startswith("ray::_verify_after_builds"):
                if time.monotonic() - seen.setdefault(p.pid, time.monotonic()) >= after_s:
                    os.kill(p.pid, signal.SIGKILL)
                    killed.append(p.pid)
                    break
        stop.wait(0.05)


def run_on(pools: int, backend: str, items: list[tuple], cfg, chunk: int, kill_after: float | None = None,
           cores_per_gpu: int = 0) -> dict:
    """One fresh local Ray cluster with ``pools`` GPUs (cpu: CPU execution pools), the batch verified;
    with ``kill_after``, one worker running a chunk is killed that long into the chunk; with ``cores_per_gpu``,
    the cluster is given that many CPUs per GPU (compile tasks and pools share them), not the host's."""
    import ray

    from verifier.common.config import usable_cores
    from verifier.ray_pool import LOCAL_OBJECT_STORE_BYTES, verify_on_ray

    cores = min(usable_cores(), cores_per_gpu * pools) if cores_per_gpu else usable_cores()
    ray.init(num_cpus=cores, num_gpus=pools if backend == "cuda" else 0, include_dashboard=False,
             object_store_memory=LOCAL_OBJECT_STORE_BYTES, log_to_driver=False,
             runtime_env={"env_vars": dict(NO_MULTICAST_ENV)})
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=kill_one_chunk, args=(kill_after, stop, killed), daemon=True)
    try:
        if kill_after is not None:
            killer.start()
        t0 = time.perf_counter()
        verdicts, summary = verify_on_ray(items, config=cfg, address="auto",  # the cluster just started
                                            workers=pools, chunk=chunk)
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        if killer.is_alive():
            killer.join()
        ray.shutdown()
    where = {}
    for r in summary.runs:
        key = f"gpu {r.gpus}" if r.gpus else f"cpu pid {r.pid}"
        where[key] = where.get(key, 0) + r.candidates
    return {"pools": pools, "verdicts": verdicts, "wall": wall, "summary": summary, "where": where,
            "overlaps": overlaps_on_one_device(summary.runs), "killed": killed, "cores": cores}


def agreement(a: list, b: list) -> tuple[int, int]:
    key = lambda v: (v.status, bool(v.correct), v.stage_reached)  # noqa: E731
    by = {v.candidate_id: key(v) for v in b}
    return sum(by.get(v.candidate_id) == key(v) for v in a), len(a)


def device_names() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return "; ".join(out.splitlines()) or "no GPU (cpu)"


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "orchestrator", "verifier", "bench"], cwd=ROOT,
                               capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    return head.strip() + (" (+ uncommitted changes in orchestrator/ verifier/ bench/)" if dirty.strip() else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default="1,2,4",
                    help="GPU counts to run, comma-separated (1 is always run: the baseline); "
                         "with --backend cpu, cpu execution pools (0: the smoke set 1,2)")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--chunk", type=int, default=4, help="candidates per Ray task (per GPU pool call)")
    ap.add_argument("--exec-workers", type=int, default=2, help="execution children per pool")
    ap.add_argument("--timing-trials", type=int, default=20)
    ap.add_argument("--kill-one", action="store_true",
                    help="one more run at the largest count, killing one chunk's Ray worker")
    ap.add_argument("--kill-after", type=float, default=2.0, help="seconds into a chunk before --kill-one kills it")
    ap.add_argument("--manifest", default="ext/testbed/manifest.jsonl", help="the test bed manifest")
    ap.add_argument("--per-task", type=int, default=1, help="distinct solutions per task")
    ap.add_argument("--n-tasks", type=int, default=24, help="tasks (0: every task of the levels)")
    ap.add_argument("--levels", default="1,2,3", help="levels, comma-separated")
    ap.add_argument("--sources", default="", help="test bed sources, comma-separated (default: all)")
    ap.add_argument("--cores-per-gpu", type=int, default=0,
                    help="CPUs the Ray cluster gets per GPU (0: every usable core whatever the GPU count)")
    ap.add_argument("--time-torch-compile", action="store_true",
                    help="time torch.compile of each reference too (the verifier's default; off by default here)")
    ap.add_argument("--out", default="", help="write the table here (a .md file) as well as printing it")
    a = ap.parse_args(argv)
    counts = sorted({int(x) for x in a.gpus.split(",") if x.strip()} - {0} | {1})
    if a.backend == "cpu" and a.gpus.strip() == "0":
        counts = [1, 2]
    from verifier.engine import VerifyConfig

    try:
        items = real_items(a)
    except InputError as e:
        raise SystemExit(f"--manifest/--levels/--sources: {e}") from None
    results = []
    runs = [(n, None) for n in counts] + ([(counts[-1], a.kill_after)] if a.kill_one and counts[-1] > 1 else [])
    for n, kill_after in runs:
        # cold: this run compiles and prepares every task itself, in a build root of its own
        cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix=f"km-ray-bench-{n}gpu-"), timing_trials=a.timing_trials,
                           time_torch_compile=a.time_torch_compile, exec_workers=a.exec_workers, run_timeout_s=300)
        res = run_on(n, a.backend, items, cfg, a.chunk, kill_after, a.cores_per_gpu)
        res["kill_run"] = kill_after is not None
        results.append(res)
        print(f"[{n}] wall {res['wall']:.1f} s, killed {res['killed']}, retries {res['summary'].retries}, "
              f"where {res['where']}", flush=True)
    base = results[0]
    rate1 = len(items) / base["wall"] * 3600
    unit = "GPUs" if a.backend == "cuda" else "cpu pools"
    lines = [f"| {unit} | candidates | wall s | candidates/h | per-{unit[:-1]} scaling vs 1 | verdicts = 1-pool run | "
             "chunks overlapping on one GPU | workers killed / chunk retries | candidates per device |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        rate = len(items) / r["wall"] * 3600
        same, total = agreement(r["verdicts"], base["verdicts"])
        where = ", ".join(f"{k}: {v}" for k, v in sorted(r["where"].items()))
        overl = str(r["overlaps"]) if a.backend == "cuda" else "n/a (cpu pools share the cores)"
        killed_run = " (--kill-one run)" if r["kill_run"] else ""
        lines.append(f"| {r['pools']} ({r['cores']} CPUs){killed_run} | {len(items)} | {r['wall']:.1f} | {rate:.0f} | "
                     f"{rate / r['pools'] / rate1:.2f} | {same}/{total} | {overl} | "
                     f"{len(r['killed'])} / {r['summary'].retries} | {where} |")
    statuses: dict[str, int] = {}
    for v in base["verdicts"]:
        statuses[v.status] = statuses.get(v.status, 0) + 1
    import torch

    env = "".join(f"{k}={os.environ[k]} " for k in ("KERNELMILL_VERIFY_PCH", "TORCH_CUDA_ARCH_LIST") if os.environ.get(k))
    cmd = f"PYTHONPATH=. {env}python bench/bench_verifier_ray.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    seen = "statuses in the 1-pool run: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) + "."
    pools = f"Verifier: {a.exec_workers} execution children per pool, chunk {a.chunk} candidates per Ray task, " \
            f"{a.timing_trials} timing trials, torch.compile {'timed' if a.time_torch_compile else 'not timed'}"
    about = [f"Batch: the real-code batch (bench/lib/testbed.py real_batch: {a.manifest}, levels {a.levels}, "
             f"{len({t.task_id for t, _ in items})} tasks x up to {a.per_task} distinct model-written solutions = "
             f"{len(items)} candidates); {seen}",
             f"{pools}; every run cold (a fresh build root): compiling every extension and preparing every task are "
             "inside its wall."]
    text = "\n".join([
        f"# Verifier on Ray, {a.backend} backend: scaling over execution pools of one host", "",
        f"Command: `{cmd}`", "",
        f"Devices: {device_names()}; host cores {os.cpu_count()}; torch {torch.__version__}; commit {commit()}.",
        *about, "", *lines, ""])
    emit(text, str(Path(a.out).parent) if a.out else "", Path(a.out).name if a.out else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
