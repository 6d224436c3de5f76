"""The end-to-end Prefect flow: a thin layer over kernelmill.pipeline's stage functions.

Each stage is one Prefect task (retries, a timeout, a state in the UI); the stages themselves are
idempotent over the run directory, so a retried or re-run flow adds no duplicate rows. Prefect's
own result caching is off for them: the run directory is the cache. Each stage publishes a table
and a markdown artifact (flows/stages.py: publish_stage), long stages a progress artifact, and
the dialogue stage holds a slot of the ``kernelmill-gpu`` concurrency limit while it runs.
"""

from __future__ import annotations

import time

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.stages import PrefectProgress, gpu_slot, publish_stage, setup_run, stage_opts
from kernelmill import pipeline


@task(name="tasks", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def tasks_stage(run_dir: str, cfg: dict) -> dict:
    return pipeline.stage_tasks(run_dir, cfg)


@task(name="dialogues", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE, tags=["gpu"])
def dialogues_stage(run_dir: str, cfg: dict, backend: str | None) -> dict:
    with gpu_slot(cfg):
        return pipeline.stage_dialogues(run_dir, cfg, backend, progress=PrefectProgress())


@task(name="curate", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def curate_stage(run_dir: str, cfg: dict) -> dict:
    return pipeline.stage_curate(run_dir, cfg)


@flow(name="kernelmill-e2e", log_prints=True)
def e2e_flow(out: str = "runs/default", backend: str = "auto", config_path: str | None = None,
             overrides: dict | None = None) -> dict:
    """Tasks -> candidates, verdicts, dialogues -> corpora, then a DuckDB summary.

    Started again on the same ``out`` it resumes: partial writes of a killed attempt are removed
    and every stage skips the rows already stored."""
    logger = get_run_logger()
    cfg, run_dir = setup_run(out, config_path, overrides)
    opts = stage_opts(cfg)
    result = {"run_dir": run_dir}
    for name, call in (("tasks", lambda: tasks_stage.with_options(**opts)(run_dir, cfg)),
                       ("dialogues", lambda: dialogues_stage.with_options(**opts)(
                           run_dir, cfg, None if backend == "auto" else backend)),
                       ("curate", lambda: curate_stage.with_options(**opts)(run_dir, cfg))):
        t0 = time.perf_counter()
        result[name] = call()
        logger.info("%s: %s", name, result[name])
        publish_stage(name, run_dir, result[name], time.perf_counter() - t0)
    result["summary"] = pipeline.summarize(run_dir)
    create_markdown_artifact(key="kernelmill-e2e-summary",
                             markdown=f"# kernelmill run {run_dir}\n\n```\n{result['summary']}\n```\n",
                             description="Per-level summary computed by DuckDB over the run's Parquet files")
    return result
