"""The end-to-end Prefect flow: a thin layer over kernelmill.pipeline's stage functions.

Each stage is one Prefect task (retries, a timeout, a state in the UI); the stages themselves are
idempotent over the run directory, so a retried or re-run flow adds no duplicate rows. Prefect's
own result caching is off for them: the run directory is the cache.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from kernelmill import pipeline
from kernelmill.config import apply_overrides, load_config, record_latest_run


@task(name="tasks", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def tasks_stage(run_dir: str, cfg: dict) -> dict:
    return pipeline.stage_tasks(run_dir, cfg)


@task(name="dialogues", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE, tags=["gpu"])
def dialogues_stage(run_dir: str, cfg: dict, backend: str | None) -> dict:
    return pipeline.stage_dialogues(run_dir, cfg, backend)


@task(name="curate", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def curate_stage(run_dir: str, cfg: dict) -> dict:
    return pipeline.stage_curate(run_dir, cfg)


@flow(name="kernelmill-e2e", log_prints=True)
def e2e_flow(out: str = "runs/default", backend: str = "auto", config_path: str | None = None,
             overrides: dict | None = None) -> dict:
    """Tasks -> candidates, verdicts, dialogues -> corpora, then a DuckDB summary."""
    logger = get_run_logger()
    cfg = apply_overrides(load_config(config_path), overrides)
    run_dir = str(Path(out).resolve())
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    record_latest_run(run_dir)
    result = {"run_dir": run_dir}
    result["tasks"] = tasks_stage(run_dir, cfg)
    logger.info("tasks: %s", result["tasks"])
    result["dialogues"] = dialogues_stage(run_dir, cfg, None if backend == "auto" else backend)
    logger.info("dialogues: %s", result["dialogues"])
    result["curate"] = curate_stage(run_dir, cfg)
    result["summary"] = pipeline.summarize(run_dir)
    create_markdown_artifact(key="kernelmill-e2e-summary",
                             markdown=f"# kernelmill run {run_dir}\n\n```\n{result['summary']}\n```\n",
                             description="Per-level summary computed by DuckDB over the run's Parquet files")
    return result
