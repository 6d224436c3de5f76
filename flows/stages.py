"""One Prefect flow per stage, each a thin layer over a stage function of kernelmill.pipeline.

    load_flow       KernelBench / seed programs      -> <out>/raw/tasks
    mine_flow       mined code (dir, git, hf:)        -> <out>/raw/tasks + mine_report.json
    nnsmith_flow    NNSmith graphs                    -> <out>/raw/tasks
    annotate_flow   raw tasks                         -> <out>/tasks
    generate_flow   tasks                             -> <out>/candidates (first turn)
    verify_flow     candidates without a verdict      -> <out>/verdicts (locally, or on a Ray cluster)
    repair_flow     tasks without dialogues           -> candidates, verdicts, dialogues (multi-turn)
    curate_flow     a run directory                   -> sft / rft / rl corpora, card, report
    train_flow      a corpus                          -> checkpoints (``kernelmill train ...``)

What Prefect adds, and nothing more: retries and a timeout per stage task (safe because every
stage is idempotent over the run directory), result caching for the pure gatherers whose inputs
repeat across runs (the same seed directory, source tree or NNSmith seed), a global concurrency
limit ``kernelmill-gpu`` around GPU work, a progress artifact while a long stage runs, and a
table + markdown artifact that summarise each stage run.

Every flow takes ``out`` (the run directory), ``config_path`` and ``overrides``
(``{"section.key": value}``), like ``e2e_flow`` in flows/pipeline.py.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import (create_markdown_artifact, create_progress_artifact, create_table_artifact,
                               update_progress_artifact)
from prefect.cache_policies import INPUTS, NO_CACHE, TASK_SOURCE

from kernelmill import pipeline, store
from kernelmill.config import apply_overrides, load_config, record_latest_run
from kernelmill.schema import content_hash

GPU_LIMIT = "kernelmill-gpu"
GATHER_CACHE_DAYS = 7


# ---------------------------------------------------------------------------- shared pieces


def setup_run(out: str, config_path: str | None, overrides: dict | None) -> tuple[dict, str]:
    """Load the config, create the run directory, remove partial writes of a killed attempt."""
    cfg = apply_overrides(load_config(config_path), overrides)
    run_dir = str(Path(out).resolve())
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    record_latest_run(run_dir)
    pipeline.sweep_partial_writes(run_dir)
    return cfg, run_dir


def stage_opts(cfg: dict) -> dict:
    """Retries and timeout of a stage task, from the [flows] config section."""
    f = cfg.get("flows", {})
    return {"retries": f.get("task_retries", 1), "retry_delay_seconds": f.get("retry_delay_s", 10),
            "timeout_seconds": f.get("stage_timeout_s", 43200)}


def table_counts(run_dir: str) -> dict[str, int]:
    """Rows per table of a run directory (raw tasks included), for the summary artifacts."""
    out = {f"raw/{t}": len(store.stored_ids(Path(run_dir) / pipeline.RAW, t)) for t in ("tasks",)}
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
    """A ``progress(stage, done, total)`` callback that moves a Prefect progress artifact.

    Updates are throttled (at most one every ``min_interval_s`` unless the stage finished), so a
    stage over many thousands of items does not flood the API."""

    def __init__(self, min_interval_s: float = 2.0):
        self.min_interval_s = min_interval_s
        self._ids: dict[str, object] = {}
        self._last: dict[str, float] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if pipeline._progress_hook is not None:  # the CLI's bar, when the flow runs under `kernelmill run`
            pipeline._progress_hook(stage, done, total)
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
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(GPU_LIMIT)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=GPU_LIMIT, limit=max(1, slots)))
            except ObjectAlreadyExists:
                pass


def gpu_slot(cfg: dict):
    """Hold one slot of ``kernelmill-gpu`` (one verifier or dialogue batch per GPU at a time)."""
    import contextlib

    from prefect.concurrency.sync import concurrency
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        # An ephemeral server lives as long as this one flow run, so there is nothing to share a GPU
        # with; and it runs no lease-expiry service, so a slot held by a killed run would never free.
        return contextlib.nullcontext()
    ensure_gpu_limit(cfg.get("flows", {}).get("gpu_concurrency", 1))
    # leases are renewed while held; a run killed while holding one frees it within a minute
    return concurrency(GPU_LIMIT, occupy=1, lease_duration=60)


# ---------------------------------------------------------------------------- cached gatherers
# Pure functions of their inputs, so their results are cached by Prefect across runs; writing
# them into a run directory is a separate, uncached step.


def _source_key(source: str) -> str:
    """A local source is keyed by its content; a URL or ``hf:`` name by itself."""
    path = pipeline._repo_path(source)
    return content_hash(source, pipeline.dir_fingerprint(path) if path.exists() else "")


def _seed_key(context, params) -> str:
    return "seed-" + _source_key(params["source"])


def _mine_key(context, params) -> str:
    return "mine-" + _source_key(params["source"]) + "-" + content_hash(json.dumps(params["mine_cfg"], sort_keys=True))


@task(name="gather-seed", cache_key_fn=_seed_key, cache_expiration=timedelta(days=GATHER_CACHE_DAYS),
      persist_result=True)
def gather_seed_task(source: str) -> list:
    return pipeline.gather_seed(source)


@task(name="gather-mined", cache_key_fn=_mine_key, cache_expiration=timedelta(days=GATHER_CACHE_DAYS),
      persist_result=True, retries=1)
def gather_mined_task(source: str, mine_cfg: dict) -> tuple[list, dict]:
    return pipeline.gather_mined(source, mine_cfg)


@task(name="gather-nnsmith", cache_policy=INPUTS + TASK_SOURCE, cache_expiration=timedelta(days=GATHER_CACHE_DAYS),
      persist_result=True, retries=1)
def gather_nnsmith_task(n: int, seed: int, nnsmith_cfg: dict) -> tuple[list, dict]:
    return pipeline.gather_nnsmith(n, seed, nnsmith_cfg)


@task(name="save-gathered", cache_policy=NO_CACHE)
def save_gathered_task(run_dir: str, what: str, settings: dict, tasks: list) -> int:
    return pipeline.save_gathered(run_dir, what, settings, tasks)


# ---------------------------------------------------------------------------- stage tasks
# Each calls one stage function; retries and timeout are set per call from the config.


@task(name="annotate", cache_policy=NO_CACHE)
def annotate_task(run_dir: str, cfg: dict) -> dict:
    return pipeline.stage_annotate(run_dir, cfg, progress=PrefectProgress())


@task(name="generate", cache_policy=NO_CACHE)
def generate_task(run_dir: str, cfg: dict, backend: str | None) -> dict:
    return pipeline.stage_generate(run_dir, cfg, backend, progress=PrefectProgress())


@task(name="verify", cache_policy=NO_CACHE, tags=["gpu"])
def verify_task(run_dir: str, cfg: dict, backend: str | None, ray_address: str) -> dict:
    verify_fn, ray_stats = None, {}
    if ray_address:
        from flows.ray_verify import make_ray_verify_fn

        f = cfg.get("flows", {})
        verify_fn = make_ray_verify_fn(ray_address, workers=f.get("ray_workers", 0), stats=ray_stats)
    with gpu_slot(cfg):
        counts = pipeline.stage_verify(run_dir, cfg, backend, verify_fn=verify_fn, progress=PrefectProgress())
    if ray_stats:
        counts["ray_workers"] = len(ray_stats.get("workers", []))
        counts["ray_cluster"] = ray_stats.get("cluster", {})
    return counts


@task(name="repair", cache_policy=NO_CACHE, tags=["gpu"])
def repair_task(run_dir: str, cfg: dict, backend: str | None) -> dict:
    with gpu_slot(cfg):
        return pipeline.stage_repair(run_dir, cfg, backend, progress=PrefectProgress())


@task(name="curate", cache_policy=NO_CACHE)
def curate_task(run_dir: str, corpus_dir: str, cfg: dict) -> dict:
    from curation.corpus import build_corpora

    return build_corpora(run_dir, corpus_dir, cfg=cfg["curate"])


# ---------------------------------------------------------------------------- flows


@flow(name="kernelmill-load", log_prints=True)
def load_flow(out: str = "runs/default", source: str = "", config_path: str | None = None,
              overrides: dict | None = None) -> dict:
    """KernelBench-format programs (``source``, default run.seed_tasks) into ``raw/tasks``."""
    t0 = time.perf_counter()
    cfg, run_dir = setup_run(out, config_path, overrides)
    source = source or cfg["run"]["seed_tasks"]
    tasks = gather_seed_task(source)
    written = save_gathered_task(run_dir, "seed", {"source": source}, tasks)
    counts = {"source": source, "seed": len(tasks), "written": written}
    publish_stage("load", run_dir, counts, time.perf_counter() - t0)
    return counts


@flow(name="kernelmill-mine", log_prints=True)
def mine_flow(out: str = "runs/default", source: str = "", config_path: str | None = None,
              overrides: dict | None = None) -> dict:
    """Mined code (``source``: a directory, git path or URL, ``hf:NAME``) into ``raw/tasks``."""
    t0 = time.perf_counter()
    cfg, run_dir = setup_run(out, config_path, overrides)
    source = source or cfg["run"]["mine_source"]
    tasks, report = gather_mined_task.with_options(**stage_opts(cfg))(source, cfg["mine"])
    (Path(run_dir) / "mine_report.json").write_text(json.dumps(report, indent=2, default=str))
    written = save_gathered_task(run_dir, "mine", {"source": source, **cfg["mine"]}, tasks)
    counts = {"source": source, "github": len(tasks), "written": written, "report": report}
    publish_stage("mine", run_dir, counts, time.perf_counter() - t0)
    return counts


@flow(name="kernelmill-nnsmith", log_prints=True)
def nnsmith_flow(out: str = "runs/default", n: int = 6, seed: int = 0, config_path: str | None = None,
                 overrides: dict | None = None) -> dict:
    """``n`` NNSmith graphs from ``seed`` into ``raw/tasks`` (seeded: the same call, the same tasks)."""
    t0 = time.perf_counter()
    cfg, run_dir = setup_run(out, config_path, overrides)
    tasks, skips = gather_nnsmith_task(n, seed, cfg["nnsmith"])
    written = save_gathered_task(run_dir, "nnsmith", {"n": n, "seed": seed, **cfg["nnsmith"]}, tasks)
    counts = {"n": n, "seed": seed, "nnsmith": len(tasks), "skips": skips, "written": written}
    publish_stage("nnsmith", run_dir, counts, time.perf_counter() - t0)
    return counts


@flow(name="kernelmill-annotate", log_prints=True)
def annotate_flow(out: str = "runs/default", config_path: str | None = None, overrides: dict | None = None) -> dict:
    """Every raw task not yet annotated -> the ``tasks`` table."""
    t0 = time.perf_counter()
    cfg, run_dir = setup_run(out, config_path, overrides)
    counts = annotate_task.with_options(**stage_opts(cfg))(run_dir, cfg)
    publish_stage("annotate", run_dir, counts, time.perf_counter() - t0)
    return counts


@flow(name="kernelmill-generate", log_prints=True)
def generate_flow(out: str = "runs/default", backend: str = "auto", config_path: str | None = None,
                  overrides: dict | None = None) -> dict:
    """First-turn candidates for every task that has none from the configured generator."""
    t0 = time.perf_counter()
    cfg, run_dir = setup_run(out, config_path, overrides)
    counts = generate_task.with_options(**stage_opts(cfg))(run_dir, cfg, None if backend == "auto" else backend)
    publish_stage("generate", run_dir, counts, time.perf_counter() - t0)
    return counts


@flow(name="kernelmill-verify", log_prints=True)
def verify_flow(out: str = "runs/default", backend: str = "all", ray_address: str = "",
                config_path: str | None = None, overrides: dict | None = None) -> dict:
    """Verdicts for every candidate without one (``backend``: only that backend's candidates).

    ``ray_address`` ("local", "auto", "ray://host:10001"; default flows.ray_address) spreads the
    verification over a Ray cluster (flows/ray_verify.py); empty: the local verifier."""
    t0 = time.perf_counter()
    cfg, run_dir = setup_run(out, config_path, overrides)
    ray_address = ray_address or cfg.get("flows", {}).get("ray_address", "")
    counts = verify_task.with_options(**stage_opts(cfg))(run_dir, cfg, None if backend == "all" else backend, ray_address)
    publish_stage("verify", run_dir, counts, time.perf_counter() - t0)
    return counts


@flow(name="kernelmill-repair", log_prints=True)
def repair_flow(out: str = "runs/default", backend: str = "auto", config_path: str | None = None,
                overrides: dict | None = None) -> dict:
    """Multi-turn dialogues (generate -> verify -> feedback -> ...) for tasks without one."""
    t0 = time.perf_counter()
    cfg, run_dir = setup_run(out, config_path, overrides)
    counts = repair_task.with_options(**stage_opts(cfg))(run_dir, cfg, None if backend == "auto" else backend)
    publish_stage("repair", run_dir, counts, time.perf_counter() - t0)
    return counts


@flow(name="kernelmill-curate", log_prints=True)
def curate_flow(out: str = "runs/default", corpus: str = "", config_path: str | None = None,
                overrides: dict | None = None) -> dict:
    """Corpora from a run directory, into ``corpus`` (default: the run directory itself)."""
    t0 = time.perf_counter()
    cfg, run_dir = setup_run(out, config_path, overrides)
    corpus_dir = str(Path(corpus).resolve()) if corpus else run_dir
    counts = curate_task.with_options(**stage_opts(cfg))(run_dir, corpus_dir, cfg)
    publish_stage("curate", corpus_dir, counts, time.perf_counter() - t0)
    return counts


@flow(name="kernelmill-train", log_prints=True)
def train_flow(args: list[str], config_path: str | None = None) -> dict:
    """``kernelmill train ARGS...`` (e.g. ``["sft", "--corpus", "runs/x", "--out", "ckpt/sft"]``)
    as a flow run, so training is triggered and tracked like the other stages.

    Runs the CLI handler in this process (not a subprocess); fails the flow on a non-zero exit."""
    from kernelmill.cli import main

    logger = get_run_logger()
    argv = (["--config", config_path] if config_path else []) + ["train", *args]
    logger.info("kernelmill %s", " ".join(argv))
    t0 = time.perf_counter()
    code = main(argv)
    if code != 0:
        raise RuntimeError(f"kernelmill {' '.join(argv)} exited with {code}")
    counts = {"argv": " ".join(argv), "exit_code": code, "seconds": round(time.perf_counter() - t0, 1)}
    create_table_artifact(key="kernelmill-train-counts", table=_flat(counts), description="kernelmill train")
    return counts


# Name -> flow, for `kernelmill serve` / `kernelmill deploy` and prefect.yaml's entrypoints.
STAGE_FLOWS = {
    "load": load_flow, "mine": mine_flow, "nnsmith": nnsmith_flow, "annotate": annotate_flow,
    "generate": generate_flow, "verify": verify_flow, "repair": repair_flow, "curate": curate_flow,
    "train": train_flow,
}
