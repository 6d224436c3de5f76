"""CLI: ``kernelmill verify TASK.py CANDIDATE [--backend cuda|cpu|auto] [--json]`` and
``kernelmill metrics RUN_DIR [--k 8] [--slots N] [--json]`` (with the run's verification cost: candidates per
GPU-hour and seconds per candidate by stage, verifier/serve/cost.py).

``verify`` prints one verdict and exits 0 whatever the candidate did; it exits 2 (an InputError,
printed by flows/cli.py) only when the verifier itself cannot run: the task file is missing or not
a runnable KernelBench program, the candidate file is missing, the backend is unknown or absent, or
there is no compiler.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernelmill import store
from kernelmill.errors import InputError
from kernelmill.schema import content_hash, task_id_for, to_json
from verifier.serve.metrics import summarize_verdicts


def register(subparsers) -> None:
    p = subparsers.add_parser("verify", help="verify one candidate kernel against a task program")
    p.add_argument("task", help="KernelBench-format task file (class Model, get_inputs, get_init_inputs)")
    p.add_argument("candidate", help="a Python file defining ModelNew, or a model response with a ```python block")
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(handler=_verify)
    m = subparsers.add_parser("metrics", help="pass@k, avg@k and fast_p over a run directory's verdicts")
    m.add_argument("run_dir")
    m.add_argument("--k", type=int, default=8)
    m.add_argument("--slots", type=int, default=0,
                   help="execution slots that shared one GPU in the run, for the verification cost's GPU-hours "
                        "(default: the configured [verify] exec_workers; 0, automatic: this machine's count)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(handler=_metrics)


def _read(path: str, what: str, lenient: bool = False) -> str:
    """The file's text. ``lenient`` (the candidate: anything a model wrote gets a verdict): bytes that are
    not UTF-8 become U+FFFD and the extract stage judges what is left; else such a file is an InputError."""
    f = Path(path)
    if not f.is_file():
        raise InputError(path, f"{what} does not exist")
    try:
        return f.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        if lenient:
            return f.read_bytes().decode("utf-8", errors="replace").replace("\x00", "\ufffd")
        raise InputError(path, f"{what} is not UTF-8 text") from None


def format_verdict(v) -> str:
    lines = [f"candidate   {v.candidate_id or '-'}", f"status      {v.status}  (stage reached: {v.stage_reached})",
             f"reward      {v.reward:.3f}", f"cheats      {', '.join(v.cheats) or 'none'}"]
    if v.runtime_us is not None:
        lines.append(f"runtime     {v.runtime_us:.1f} us  eager {v.eager_us:.1f} us  speedup {v.speedup_eager:.2f}x"
                     + (f"  compile {v.compile_us:.1f} us ({v.speedup_compile:.2f}x)" if v.compile_us else ""))
    if v.device:
        lines.append(f"device      {v.device}")
    lines += ["", v.feedback]
    return "\n".join(lines)


def _verify(args: argparse.Namespace) -> int:
    from kernelmill.settings import parse_section
    from verifier.engine import load_reference  # here: torch stays out of the CLI
    from verifier.entry import verify_candidate

    task_code = _read(args.task, "task file")
    load_reference(task_code, args.task)
    cand = _read(args.candidate, "candidate file", lenient=True)
    cfg = parse_section("verify", args.cfg.get("verify", {}), "[verify]")
    v = verify_candidate(task_code, cand, backend=args.backend, config=cfg, task_id=task_id_for(task_code),
                         candidate_id="c" + content_hash(cand))
    print(to_json(v) if args.json else format_verdict(v))
    return 0


def _metrics(args: argparse.Namespace) -> int:

    if not Path(args.run_dir).is_dir():
        raise InputError(args.run_dir, "run directory does not exist")
    from verifier.serve.cost import cost_section, run_cost

    verdicts = store.read_records(args.run_dir, "verdicts")
    summary = summarize_verdicts(verdicts, k=args.k)
    slots = args.slots or int((getattr(args, "cfg", None) or {}).get("verify", {}).get("exec_workers", 0) or 0)
    if not slots:  # automatic (exec_workers 0): what this machine's count would be for the run's backend
        from verifier.common.config import VerifyConfig

        slots = VerifyConfig(exec_workers=0).exec_children("cuda" if any(v.backend == "cuda" for v in verdicts) else "cpu")
    if slots < 1:
        raise InputError("--slots", f"must be >= 1, got {slots}")
    cost = run_cost(args.run_dir, slots_per_gpu=slots)
    if args.json:
        print(json.dumps({**summary, "verification_cost": cost.as_dict() if cost else None}, sort_keys=True))
    else:
        for key, val in summary.items():
            print(f"{key:20s} {val:.4f}" if isinstance(val, float) else f"{key:20s} {val}")
        print("\n" + "\n".join(cost_section(cost)))
    return 0
