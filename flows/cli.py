"""The one kernelmill CLI.

Every stage of orchestrator/stages.py's list is a subcommand made from its ``Stage`` entry: the
entry's arguments set keys of its settings section, ``--set SECTION.KEY=VALUE`` sets any key, and
the handler calls ``orchestrator.pipeline.run_stages`` with that stage (and the stages its
subcommand chains, e.g. a gatherer then annotate) -- the code path ``kernelmill run --stages``
takes. The other commands come from the packages' commands.py modules (run / serve / deploy, the
single-candidate verifier, query / report, train).

Exit codes: 0 success; 1 a stage failed on its input; 2 bad usage or bad input named in the message;
130 interrupted (Ctrl-C: `run` and the stage commands print the command that resumes, see
orchestrator/interrupt.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import curation.commands
import flows.commands
import train.commands
import verifier.serve.commands
from kernelmill.config import load_settings, parse_sets, record_latest_run
from kernelmill.errors import InputError
from kernelmill.store import UnreadablePartFile
from orchestrator.interrupt import exit_on_interrupt
from orchestrator.pipeline import run_stages
from orchestrator.progress import StageProgress
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
            else:  # the help shows --backend BACKEND, not the internal dest
                kw.update(default=None, type=str if a.nargs else a.type,
                          metavar=a.key.rpartition(".")[2].upper())
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
    record_latest_run(run_dir)  # what `kernelmill query` reads by default from this directory
    with StageProgress(every_s=settings.run.progress_every_s):  # bars on a terminal, rate-limited lines elsewhere
        result = run_stages(run_dir, settings, [stage.name, *stage.then])
    counts = {k: v for k, v in result.items() if k not in ("summary", "run_dir")}
    print(json.dumps(counts, indent=1, default=str))
    report = run_dir / PRINTED_REPORT.get(stage.name, "")
    if stage.name in PRINTED_REPORT and report.is_file():
        print(report.read_text())
    return 0


# Commands that write a run directory: Ctrl-C prints the command that resumes them (orchestrator/interrupt.py).
RESUMABLE = {"run", *(s.cli_name for s in STAGES)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelmill",
                                     description="PyTorch programs in, verified GPU-kernel training corpora out.")
    parser.add_argument("--config", help="TOML file of settings (sections and keys as in data/default.toml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    flows.commands.register(sub)  # run, serve, deploy
    for stage in STAGES:  # in pipeline order
        add_stage_command(sub, stage)
    verifier.serve.commands.register(sub)  # verify (one candidate), metrics
    curation.commands.register(sub)  # query, report
    train.commands.register(sub)  # train sft|rft|rl|eval|plot
    add_serve_verifier_command(sub)  # serve-verifier (the verifier as a reward service)
    sub.choices["metrics"].description = (
        "pass@1, pass@k, avg@k, fast_1.0 / fast_1.1 against eager and torch.compile, pass@1 under the strict and "
        "the partial legality policy, task and verifier faults counted apart, over RUN_DIR's verdicts (grouped by "
        "task). A task with fewer than k judged verdicts counts all it has (a note says so).")
    for action in sub.choices["metrics"]._actions:
        if action.dest == "run_dir":
            action.metavar = "RUN_DIR"
    sub.choices["verify"].description = (
        "Verify one candidate against a KernelBench task and print its verdict (exit 0 whatever the candidate "
        "did). TASK.py is parsed first and refused (exit 2), unrun, unless it defines class Model, get_inputs and "
        "get_init_inputs; a .py CANDIDATE that does not parse gets a verdict naming its syntax error and line.")
    for action in sub._choices_actions:  # a command without a description of its own shows its help line
        if not sub.choices[action.dest].description:
            sub.choices[action.dest].description = action.help[0].upper() + action.help[1:] + "."
    return parser


# ---------------------------------------------------------------------------- serve-verifier


def add_serve_verifier_command(sub) -> None:
    """`kernelmill serve-verifier`: the verifier behind HTTP for RL trainers (verifier/serve/service.py)."""
    p = sub.add_parser("serve-verifier", help="serve the verifier over HTTP as a reward service (POST /verify)",
                       description="Serve the verifier over HTTP: POST /verify judges a batch of completions against "
                                   "their tasks and answers a Verdict per item; requests arriving close together are "
                                   "verified in one call. GET /health. Settings: [verify] (and [flows] for Ray).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: no authentication)")
    p.add_argument("--port", type=int, default=8770)
    p.add_argument("--backend", default="auto", help="default backend of requests: auto, cpu or cuda")
    p.add_argument("--ray", default=None, metavar="ADDRESS", help="verify on a Ray cluster: local, auto or "
                                                                   "ray://host:10001 (default: flows.ray_address)")
    p.add_argument("--settings", default=None, metavar="FILE", help="TOML settings file (as --config)")
    p.add_argument("--max-batch", type=int, default=64, help="items after which a verification call closes")
    p.add_argument("--max-wait-ms", type=float, default=50.0,
                   help="how long a call waits for more requests after the first (ms)")
    p.add_argument("--record", default=None, metavar="FILE", help="append one JSON line per answered item")
    add_set_flag(p)
    p.set_defaults(handler=serve_verifier_command)


def serve_verifier_command(args) -> int:
    from verifier.serve import service  # fastapi and torch: only this command pays for them
    from verifier.entry import ray_target

    settings = load_settings(args.settings or args.config, parse_sets(args.set))
    address = args.ray if args.ray is not None else settings.flows.ray_address
    service.serve(settings.verify, host=args.host, port=args.port, backend=args.backend,
                ray=ray_target(address, settings.flows.ray_workers), max_items=args.max_batch,
                max_wait_ms=args.max_wait_ms, record=args.record)
    return 0


# ---------------------------------------------------------------------------- checks before the verifier runs


KERNELBENCH_NAMES = ("Model", "get_inputs", "get_init_inputs")


def _defined_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    names.add(t.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _syntax_error(path: str, e: SyntaxError) -> str:
    where = f"line {e.lineno}" + (f", column {e.offset}" if e.offset else "")
    text = (e.text or "").strip()
    return f"{where}: SyntaxError: {e.msg}" + (f" (`{text[:80]}`)" if text else "")


def check_task_file(path: str) -> None:
    """An InputError, before anything executes the file, unless it parses and defines ``class Model``,
    ``get_inputs`` and ``get_init_inputs`` at module level (a KernelBench program)."""
    f = Path(path)
    if not f.is_file():
        raise InputError(path, "task file does not exist")
    try:
        tree = ast.parse(f.read_bytes(), filename=path)
    except SyntaxError as e:
        raise InputError(path, "task file does not parse as Python: " + _syntax_error(path, e)) from None
    except ValueError as e:  # NUL bytes
        raise InputError(path, f"task file does not parse as Python: {e}") from None
    missing = [n for n in KERNELBENCH_NAMES if n not in _defined_names(tree)]
    if missing:
        raise InputError(path, "not a KernelBench program (it was not run): it defines no "
                               + ", ".join(f"`{n}`" for n in missing)
                               + "; a task defines class Model(nn.Module), get_inputs() and get_init_inputs()")


def candidate_for_verifier(path: str) -> str:
    """The candidate file the verifier reads. A ``.py`` file that is a program (no ``` fence) but does not
    parse is handed over as a python block, so that the verdict names its syntax error and line (the
    verifier reads a bare file that does not parse as a response with no code block); also printed here."""
    f = Path(path)
    if f.suffix != ".py" or not f.is_file():
        return path
    text = f.read_text(encoding="utf-8", errors="replace")
    if "```" in text:
        return path
    try:
        ast.parse(text, filename=path)
        return path
    except SyntaxError as e:
        print(f"kernelmill verify: {path}: {_syntax_error(path, e)}", file=sys.stderr)
    except ValueError:
        return path
    tmp = tempfile.NamedTemporaryFile("w", suffix=".md", prefix="kernelmill-candidate-", delete=False)
    with tmp:
        tmp.write(f"```python\n{text}\n```\n")
    return tmp.name


def metrics_note(run_dir: str, k: int) -> str | None:
    """A note when k exceeds the judged verdicts of some task (pass@k and avg@k then use the n it has)."""
    from kernelmill import store

    if not Path(run_dir).is_dir() or not (Path(run_dir) / "verdicts").is_dir():
        return None
    per_task: dict[str, int] = {}
    for v in store.read_records(run_dir, "verdicts"):
        if v.judged:
            per_task[v.task_id] = per_task.get(v.task_id, 0) + 1
    short = sorted(n for n in per_task.values() if n < k)
    if not short:
        return None
    return (f"note: k={k} but {len(short)} of {len(per_task)} tasks have fewer judged verdicts (fewest {short[0]}, "
            f"most {max(per_task.values())}): their pass@{k} is pass@n and their avg@{k} averages the n they have; "
            f"pass --k {min(per_task.values())} for a k every task has")


def main(argv: list[str] | None = None) -> int:
    # The ephemeral Prefect server takes 10-75 s to start on a small, busy machine; prefect waits 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # The ephemeral server (a subprocess that inherits this environment) would send usage telemetry and log
    # an ERROR when the network is unreachable; a run that did its work prints no ERROR line.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    previous_handler = exit_on_interrupt(args.command, argv) if args.command in RESUMABLE else None
    given_candidate = getattr(args, "candidate", None)
    try:
        if args.command in ("verify", "metrics"):  # verifier/serve/commands.py reads sections as dicts
            args.cfg = load_settings(args.config).to_dict()
        if args.command == "verify":
            check_task_file(args.task)
            args.candidate = candidate_for_verifier(args.candidate)
        if args.command == "metrics":
            note = metrics_note(args.run_dir, args.k)
            if note:
                print(note, file=sys.stderr)
        return int(args.handler(args) or 0)
    except UnreadablePartFile as e:
        run_dir = Path(getattr(args, "run_dir", None) or getattr(args, "out", None) or "").resolve()
        if args.command in RESUMABLE and run_dir in e.path.resolve().parents:
            # it moved the damaged files of its run directory aside when it started: this one broke since
            print(f"kernelmill {args.command}: {e.what}: not a readable Parquet file; it was damaged after this "
                  "command started (a run moves damaged files aside only when it starts): starting the command "
                  "again moves it aside and recomputes its rows", file=sys.stderr)
        else:
            print(f"kernelmill {args.command}: {e}", file=sys.stderr)
        return 2
    except (InputError, FileNotFoundError) as e:
        print(f"kernelmill {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGINT, previous_handler)
        if args.command == "verify" and args.candidate != given_candidate:
            Path(args.candidate).unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
