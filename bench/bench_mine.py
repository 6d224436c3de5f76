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

With ``--real DIR [DIR ...]`` (public repositories checked out by hand, each a folder with its
LICENSE), every DIR is mined end to end with ``mine_tasks`` as ``kernelmill mine DIR`` would, and a
per-repository table gives modules found, self-contained, inputs deduced, tasks, tasks as a share of
self-contained modules, the share of filtered modules that ran from their own file, seconds, the load
average before and after, and the largest drop reasons. The packages a repository imports must be
installed for its modules to count as self-contained (for the recorded run: einops, einx,
torch-einops-utils; ``pip install -e .[mine-bench]``).

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
    from synth.mine.miner import MineReport, collect_candidates

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
    from synth.mine.miner import mine_tasks

    t0 = time.perf_counter()
    res = mine_tasks(str(SAMPLE), target_numel=target_numel, timeout_s=timeout_s, workers=workers,
                     license_allowlist=["mit", "apache-2.0", "bsd-3-clause", "bsd-2-clause", "unknown"])
    dt = time.perf_counter() - t0
    r = res.report
    hung = sum(1 for m in r.modules if m["outcome"] == "timeout")
    return {"modules": r.modules_found, "tasks": r.tasks_emitted, "seconds": dt, "timeouts": hung,
            "yield": r.yield_, "table": r.table()}


def bench_real(source: str, workers: int, target_numel: int, timeout_s: float, reports: str = "") -> dict:
    """One repository mined end to end (as ``kernelmill mine`` does), with its report's counts; its
    mining report (every module's outcome) goes to ``reports``/NAME when given."""
    from synth.mine.miner import mine_tasks, write_report

    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = mine_tasks(source, target_numel=target_numel, timeout_s=timeout_s, workers=workers,
                     license_allowlist=["mit", "apache-2.0", "bsd-3-clause", "bsd-2-clause", "unknown"])
    dt = time.perf_counter() - t0
    r = res.report
    if reports:
        write_report(Path(reports) / Path(source).name, r)
    filtered = r.runs_from_file + sum(r.run_file_failures.values())
    drops = r.not_self_contained + r.deduction_failures + r.filter_failures + r.run_file_failures
    return {"name": Path(source).name, "modules": r.modules_found, "self_contained": r.self_contained,
            "deduced": r.inputs_deduced, "tasks": r.tasks_emitted, "duplicates": r.duplicates,
            "from_file": f"{r.runs_from_file}/{filtered}", "seconds": dt, "load": f"{load0:.1f}/{os.getloadavg()[0]:.1f}",
            "drops": ", ".join(f"{k} {v}" for k, v in drops.most_common(4))}


REAL_COLUMNS = ("repository", "modules", "self-contained", "deduced", "tasks", "tasks / self-contained",
                "runs from own file", "exact duplicates", "seconds", "load before/after", "largest drops")


def real_row(r: dict) -> list[str]:
    share = r["tasks"] / r["self_contained"] if r["self_contained"] else 0.0
    return [r["name"], str(r["modules"]), str(r["self_contained"]), str(r["deduced"]), str(r["tasks"]),
            f"{share:.0%}", r["from_file"], str(r["duplicates"]), f"{r['seconds']:.0f}", r["load"], r["drops"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--target-numel", type=int, default=1 << 20)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "mine_cpu.md"))
    ap.add_argument("--real", nargs="*", default=[], metavar="DIR",
                    help="repositories to mine end to end (each a checked-out folder with its LICENSE)")
    ap.add_argument("--skip-sample", action="store_true", help="only the --real repositories")
    ap.add_argument("--reports", default="", help="write each --real repository's mining report under this folder")
    args = ap.parse_args(argv)
    if args.skip_sample and not args.real:
        ap.error("--skip-sample needs --real")

    load = os.getloadavg()[0]
    rows, m = [], None
    if not args.skip_sample:
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
    real = []
    for d in args.real:
        real.append(bench_real(d, args.workers, args.target_numel, args.timeout, args.reports))
        print("  ".join(real_row(real[-1])), flush=True)
    head = (f"miner on {os.cpu_count()} cores, workers={args.workers}, target_numel={args.target_numel}, "
            f"timeout {args.timeout:g} s per module, load average at start {load:.1f}"
            + ("" if args.skip_sample else f", parse corpus = sample_repos x {args.copies}"))
    lines = [head, ""]
    if rows:
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        lines += [f"{a.ljust(w0)}  {b.ljust(w1)}  {c}" for a, b, c in rows]
    if real:
        table = [list(REAL_COLUMNS)] + [real_row(r) for r in real]
        widths = [max(len(row[i]) for row in table) for i in range(len(REAL_COLUMNS))]
        lines += ["", *("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)]
    print("\n".join(lines))
    if m:
        print()
        print(m["table"])
    cmd = "python bench/bench_mine.py" + ("" if args.skip_sample else f" --copies {args.copies}") + \
        f" --workers {args.workers} --timeout {args.timeout:g}" + (" --real " + " ".join(args.real) if args.real else "") + \
        (" --skip-sample" if args.skip_sample else "")
    md = ["# Miner benchmark (CPU)", "", f"`{cmd}`", "", head, ""]
    if rows:
        md += ["| measurement | count | rate |", "| --- | --- | --- |", *(f"| {a} | {b} | {c} |" for a, b, c in rows), ""]
    if real:
        md += ["| " + " | ".join(REAL_COLUMNS) + " |", "| --- |" + " ---: |" * 9 + " --- |",
               *("| " + " | ".join(real_row(r)) + " |" for r in real), ""]
    if m:
        md += ["Mining report of the timed run:", "", "```", m["table"], "```", ""]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
