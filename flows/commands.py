"""CLI: ``kernelmill run`` (the main job, or some of its stages), ``serve`` and ``deploy``.

    kernelmill run [--out DIR] [--stages verify,curate] [--ray ADDRESS] [--no-prefect]
    kernelmill serve [--flows e2e,verify] [--limit N]        every flow served from this box
    kernelmill deploy [--pool NAME] [--flows ...]            deployments on a process work pool

See docs/DEPLOY.md for the walkthrough (server, pool, worker, triggering runs with parameters).
"""

from __future__ import annotations

import json
import sys
import time

from kernelmill.errors import InputError

# The stages `run --stages` accepts, in pipeline order; "tasks" (= load, mine, nnsmith,
# annotate) and "dialogues" (= repair) are the end-to-end flow's coarser names.
STAGES = ("load", "mine", "nnsmith", "annotate", "tasks", "generate", "verify", "repair", "dialogues", "curate")

# Flow name -> entrypoint (file path relative to the repository root : function).
ENTRYPOINTS = {
    "e2e": "flows/pipeline.py:e2e_flow",
    **{name: f"flows/stages.py:{name}_flow" for name in
       ("load", "mine", "nnsmith", "annotate", "generate", "verify", "repair", "curate", "train")},
}


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


def parse_names(text: str | None, known, what: str) -> list[str]:
    """``"verify,curate"`` -> ``["verify", "curate"]``, each checked against ``known``."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad:
        raise InputError(f"{what} {','.join(bad)}", f"unknown; choose from {', '.join(known)}")
    return names


class ProgressBar:
    """A rich progress bar per stage, fed by ``kernelmill.pipeline``'s progress hook.

    Draws on stderr only when it is a terminal (a log file gets no control characters)."""

    def __init__(self, enabled: bool = True, console=None):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        console = console or Console(stderr=True)
        self.enabled = enabled and console.is_terminal
        self.progress = Progress(TextColumn("[bold]{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)
        self.bars: dict[str, int] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.bars:
            self.bars[stage] = self.progress.add_task(stage, total=total)
        self.progress.update(self.bars[stage], completed=done, total=total)

    def __enter__(self):
        from kernelmill.pipeline import set_progress_hook

        if self.enabled:
            self.progress.start()
            self._prev = set_progress_hook(self)
        return self

    def __exit__(self, *exc) -> None:
        from kernelmill.pipeline import set_progress_hook

        if self.enabled:
            set_progress_hook(self._prev)
            self.progress.stop()


def run_stages(out: str, cfg: dict, stages: list[str], backend: str, ray_address: str = "") -> dict:
    """The named stages in pipeline order, called directly (no Prefect)."""
    from pathlib import Path

    from kernelmill import pipeline
    from kernelmill.config import record_latest_run

    run_dir = str(Path(out).resolve())
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    record_latest_run(run_dir)
    pipeline.sweep_partial_writes(run_dir)
    b = None if backend == "auto" else backend
    verify_fn = None
    if ray_address:
        from flows.ray_verify import make_ray_verify_fn

        verify_fn = make_ray_verify_fn(ray_address, workers=cfg.get("flows", {}).get("ray_workers", 0))
    calls = {
        "load": lambda: pipeline.stage_load(run_dir, cfg),
        "mine": lambda: pipeline.stage_mine(run_dir, cfg),
        "nnsmith": lambda: pipeline.stage_nnsmith(run_dir, cfg),
        "annotate": lambda: pipeline.stage_annotate(run_dir, cfg),
        "tasks": lambda: pipeline.stage_tasks(run_dir, cfg),
        "generate": lambda: pipeline.stage_generate(run_dir, cfg, b),
        "verify": lambda: pipeline.stage_verify(run_dir, cfg, b, verify_fn=verify_fn),
        "repair": lambda: pipeline.stage_repair(run_dir, cfg, b),
        "dialogues": lambda: pipeline.stage_dialogues(run_dir, cfg, b),
        "curate": lambda: pipeline.stage_curate(run_dir, cfg),
    }
    result: dict = {"run_dir": run_dir}
    for name in STAGES:
        if name in stages:
            result[name] = calls[name]()
    result["summary"] = summary_if_any(run_dir)
    return result


def summary_if_any(run_dir: str) -> str:
    """The DuckDB summary once the run has tasks and verdicts; a note before that."""
    from pathlib import Path

    from kernelmill import pipeline

    if all(any((Path(run_dir) / t).glob("part-*.parquet")) for t in ("tasks", "verdicts")):
        return pipeline.summarize(run_dir)
    return "(no summary yet: the run has no tasks or no verdicts)"


def run_stage_flows(out: str, names: list[str], backend: str, config_path: str | None, overrides: dict,
                    ray_address: str = "") -> dict:
    """The named stages in pipeline order, each as its own flow run (flows/stages.py)."""
    from flows import stages as sf

    result: dict = {}
    for name in STAGES:
        if name not in names:
            continue
        common = {"out": out, "config_path": config_path, "overrides": overrides}
        if name == "tasks":
            for sub in ("load", "mine", "nnsmith", "annotate"):
                result[sub] = sf.STAGE_FLOWS[sub](**common)
        elif name in ("generate", "repair", "dialogues"):
            result[name] = sf.STAGE_FLOWS["repair" if name == "dialogues" else name](backend=backend, **common)
        elif name == "verify":
            result[name] = sf.verify_flow(backend="all" if backend == "auto" else backend, ray_address=ray_address, **common)
        else:
            result[name] = sf.STAGE_FLOWS[name](**common)
    from pathlib import Path

    run_dir = str(Path(out).resolve())
    result["run_dir"] = run_dir
    result["summary"] = summary_if_any(run_dir)
    return result


def cmd_run(args) -> int:
    from kernelmill.config import apply_overrides

    overrides = parse_sets(args.set)
    stages = parse_names(args.stages, STAGES, "--stages")
    if args.ray and "verify" not in stages:
        raise InputError(f"--ray {args.ray}", "applies to the verify stage only: add --stages verify (with the "
                                              "stages before and after it that you want)")
    t0 = time.perf_counter()
    with ProgressBar(enabled=not args.no_progress):
        if stages and args.no_prefect:
            result = run_stages(args.out, apply_overrides(args.cfg, overrides), stages, args.backend, args.ray or "")
        elif stages:
            result = run_stage_flows(args.out, stages, args.backend, args.config, overrides, args.ray or "")
        elif args.no_prefect:
            from kernelmill.pipeline import run_all

            result = run_all(args.out, apply_overrides(args.cfg, overrides), args.backend)
        else:
            from flows.pipeline import e2e_flow

            result = e2e_flow(out=args.out, backend=args.backend, config_path=args.config, overrides=overrides)
    elapsed = time.perf_counter() - t0
    done = {k: v for k, v in result.items() if k not in ("summary", "run_dir")}
    print(json.dumps(done, indent=2, default=str))
    print(f"\nrun directory: {result['run_dir']}   ({elapsed:.0f} s)\n")
    print(result["summary"])
    return 0


def _flows_for(names: list[str]) -> dict:
    """Name -> flow object for the flows named (all when none)."""
    from flows.pipeline import e2e_flow
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

    from kernelmill.config import REPO_ROOT

    source = source or str(REPO_ROOT)
    ensure_work_pool(pool)
    done = []
    for name in names or list(ENTRYPOINTS):
        f = Flow.from_source(source=source, entrypoint=ENTRYPOINTS[name])
        f.deploy(name=deployment_name, work_pool_name=pool, build=False, push=False, print_next_steps=False,
                 parameters=(parameters or {}).get(name, {}), tags=["kernelmill"], ignore_warnings=True)
        done.append(f"{f.name}/{deployment_name}")
    return done


def cmd_deploy(args) -> int:
    pool = args.pool or args.cfg.get("flows", {}).get("work_pool", "kernelmill-process")
    names = parse_names(args.flows, ENTRYPOINTS, "--flows")
    done = deploy_flows(names, pool, deployment_name=args.name)
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
                   help="override a config value, e.g. --set run.nnsmith_n=0 (repeatable)")
    p.add_argument("--stages", metavar="S1,S2",
                   help=f"run only these stages, in pipeline order ({', '.join(STAGES)}), each as its own flow")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="verify on a Ray cluster: 'local' (start one here), 'auto', or 'ray://host:10001'")
    p.add_argument("--no-prefect", action="store_true",
                   help="call the stage functions directly, without Prefect (e.g. on a GPU box without prefect)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
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
