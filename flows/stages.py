"""One Prefect flow per stage of orchestrator/stages.py's list, made from the list.

    <name>_flow     for every Stage (training included): the stage's ``run`` as one Prefect task over ``out``

Every stage flow takes the same parameters: ``out`` (the run directory), ``backend`` (sets
``run.backend`` unless "auto"), ``config_path`` and ``overrides`` (``{"section.key": value}``, the
``--set`` of the CLI; e.g. ``{"load.dir": "/data/kb", "flows.ray_address": "auto"}``).

What Prefect adds, and nothing more: retries and a timeout per stage task (safe because every
stage is idempotent over the run directory), a global concurrency limit ``kernelmill-gpu`` held by
the stages marked ``gpu``, a progress artifact while a long stage runs, and a table + markdown
artifact that summarise each stage run. Prefect's result caching is off: the run directory is the
cache (a stage skips what is stored).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import (create_markdown_artifact, create_progress_artifact, create_table_artifact,
                               update_progress_artifact)
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.settings import PREFECT_API_URL

from kernelmill import store
from kernelmill.config import load_settings
from kernelmill.errors import InputError
from kernelmill.settings import Settings, with_overrides
from orchestrator import pipeline
from orchestrator.progress import counts_line
from orchestrator.stages import RAW, STAGES, Stage

GPU_LIMIT = "kernelmill-gpu"


# ---------------------------------------------------------------------------- shared pieces


def setup_run(out: str, config_path: str | None, overrides: dict | None, backend: str = "auto") -> tuple[Settings, str]:
    """Load the settings, create the run directory, remove partial writes of a killed attempt and move
    damaged part files aside (orchestrator.pipeline.prepare_run). A bad key names the flow parameter it came
    from (``overrides``, ``backend``), as a deployment run is given them."""
    settings = load_settings(config_path, dict(overrides or {}), overrides_origin="flow parameter overrides")
    if backend != "auto":
        try:
            settings = with_overrides(settings, {"run.backend": backend}, origin="flow parameter backend")
        except InputError as e:
            raise InputError(f"flow parameter backend={backend!r}", e.problem) from None
    return settings, str(pipeline.prepare_run(out))


def stage_opts(settings: Settings) -> dict:
    """Retries and timeout of a stage task, from the [flows] settings."""
    f = settings.flows
    return {"retries": f.task_retries, "retry_delay_seconds": f.retry_delay_s, "timeout_seconds": f.stage_timeout_s}


def table_counts(run_dir: str) -> dict[str, int]:
    """Rows per table of a run directory (raw tasks included), for the summary artifacts."""
    out = {f"{RAW}/tasks": len(store.stored_ids(Path(run_dir) / RAW, "tasks"))}
    out.update({t: len(store.stored_ids(run_dir, t)) for t in store.TABLES})
    return out


def _flat(d: dict, prefix: str = "") -> list[dict]:
    rows = []
    for k, v in d.items():
        if isinstance(v, dict):
            rows += _flat(v, f"{prefix}{k}.")
        else:
            rows.append({"key": f"{prefix}{k}", "value": v if isinstance(v, (int, float, str, bool)) or v is None
                         else json.dumps(v, default=str)})
    return rows


def publish_stage(stage: str, run_dir: str, counts: dict, seconds: float) -> None:
    """A table artifact of the stage's counts and a markdown artifact with the run's row counts."""
    key = f"kernelmill-{stage}".replace("_", "-").lower()
    create_table_artifact(key=f"{key}-counts", table=_flat(counts),
                          description=f"kernelmill {stage}: what the stage did in {run_dir}")
    rows = table_counts(run_dir)
    md = [f"# kernelmill {stage}", "", f"run directory: `{run_dir}`  ", f"stage time: {seconds:.1f} s", "",
          "| table | rows |", "| --- | ---: |", *(f"| {t} | {n} |" for t, n in rows.items() if n)]
    create_markdown_artifact(key=f"{key}-summary", markdown="\n".join(md) + "\n",
                             description=f"rows per table after {stage}")


class PrefectProgress:
    """A ``progress(stage, done, total)`` callback that moves a Prefect progress artifact (and the
    CLI's bar, when the flow runs under `kernelmill run`).

    Updates are throttled (at most one every ``min_interval_s`` unless the stage finished), so a
    stage over many thousands of items does not flood the API."""

    def __init__(self, min_interval_s: float = 2.0):
        self.min_interval_s = min_interval_s
        self._ids: dict[str, object] = {}
        self._last: dict[str, float] = {}

    def note(self, stage: str, line: str) -> None:
        """A stage's own line (a heartbeat, a verdict): to the CLI's reporter, not to the artifact."""
        pipeline.progress_note(stage, line)

    def __call__(self, stage: str, done: int, total: int) -> None:
        pipeline.progress_hook(stage, done, total)
        pct = 100.0 * done / total if total else 100.0
        now = time.monotonic()
        if stage not in self._ids:
            self._ids[stage] = create_progress_artifact(progress=pct, description=f"kernelmill {stage}: {done}/{total}")
            self._last[stage] = now
        elif done >= total or now - self._last[stage] >= self.min_interval_s:
            update_progress_artifact(artifact_id=self._ids[stage], progress=pct,
                                     description=f"kernelmill {stage}: {done}/{total}")
            self._last[stage] = now


def ensure_gpu_limit(slots: int) -> None:
    """Create the ``kernelmill-gpu`` global concurrency limit when the server has none.

    An existing limit is left as it is: an operator may have sized it to the box's GPUs."""
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(GPU_LIMIT)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=GPU_LIMIT, limit=max(1, slots)))
            except ObjectAlreadyExists:
                pass


