"""CLI: ``kernelmill run`` (the main job, or some of its stages), ``serve`` and ``deploy``.

    kernelmill run [--out DIR] [--stages verify,curate] [--ray ADDRESS] [--no-prefect]
    kernelmill serve [--flows e2e,verify] [--limit N]        every flow served from this box
    kernelmill deploy [--pool NAME] [--flows ...]            deployments on a process work pool

See docs/DEPLOY.md for the walkthrough (server, pool, worker, triggering runs with parameters).

Prefect (and flows/pipeline.py, flows/stages.py, which import it) is imported inside the handlers
that need it: the GPU box has no prefect, and `kernelmill run --no-prefect` must work there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from kernelmill.config import REPO_ROOT, load_settings, parse_sets, record_latest_run
from kernelmill.errors import InputError
from orchestrator.pipeline import parse_stage_names, run_stages
from orchestrator.progress import StageProgress, counts_table
from orchestrator.stages import BY_NAME, DEFAULT_STAGES, STAGES

# prefect (and flows.pipeline / flows.stages, which import it) is imported inside the commands that
# use it: it is not installed on the GPU box, where `kernelmill run --no-prefect` must still work.

RUN_COUNTS = "run_counts.json"  # <run>/run_counts.json: every stage's counts of the latest `kernelmill run`

# Flow name -> entrypoint (file path relative to the repository root : function); prefect.yaml has
# one deployment per entry (tests/test_stages.py checks that it does).
ENTRYPOINTS = {
    "e2e": "flows/pipeline.py:e2e_flow",
    **{s.name: f"flows/stages.py:{s.name}_flow" for s in STAGES},
}


def parse_names(text: str | None, known, what: str) -> list[str]:
    """``"e2e,verify"`` -> ``["e2e", "verify"]``, each checked against ``known``."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad:
        raise InputError(f"{what} {','.join(bad)}", f"unknown; choose from {', '.join(known)}")
    return names


def cmd_run(args) -> int:
    """The default stages, or ``--stages``, in list order: one Prefect flow run (flows/pipeline.py)
    or, with ``--no-prefect``, plain calls (orchestrator.pipeline.run_stages). Same stage functions.

    Prints a line per stage as it starts and ends (bars on a terminal), then a table of what every stage
    did (all the counts: ``<run>/run_counts.json``) and the per-level summary."""
    overrides = parse_sets(args.set)
    if args.backend != "auto":
        overrides["run.backend"] = args.backend
    names = parse_stage_names(args.stages)
    if args.ray:
        if not any(BY_NAME[n].ray for n in names):
            ray_stages = ", ".join(s.name for s in STAGES if s.ray)
            raise InputError(f"--ray {args.ray}", f"applies to the stages that can run on Ray ({ray_stages}) only: "
                                                  "name them in --stages (with the stages before and after that you want)")
        overrides["flows.ray_address"] = args.ray
    settings = load_settings(args.config, overrides)  # bad settings fail here, before any flow starts
    record_latest_run(args.out)  # what `kernelmill query` reads by default from this directory
    if not args.no_prefect:
        # imported before the bars start, so that its log handlers print through them
        from flows.pipeline import e2e_flow  # prefect: not installed on the GPU box (--no-prefect)
    t0 = time.perf_counter()
    with StageProgress(enabled=not args.no_progress, every_s=settings.run.progress_every_s) as shown:
        if args.no_prefect:
            result = run_stages(args.out, settings, names)
        else:
            result = e2e_flow(out=args.out, config_path=args.config, overrides=overrides, stages=names or None)
    elapsed = time.perf_counter() - t0
    done = {k: v for k, v in result.items() if k not in ("summary", "run_dir")}
    counts_file = Path(result["run_dir"]) / RUN_COUNTS
    counts_file.write_text(json.dumps(done, indent=2, default=str) + "\n")
    print(counts_table(done, shown.seconds))
    print(f"\nrun directory: {result['run_dir']}   ({elapsed:.0f} s; every count: {counts_file})\n")
    print(result["summary"])
    return 0


def _flows_for(names: list[str]) -> dict:
    """Name -> flow object for the flows named (all when none)."""
    from flows.pipeline import e2e_flow  # prefect: not installed on the GPU box
    from flows.stages import STAGE_FLOWS

    every = {"e2e": e2e_flow, **STAGE_FLOWS}
    return {n: every[n] for n in (names or every)}


def cmd_serve(args) -> int:
    """Serve flows from this process: runs triggered on the server execute here."""
    from prefect import serve

    flows = _flows_for(parse_names(args.flows, ENTRYPOINTS, "--flows"))
    deployments = [f.to_deployment(name=args.name, tags=["kernelmill"]) for f in flows.values()]
    print(f"serving {len(deployments)} deployments: " + ", ".join(f"{f.name}/{args.name}" for f in flows.values()),
          file=sys.stderr)
    serve(*deployments, limit=args.limit)
    return 0


