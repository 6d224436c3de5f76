"""The end-to-end Prefect flow: the stages of orchestrator/stages.py's list, each one Prefect task.

``e2e_flow`` runs the default stages (or those named by ``stages``) in list order through
flows/stages.py's ``run_stage_task`` -- the same ``Stage.run`` functions that ``kernelmill run
--no-prefect`` and the stage subcommands call -- with retries, a timeout, artifacts per stage and
the ``kernelmill-gpu`` concurrency limit around the stages marked gpu. The stages are idempotent
over the run directory, so a retried or re-run flow adds no duplicate rows.
"""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from flows.stages import run_stage_task, setup_run
from orchestrator.pipeline import parse_stage_names, summary_if_any
from orchestrator.stages import DEFAULT_STAGES, STAGES


@flow(name="kernelmill-e2e", log_prints=True)
def e2e_flow(out: str = "runs/default", backend: str = "auto", config_path: str | None = None,
             overrides: dict | None = None, stages: list[str] | None = None) -> dict:
    """Tasks -> candidates, verdicts, dialogues -> corpora, then a DuckDB summary.

    ``stages``: the stages to run (default: every default stage), in list order whatever order
    they are named in. Started again on the same ``out`` it resumes: partial writes of a killed
    attempt are removed and every stage skips the rows already stored."""
    wanted = set(parse_stage_names(",".join(stages)) if stages else DEFAULT_STAGES)
    settings, run_dir = setup_run(out, config_path, overrides, backend)
    result: dict = {"run_dir": run_dir}
    for stage in STAGES:
        if stage.name in wanted:
            result[stage.name] = run_stage_task(stage, run_dir, settings)
    result["summary"] = summary_if_any(run_dir)
    create_markdown_artifact(key="kernelmill-e2e-summary",
                             markdown=f"# kernelmill run {run_dir}\n\n```\n{result['summary']}\n```\n",
                             description="Per-level summary computed by DuckDB over the run's Parquet files")
    return result
