"""Miner throughput on 2 cores: tree-sitter files parsed per second, modules turned into tasks per minute.

    python bench/bench_mine.py [--copies 20] [--workers 2] [--target-numel 1048576] [--out bench/results/mine_cpu.md]

Corpus: data/sample_repos (3 small repositories, 18 files, 30 nn.Module classes, some deliberately
bad), replicated ``copies`` times into a temporary folder for the parse benchmark (each copy a
separate repository, so cross-file resolution runs per copy), and mined once end to end for the
task benchmark. Two measurements:

- parse: read + decode + tree-sitter parse + module discovery + dependency closure of every file
  and module, in this process (no code runs): files/s and modules/s;
- mine: ``mine_tasks`` over data/sample_repos with ``workers`` sandbox processes: every module is
  deduced, scaled to ``target_numel`` and filtered in a forked sandbox child, and every task re-run
  from its own file. Reported as modules/min (found), tasks/min (emitted) and the wall time with and
  without the fixed costs (sandbox start-up, and the deliberately hanging module that waits for its
  timeout). The task rate is almost all torch work on CPU at the scaled shapes.

Optionally (``--real DIR``, e.g. the installed ``transformers`` package: real PyTorch code, 2,800
files) the parse step also runs over DIR, and a random sample of ``--real-sample`` of its
self-contained modules goes through the sandbox, giving the yield on real code.

Wall times depend on machine load (the project machine is shared): the table records the load
average at the start.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT / "data" / "sample_repos"


def bench_parse(copies: int) -> dict:
    from synth.mine import MineReport, collect_candidates

    tmp = Path(tempfile.mkdtemp(prefix="kernelmill-bench-mine-"))
    try:
        for i in range(copies):
            for repo in SAMPLE.iterdir():
                shutil.copytree(repo, tmp / f"{repo.name}{i:03d}")
        report = MineReport(source=str(tmp))
        t0 = time.perf_counter()
        n_candidates = sum(1 for _ in collect_candidates(str(tmp), report, max_file_bytes=1 << 20))
        dt = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"files": report.files, "parsed": report.files_parsed, "modules": report.modules_found,
            "self_contained": n_candidates, "seconds": dt}


def bench_mine(workers: int, target_numel: int, timeout_s: float) -> dict:
    from synth.mine import mine_tasks

    t0 = time.perf_counter()
    res = mine_tasks(str(SAMPLE), target_numel=target_numel, timeout_s=timeout_s, workers=workers,
                     license_allowlist=["mit", "apache-2.0", "bsd-3-clause", "bsd-2-clause", "unknown"])
    dt = time.perf_counter() - t0
    r = res.report
    hung = sum(1 for m in r.modules if m["outcome"] == "timeout")
    return {"modules": r.modules_found, "tasks": r.tasks_emitted, "seconds": dt, "timeouts": hung,
            "yield": r.yield_, "table": r.table()}


def bench_real(source: str, sample: int, workers: int, target_numel: int, timeout_s: float) -> dict:
    import concurrent.futures as cf
    import random
    from collections import Counter

    from synth.input_sandbox import SandboxPool
    from synth.mine import MineReport, _process, collect_candidates

    report = MineReport(source=source)
    t0 = time.perf_counter()
    cands = list(collect_candidates(source, report, max_file_bytes=1 << 20))
    parse_s = time.perf_counter() - t0
    random.Random(0).shuffle(cands)
    picked = cands[:sample]
    outcomes: Counter = Counter()
    t0 = time.perf_counter()
    with SandboxPool(workers=workers) as pool, cf.ThreadPoolExecutor(workers) as ex:
        for c, ded, ran, code in ex.map(lambda c: _process(pool, c, target_numel=target_numel, timeout_s=timeout_s,
                                                           max_forward_s=2.0, min_forward_s=0.0), picked):
            if ded.get("status") == "ok":
                outcomes["task" if (ran or {}).get("status") == "ok" else "run_file_failed"] += 1
            else:
                outcomes[ded.get("reason", "crash")] += 1
    return {"files": report.files, "parsed": report.files_parsed, "modules": report.modules_found,
            "self_contained": len(cands), "why_not": report.not_self_contained.most_common(4), "parse_s": parse_s,
            "sample": len(picked), "outcomes": outcomes, "mine_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--target-numel", type=int, default=1 << 20)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "mine_cpu.md"))
    ap.add_argument("--real", default="", help="a directory of real PyTorch code (e.g. site-packages/transformers)")
    ap.add_argument("--real-sample", type=int, default=60)
    args = ap.parse_args(argv)

    load = os.getloadavg()[0]
    p = bench_parse(args.copies)
    m = bench_mine(args.workers, args.target_numel, args.timeout)
    # the hanging module occupies one of `workers` sandboxes for the whole timeout
    busy = max(m["seconds"] - m["timeouts"] * args.timeout / args.workers, 1e-9)
    rows = [
        ("parse: files (tree-sitter, closure)", f"{p['files']}", f"{p['files'] / p['seconds']:.0f} files/s"),
        ("parse: modules found / made self-contained", f"{p['modules']} / {p['self_contained']}",
         f"{p['modules'] / p['seconds']:.0f} modules/s"),
        ("mine: modules found -> tasks emitted", f"{m['modules']} -> {m['tasks']} (yield {m['yield']:.2f})",
         f"{m['modules'] / m['seconds'] * 60:.0f} modules/min, {m['tasks'] / m['seconds'] * 60:.0f} tasks/min"),
        ("mine: wall time (all / without the hang)", f"{m['seconds']:.1f} s / {busy:.1f} s",
         f"{m['modules'] / busy * 60:.0f} modules/min without the hang"),
    ]
    if args.real:
        r = bench_real(args.real, args.real_sample, args.workers, args.target_numel, args.timeout)
        tasks = r["outcomes"]["task"]
        rows += [
            ("real: files parsed (tree-sitter, closure)", f"{r['parsed']} / {r['files']}",
             f"{r['files'] / r['parse_s']:.0f} files/s"),
            ("real: modules found -> self-contained", f"{r['modules']} -> {r['self_contained']}",
             "dropped: " + ", ".join(f"{k} {v}" for k, v in r["why_not"])),
            ("real: random sample deduced -> tasks", f"{r['sample']} -> {tasks} ({tasks / max(r['sample'], 1):.0%})",
             f"{r['sample'] / r['mine_s'] * 60:.0f} modules/min; "
             + ", ".join(f"{k} {v}" for k, v in r["outcomes"].most_common() if k != "task")),
        ]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    head = (f"miner on {os.cpu_count()} cores, workers={args.workers}, target_numel={args.target_numel}, "
            f"parse corpus = sample_repos x {args.copies}, load average at start {load:.1f}")
    table = "\n".join([head, "", *(f"{a.ljust(w0)}  {b.ljust(w1)}  {c}" for a, b, c in rows)])
    print(table)
    print()
    print(m["table"])
    cmd = f"python bench/bench_mine.py --copies {args.copies} --workers {args.workers}" + (
        f" --real {args.real} --real-sample {args.real_sample}" if args.real else "")
    md = ["# Miner benchmark (CPU)", "", f"`{cmd}`",
          "", head, "", "| measurement | count | rate |", "| --- | --- | --- |",
          *(f"| {a} | {b} | {c} |" for a, b, c in rows), "", "Mining report of the timed run:", "", "```",
          m["table"], "```", ""]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
