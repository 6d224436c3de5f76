"""NNSmith task throughput: tasks per minute on this machine's cores, with yield and skip reasons.

    python bench/bench_nnsmith.py [--n 40] [--seed 0] [--procs 1,2] [--out bench/results/nnsmith_cpu.md]

For each process count P in --procs, P processes each run the whole stage for a share of the
graphs (process k uses run seed ``seed + k``): ``generate_nnsmith_tasks`` (generation, emission,
equivalence check against nnsmith's model) then ``annotate_tasks`` (trace in a worker process,
FLOPs/bytes, level). Reported per P: wall time, tasks emitted, tasks/minute (emitted and
annotated tasks over wall time, process start and imports included), CPU seconds (user+sys of
every process) and tasks per CPU-minute (less sensitive to other load on shared cores), yield,
and the time split between the two phases (summed over processes). Skip reasons are summed over the run.

The machine is shared: the load average at the start is printed with the table, since other
work on the cores lowers these numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHARD = """
import json, sys, time
t0 = time.time()
from graphs.nnsmith_tasks import generate_nnsmith_tasks
from synth.annotate.annotator import annotate_tasks
t1 = time.time()
res = generate_nnsmith_tasks({n}, {seed}, max_nodes={max_nodes}, target_numel={target})
t2 = time.time()
ann, fail = annotate_tasks(res.tasks)
t3 = time.time()
print(json.dumps({{"emitted": len(res.tasks), "annotated": len(ann), "skips": res.skips, "failures": len(fail),
                  "levels": [t.level for t in ann], "import_s": t1 - t0, "generate_s": t2 - t1, "annotate_s": t3 - t2}}))
"""


def run_shards(n: int, seed: int, procs: int, max_nodes: int, target: int) -> dict:
    shares = [n // procs + (1 if k < n % procs else 0) for k in range(procs)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    import resource

    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    ps = [subprocess.Popen([sys.executable, "-c", SHARD.format(n=share, seed=seed + k, max_nodes=max_nodes,
                                                                target=target)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=str(ROOT), text=True)
          for k, share in enumerate(shares) if share > 0]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]
    wall = time.time() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)  # shards and their annotation workers
    skips: dict = {}
    for o in outs:
        for r, c in o["skips"].items():
            skips[r] = skips.get(r, 0) + c
    emitted = sum(o["emitted"] for o in outs)
    annotated = sum(o["annotated"] for o in outs)
    levels: dict = {}
    for o in outs:
        for lv in o["levels"]:
            levels[lv] = levels.get(lv, 0) + 1
    return {"procs": procs, "graphs": n, "wall_s": wall, "emitted": emitted, "annotated": annotated,
            "tasks_per_min": 60 * annotated / wall, "cpu_s": cpu,
            "tasks_per_cpu_min": 60 * annotated / cpu if cpu else 0.0, "yield": emitted / n if n else 0.0, "skips": skips,
            "levels": dict(sorted(levels.items())),
            "import_s": sum(o["import_s"] for o in outs), "generate_s": sum(o["generate_s"] for o in outs),
            "annotate_s": sum(o["annotate_s"] for o in outs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="graphs per measurement")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--procs", default="1,2", help="comma-separated process counts")
    ap.add_argument("--max-nodes", type=int, default=5)
    ap.add_argument("--target-numel", type=int, default=262144)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "nnsmith_cpu.md"))
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = [run_shards(args.n, args.seed, int(p), args.max_nodes, args.target_numel) for p in args.procs.split(",")]
    head = ("| procs | graphs | emitted | annotated | yield | wall s | tasks/min | CPU s | tasks/CPU-min "
            "| import s | generate+check s | annotate s | levels |")
    lines = [head, "|" + "|".join("---" for _ in range(13)) + "|"]
    for r in rows:
        lines.append(f"| {r['procs']} | {r['graphs']} | {r['emitted']} | {r['annotated']} | {r['yield']:.0%} | "
                     f"{r['wall_s']:.1f} | {r['tasks_per_min']:.1f} | {r['cpu_s']:.1f} | {r['tasks_per_cpu_min']:.1f} | "
                     f"{r['import_s']:.1f} | {r['generate_s']:.1f} | "
                     f"{r['annotate_s']:.1f} | {r['levels']} |")
    skips: dict = {}
    for r in rows:
        for k, v in r["skips"].items():
            skips[k] = skips.get(k, 0) + v
    skip_lines = [f"- {k}: {v}" for k, v in sorted(skips.items(), key=lambda kv: -kv[1])] or ["- none"]
    text = "\n".join([
        "# NNSmith tasks: throughput on CPU",
        "",
        f"`python bench/bench_nnsmith.py --n {args.n} --seed {args.seed} --procs {args.procs} "
        f"--max-nodes {args.max_nodes} --target-numel {args.target_numel}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load average at start {load:.2f} (the cores are shared with other work).",
        "tasks/min counts emitted tasks that were also annotated, over wall time including process start",
        "and imports; CPU s is user+sys of all processes (shards and annotation workers), so tasks/CPU-min",
        "is what an unloaded machine approaches per core; phase columns are wall time summed over processes.",
        "",
        *lines,
        "",
        "Skips over all rows (reason: graphs):",
        *skip_lines,
        "",
    ])
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