def gpu_slot(settings: Settings):
    """Hold one slot of ``kernelmill-gpu`` (one verifier or dialogue batch per GPU at a time)."""
    if not PREFECT_API_URL.value():
        # An ephemeral server lives as long as this one flow run, so there is nothing to share a GPU
        # with; and it runs no lease-expiry service, so a slot held by a killed run would never free.
        return contextlib.nullcontext()
    ensure_gpu_limit(settings.flows.gpu_concurrency)
    # leases are renewed while held; a run killed while holding one frees it within a minute
    return concurrency(GPU_LIMIT, occupy=1, lease_duration=60)


# ---------------------------------------------------------------------------- one task, one flow per stage


@task(cache_policy=NO_CACHE)
def _stage_task(name: str, run_dir: str, settings: Settings) -> dict:
    stage = next(s for s in STAGES if s.name == name)
    with gpu_slot(settings) if stage.gpu else contextlib.nullcontext():
        return pipeline.run_stage(stage, Path(run_dir), settings, PrefectProgress())


def run_stage_task(stage: Stage, run_dir: str, settings: Settings) -> dict:
    """``stage.run`` as a Prefect task run (named after the stage, retried, timed out), then its artifacts."""
    t0 = time.perf_counter()
    opts = stage_opts(settings)
    counts = _stage_task.with_options(name=stage.name, tags=["gpu"] if stage.gpu else [], **opts)(
        stage.name, run_dir, settings)
    get_run_logger().info("%s: %s", stage.name, counts_line(counts))  # every count: the table artifact
    publish_stage(stage.name, run_dir, counts, time.perf_counter() - t0)
    return counts


def make_stage_flow(stage: Stage):
    """The flow ``kernelmill-<name>`` that runs one stage over a run directory."""

    def stage_flow(out: str = "runs/default", backend: str = "auto", config_path: str | None = None,
                   overrides: dict | None = None) -> dict:
        settings, run_dir = setup_run(out, config_path, overrides, backend)
        return run_stage_task(stage, run_dir, settings)

    stage_flow.__name__ = stage_flow.__qualname__ = f"{stage.name}_flow"
    stage_flow.__doc__ = (f"{stage.help[0].upper()}{stage.help[1:]}. Reads {', '.join(stage.reads) or 'no table'}; "
                          f"writes {', '.join(stage.writes)}; settings [{stage.section}].")
    return flow(name=f"kernelmill-{stage.name}", log_prints=True, description=stage_flow.__doc__)(stage_flow)


# Name -> flow; module attributes <name>_flow are the entrypoints of prefect.yaml's deployments.
STAGE_FLOWS = {s.name: make_stage_flow(s) for s in STAGES}
globals().update({f"{name}_flow": f for name, f in STAGE_FLOWS.items()})
