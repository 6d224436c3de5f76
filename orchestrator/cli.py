"""The one kernelmill CLI.

Every stage of orchestrator/stages.py's list is a subcommand made from its ``Stage`` entry: the
entry's arguments set keys of its settings section, ``--set SECTION.KEY=VALUE`` sets any key, and
the handler calls ``orchestrator.pipeline.run_stages`` with that stage (and the stages its
subcommand chains, e.g. a gatherer then annotate) -- the code path ``kernelmill run --stages``
takes. The other commands come from the packages' commands.py modules (run / serve / deploy, the
single-candidate verifier, query / report, train).

Exit codes: 0 success; 1 a stage failed on its input; 2 bad usage or bad input named in the message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import curation.commands
import flows.commands
import train.commands
import verifier.commands
from kernelmill.config import load_settings, parse_sets
from kernelmill.errors import InputError
from orchestrator.pipeline import run_stages
from orchestrator.stages import STAGES, Stage

# A file a stage writes into the run directory that its subcommand prints after the JSON counts.
PRINTED_REPORT = {"mine": "mine_report.md"}


def add_set_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a setting, e.g. --set mine.workers=2 (repeatable)")


def _arg_dest(stage: Stage, key: str) -> str:
    return "run_dir" if key == "run_dir" else "opt_" + key.replace(".", "__")


def add_stage_command(sub, stage: Stage) -> None:
    """The subcommand of one stage: its Arg entries, --out (when it takes no RUN_DIR) and --set."""
    chained = f" (then {', '.join(stage.then)})" if stage.then else ""
    p = sub.add_parser(stage.cli_name, help=stage.help + chained,
                       description=f"{stage.help}{chained}. Settings: [{stage.section}]; reads "
                                   f"{', '.join(stage.reads) or 'no table'}, writes {', '.join(stage.writes)}.")
    for a in stage.cli:
        kw: dict = {"dest": _arg_dest(stage, a.key), "help": a.help}
        if a.flags[0].startswith("-"):
            if a.type is bool:
                kw.update(action="store_true", default=None)
            else:
                kw.update(default=None, type=str if a.nargs else a.type)
            p.add_argument(*a.flags, **kw)
        else:
            kw.pop("dest")
            p.add_argument(_arg_dest(stage, a.key), metavar=a.flags[0].upper(), help=a.help)
    if not any(a.key == "run_dir" for a in stage.cli):
        p.add_argument("--out", required=True, dest="run_dir", help="run directory (created; re-running resumes)")
    add_set_flag(p)
    p.set_defaults(handler=lambda args: stage_command(stage, args))


def stage_overrides(stage: Stage, args) -> dict:
    """``--set`` values, then the stage's own arguments (given ones only) as ``section.key``; an
    argument with a ``cli_default`` that neither its flag nor ``--set`` gave takes that default."""
    over = parse_sets(args.set)
    for a in stage.cli:
        value = getattr(args, _arg_dest(stage, a.key), None)
        key = a.key if "." in a.key else f"{stage.section}.{a.key}"
        if a.key == "run_dir" or (value is None and (a.cli_default is None or key in over)):
            continue
        if value is None:
            value = a.cli_default
        if a.nargs == ",":
            value = [v.strip() for v in value.split(",") if v.strip()]
        over[key] = value
    return over


def stage_command(stage: Stage, args) -> int:
    settings = load_settings(args.config, stage_overrides(stage, args))
    run_dir = Path(args.run_dir)
    if any(a.key == "run_dir" for a in stage.cli):  # it works on an existing run
        if not run_dir.is_dir():
            raise InputError(f"run directory {run_dir}", "does not exist")
        if "tasks" in stage.reads and not (run_dir / "tasks").is_dir():
            raise InputError(run_dir, "has no tasks table; run `kernelmill annotate` or `kernelmill run` first")
    with flows.commands.ProgressBar():  # a bar per stage on a terminal (annotate logs plain lines otherwise)
        result = run_stages(run_dir, settings, [stage.name, *stage.then])
    counts = {k: v for k, v in result.items() if k not in ("summary", "run_dir")}
    print(json.dumps(counts, indent=1, default=str))
    report = run_dir / PRINTED_REPORT.get(stage.name, "")
    if stage.name in PRINTED_REPORT and report.is_file():
        print(report.read_text())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelmill",
                                     description="PyTorch programs in, verified GPU-kernel training corpora out.")
    parser.add_argument("--config", help="TOML file of settings (sections and keys as in data/default.toml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    flows.commands.register(sub)  # run, serve, deploy
    for stage in STAGES:  # in pipeline order
        add_stage_command(sub, stage)
    verifier.commands.register(sub)  # verify (one candidate), metrics
    curation.commands.register(sub)  # query, report
    train.commands.register(sub)  # train sft|rft|rl|eval|plot
    return parser


def main(argv: list[str] | None = None) -> int:
    # The ephemeral Prefect server takes 10-75 s to start on a small, busy machine; prefect waits 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # The ephemeral server (a subprocess that inherits this environment) would send usage telemetry and log
    # an ERROR when the network is unreachable; a run that did its work prints no ERROR line.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        if args.command in ("verify", "metrics"):  # verifier/commands.py reads sections as dicts
            args.cfg = load_settings(args.config).to_dict()
        return int(args.handler(args) or 0)
    except (InputError, FileNotFoundError) as e:
        print(f"kernelmill {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
