"""CLI: ``kernelmill run`` (the main job end to end)."""

from __future__ import annotations

import json
import time

from kernelmill.errors import InputError


def parse_sets(pairs: list[str] | None) -> dict:
    """``["run.nnsmith_n=0", "verify.trials=7"]`` -> ``{"run.nnsmith_n": 0, "verify.trials": 7}``."""
    from kernelmill.config import _parse_env_value

    out = {}
    for p in pairs or []:
        key, sep, raw = p.partition("=")
        if not sep or "." not in key:
            raise InputError(f"--set {p}", "expected SECTION.KEY=VALUE")
        out[key.strip()] = _parse_env_value(raw.strip())
    return out


def cmd_run(args) -> int:
    overrides = parse_sets(args.set)
    t0 = time.perf_counter()
    if args.no_prefect:
        from kernelmill.config import apply_overrides
        from kernelmill.pipeline import run_all

        result = run_all(args.out, apply_overrides(args.cfg, overrides), args.backend)
    else:
        from flows.pipeline import e2e_flow

        result = e2e_flow(out=args.out, backend=args.backend, config_path=args.config, overrides=overrides)
    elapsed = time.perf_counter() - t0
    stages = {k: v for k, v in result.items() if k not in ("summary", "run_dir")}
    print(json.dumps(stages, indent=2, default=str))
    print(f"\nrun directory: {result['run_dir']}   ({elapsed:.0f} s)\n")
    print(result["summary"])
    return 0


def register(sub) -> None:
    p = sub.add_parser("run", help="run the main job end to end (tasks -> verified dialogues -> corpora)",
                       description="Run every stage in order as a Prefect flow (an ephemeral Prefect server "
                                   "is started unless PREFECT_API_URL points at one), writing Parquet tables, "
                                   "the corpora and a report into --out, then print a DuckDB summary.")
    p.add_argument("--out", default="runs/default", help="run directory (created; re-running resumes it)")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"],
                   help="verifier backend; auto: cuda when a GPU is visible, else cpu")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. --set run.nnsmith_n=0 (repeatable)")
    p.add_argument("--no-prefect", action="store_true",
                   help="call the stage functions directly, without Prefect (e.g. on a GPU box without prefect)")
    p.set_defaults(handler=cmd_run)