def ensure_work_pool(name: str, pool_type: str = "process") -> bool:
    """Create the work pool when the server has none of that name; returns True when created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            pool = client.read_work_pool(name)
        except ObjectNotFound:
            try:
                client.create_work_pool(WorkPoolCreate(name=name, type=pool_type))
                return True
            except ObjectAlreadyExists:
                return False
        if pool.type != pool_type:
            raise InputError(f"work pool {name}", f"is of type {pool.type!r}, expected {pool_type!r}")
    return False


def deploy_flows(names: list[str], pool: str, *, source: str | None = None, parameters: dict | None = None,
                 deployment_name: str = "default") -> list[str]:
    """Create (or update) one deployment per named flow on a process work pool, loaded from the
    repository checkout ``source`` (default: this one). Returns ``flow-name/deployment`` names.

    A process worker runs the flow in a subprocess with ``source`` as its working directory, so the
    worker's machine must hold the checkout at the same path (or a shared filesystem)."""
    from prefect import Flow

    source = source or str(REPO_ROOT)
    ensure_work_pool(pool)
    done = []
    for name in names or list(ENTRYPOINTS):
        f = Flow.from_source(source=source, entrypoint=ENTRYPOINTS[name])
        f.deploy(name=deployment_name, work_pool_name=pool, build=False, push=False, print_next_steps=False,
                 parameters=(parameters or {}).get(name, {}), tags=["kernelmill"], ignore_warnings=True)
        done.append(f"{f.name}/{deployment_name}")
    return done


def checkout_root(start: str | Path | None = None) -> Path:
    """The kernelmill checkout ``kernelmill deploy`` runs from: the working directory or the nearest parent
    holding prefect.yaml, orchestrator/ and flows/ (a clone may differ from the one the package was installed
    from, and the deployment must name the checkout its worker will run); else the installed package's."""
    here = Path(start or os.getcwd()).resolve()
    for d in (here, *here.parents):
        if (d / "prefect.yaml").is_file() and (d / "orchestrator").is_dir() and (d / "flows").is_dir():
            return d
    return Path(REPO_ROOT)


def cmd_deploy(args) -> int:
    pool = args.pool or load_settings(args.config).flows.work_pool
    names = parse_names(args.flows, ENTRYPOINTS, "--flows")
    source = checkout_root()
    done = deploy_flows(names, pool, source=str(source), deployment_name=args.name)
    print(f"checkout: {source}")
    print(f"work pool: {pool} (process)")
    for d in done:
        print(f"deployed {d}")
    print(f"\nstart a worker:   prefect worker start --pool {pool}")
    print(f"trigger a run:    prefect deployment run '{done[0]}' -p out=runs/prod")
    return 0


def register(sub) -> None:
    p = sub.add_parser("run", help="run the main job end to end (tasks -> verified dialogues -> corpora)",
                       description="Run every stage in order as a Prefect flow (an ephemeral Prefect server "
                                   "is started unless PREFECT_API_URL points at one), writing Parquet tables, "
                                   "the corpora and a report into --out, then print a DuckDB summary. "
                                   "Re-running on the same --out resumes: nothing is lost or duplicated.")
    p.add_argument("--out", default="runs/default", help="run directory (created; re-running resumes it)")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"],
                   help="verifier backend; auto: cuda when a GPU is visible, else cpu")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a setting, e.g. --set nnsmith.n=0 or --set mine.workers=2 (repeatable)")
    p.add_argument("--stages", metavar="S1,S2",
                   help=f"run these stages, in list order ({', '.join(BY_NAME)}; default: "
                        f"{', '.join(DEFAULT_STAGES)})")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="verify on a Ray cluster: 'local' (start one here), 'auto', or 'ray://host:10001'")
    p.add_argument("--no-prefect", action="store_true",
                   help="call the stage functions directly, without Prefect (e.g. on a GPU box without prefect)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress: no bars on a terminal, no progress lines elsewhere")
    p.set_defaults(handler=cmd_run)

    s = sub.add_parser("serve", help="serve kernelmill's flows from this machine (no work pool needed)",
                       description="Register a deployment per flow on the Prefect server (PREFECT_API_URL) "
                                   "and execute their runs in this process until interrupted.")
    s.add_argument("--flows", metavar="F1,F2", help=f"flows to serve (default all: {', '.join(ENTRYPOINTS)})")
    s.add_argument("--name", default="serve", help="deployment name (runs: FLOW/NAME)")
    s.add_argument("--limit", type=int, default=2, help="flow runs executed at the same time")
    s.set_defaults(handler=cmd_serve)

    d = sub.add_parser("deploy", help="create deployments of kernelmill's flows on a process work pool",
                       description="Create the process work pool if missing and one deployment per flow, "
                                   "loaded from this checkout. Then start a worker "
                                   "(prefect worker start --pool NAME) and trigger runs.")
    d.add_argument("--pool", help="work pool name (default: flows.work_pool)")
    d.add_argument("--flows", metavar="F1,F2", help=f"flows to deploy (default all: {', '.join(ENTRYPOINTS)})")
    d.add_argument("--name", default="default", help="deployment name (runs: FLOW/NAME)")
    d.set_defaults(handler=cmd_deploy)
