"""CLI: ``kernelmill query`` and ``kernelmill report`` (``kernelmill curate`` is the curate stage's
subcommand, made from the stage list in orchestrator/stages.py).

    kernelmill query [--corpus DIR] "SQL" [--format table|csv|json]
    kernelmill report RUN_DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from curation.corpus import load_stats
from curation.query import format_rows, run_query
from curation.report import write_report
from kernelmill import store
from kernelmill.errors import InputError


def register(subparsers) -> None:
    q = subparsers.add_parser("query", help="SQL over a run's or corpus's tables (DuckDB)",
                              description="Views: tasks, candidates, verdicts, dialogues, sft, rft, rl. "
                                          "Examples: docs/QUERIES.md.")
    q.add_argument("sql", metavar="SQL")
    q.add_argument("--corpus", metavar="DIR", help="run or corpus directory (default: the latest run started from "
                                                   "this working directory, named on stderr)")
    q.add_argument("--format", choices=("table", "csv", "json"), default="table")
    q.set_defaults(handler=query_command)

    r = subparsers.add_parser("report", help="(re)write the corpus report (plots + report.md) of a directory",
                              description="Rewrite RUN_DIR/report/report.md and its plots (tasks by level and "
                                          "source, pass rates, speedups, duplicates removed, turns to repair) "
                                          "from the directory's tables. A table file that does not read "
                                          "(truncated, corrupt) stops it with one line per file and the report "
                                          "left as it was (exit 2): a report from the readable rows only would "
                                          "be silently partial.")
    r.add_argument("run_dir", metavar="RUN_DIR")
    r.set_defaults(handler=report_command)


def query_command(args: argparse.Namespace) -> int:
    cols, rows = run_query(args.sql, args.corpus)
    print(format_rows(cols, rows, args.format))
    return 0


def report_command(args: argparse.Namespace) -> int:
    root = Path(args.run_dir)
    if not root.is_dir():
        raise InputError(f"run directory {root}", "does not exist")
    bad = store.unreadable_files(root)
    if bad:
        for f in bad:
            print(f"warning: {f}: not a readable Parquet file", file=sys.stderr)
        raise InputError(root, f"report not rewritten: {len(bad)} table file(s) above do not read, so the report "
                               "would count only part of the rows; a run started on this directory (`kernelmill "
                               "run`, a stage command) moves them aside and recomputes their rows")
    path = write_report(root, load_stats(root))
    print(json.dumps({"report": str(path), "plots": sorted(str(p) for p in path.parent.glob("*.png"))}, indent=1))
    return 0
