"""CLI: ``kernelmill curate``, ``kernelmill query``, ``kernelmill report``.

    kernelmill curate RUN_DIR [--out CORPUS] [--decontaminate DIR] [--sft-min-speedup P] [--rft-k K]
    kernelmill query [--corpus DIR] "SQL" [--format table|csv|json]
    kernelmill report RUN_DIR

Flags override the [curate] section of the config for this call only.
"""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    p = subparsers.add_parser("curate", help="filter, decontaminate and deduplicate a run into sft/rft/rl corpora",
                              description="Build the sft / rft / rl corpora, dataset card and report from a run "
                                          "directory. Idempotent: re-running on the same run writes nothing new.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory holding tasks/ candidates/ verdicts/ dialogues/")
    p.add_argument("--out", metavar="CORPUS", help="corpus directory (default: RUN_DIR itself)")
    p.add_argument("--decontaminate", metavar="DIR", help="benchmark directory (e.g. a KernelBench checkout) to "
                   "decontaminate against")
    p.add_argument("--sft-min-speedup", type=float, metavar="P", help="keep sft rows at least P times faster than eager")
    p.add_argument("--rft-k", type=int, metavar="K", help="at most K distinct correct solutions per task in rft")
    p.add_argument("--rl-keep-trivial", action="store_true", help="keep rl tasks with pass rate 0 or 1")
    p.set_defaults(handler=curate_command)

    q = subparsers.add_parser("query", help="SQL over a run's or corpus's tables (DuckDB)",
                              description="Views: tasks, candidates, verdicts, dialogues, sft, rft, rl. "
                                          "Examples: docs/QUERIES.md.")
    q.add_argument("sql", metavar="SQL")
    q.add_argument("--corpus", metavar="DIR", help="run or corpus directory (default: the most recent run)")
    q.add_argument("--format", choices=("table", "csv", "json"), default="table")
    q.set_defaults(handler=query_command)

    r = subparsers.add_parser("report", help="(re)write the corpus report (plots + report.md) of a directory")
    r.add_argument("run_dir", metavar="RUN_DIR")
    r.set_defaults(handler=report_command)


def curate_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from curation.corpus import build_corpora
    from kernelmill.errors import InputError

    cfg = dict(args.cfg.get("curate", {}))
    if args.decontaminate is not None:
        cfg["decontaminate_dir"] = args.decontaminate
    if args.sft_min_speedup is not None:
        if args.sft_min_speedup < 0:
            raise InputError("--sft-min-speedup", f"must be >= 0, got {args.sft_min_speedup}")
        cfg["sft_min_speedup"] = args.sft_min_speedup
    if args.rft_k is not None:
        if args.rft_k < 1:
            raise InputError("--rft-k", f"must be >= 1, got {args.rft_k}")
        cfg["rft_max_per_task"] = args.rft_k
    if args.rl_keep_trivial:
        cfg["rl_keep_trivial"] = True
    out = Path(args.out) if args.out else Path(args.run_dir)
    stats = build_corpora(args.run_dir, out, cfg=cfg)
    print(f"corpus {out}: " + ", ".join(f"{k} {v} rows" for k, v in stats["rows"].items()))
    for corpus, reasons in stats["removed"].items():
        if reasons:
            print(f"  {corpus} removed: " + ", ".join(f"{k} {v}" for k, v in reasons.items()))
    hits = stats["decontamination"]["removed_tasks"]
    if stats["decontamination"]["benchmark_dir"]:
        print(f"  decontamination: {len(hits)} tasks removed")
        for h in hits:
            print(f"    {h['task_id']} {h['task_name']}: {h['reason']} match with {h['benchmark_path']} "
                  f"(overlap {h['overlap']})")
    changed = [k for k, v in stats["written"].items() if v]
    print(f"  written: {', '.join(changed) if changed else 'nothing (already up to date)'}")
    print(f"  card {out / 'README.md'}, report {out / 'report' / 'report.md'}")
    return 0


def query_command(args: argparse.Namespace) -> int:
    from curation.query import format_rows, run_query

    cols, rows = run_query(args.sql, args.corpus)
    print(format_rows(cols, rows, args.format))
    return 0


def report_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from curation.corpus import load_stats
    from curation.report import write_report
    from kernelmill.errors import InputError

    root = Path(args.run_dir)
    if not root.is_dir():
        raise InputError(f"run directory {root}", "does not exist")
    path = write_report(root, load_stats(root))
    print(json.dumps({"report": str(path), "plots": sorted(str(p) for p in path.parent.glob("*.png"))}, indent=1))
    return 0
