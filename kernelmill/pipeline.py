"""The main job as plain stage functions over a run directory, in the order a task travels.

    stage_tasks       seed KernelBench programs + mined code + NNSmith graphs -> annotated Task rows
    stage_dialogues   prompts -> candidates (teacher or LLM) -> verifier -> repair turns -> Dialogue rows
    stage_curate      rejection filtering, dedup, decontamination -> sft / rft / rl corpora + card + report
    summarize         a DuckDB query over the Parquet files, printed at the end of a run

Every stage reads and writes the run directory through kernelmill.store (atomic, keyed by content
hashes), and skips work whose rows are already there, so a killed run started again finishes with
nothing lost and nothing duplicated. The Prefect flow (flows/pipeline.py) calls these functions
as tasks and adds retries, caching and artifacts; nothing here imports prefect.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kernelmill import store
from kernelmill.config import REPO_ROOT, default_backend

log = logging.getLogger("kernelmill.pipeline")


def _repo_path(p: str) -> Path:
    path = Path(p)
    return path if path.is_absolute() else REPO_ROOT / path


def resolve_backend(cfg: dict, backend: str | None = None) -> str:
    b = backend or cfg["run"].get("backend", "auto")
    return default_backend() if b == "auto" else b


def stage_tasks(run_dir: str | os.PathLike, cfg: dict) -> dict:
    """Gather tasks from every configured source, annotate them, write the ``tasks`` table.

    Returns counts per source. Sources whose setting is empty or zero are skipped."""
    from graphs.kernelbench import load_kernelbench_dir
    from synth.annotate import annotate_tasks

    run = cfg["run"]
    counts: dict = {}
    gathered = []
    if run.get("seed_tasks"):
        res = load_kernelbench_dir(_repo_path(run["seed_tasks"]), source="seed")
        gathered += res.tasks
        counts["seed"] = len(res.tasks)
    if run.get("mine_source"):
        from synth.mine import mine_tasks

        m = cfg["mine"]
        mined = mine_tasks(str(_repo_path(run["mine_source"])), target_numel=m["target_numel"],
                           timeout_s=m["timeout_s"], license_allowlist=m["license_allowlist"])
        gathered += mined.tasks
        counts["github"] = len(mined.tasks)
        counts["mine_report"] = mined.report.as_dict()
    if run.get("nnsmith_n", 0) > 0:
        from graphs.nnsmith_tasks import generate_nnsmith_tasks

        n = cfg["nnsmith"]
        res = generate_nnsmith_tasks(run["nnsmith_n"], run.get("nnsmith_seed", 0), max_nodes=n["max_nodes"],
                                     target_numel=n["target_numel"])
        gathered += res.tasks
        counts["nnsmith"] = len(res.tasks)
        counts["nnsmith_skips"] = dict(res.skips)
    known = store.stored_ids(run_dir, "tasks")
    todo = [t for t in gathered if t.task_id not in known]
    annotated, failures = annotate_tasks(todo, device_spec=cfg["annotate"]["device_spec"])
    counts["annotated"] = len(annotated)
    counts["annotate_failures"] = len(failures)
    counts["written"] = store.write_records(run_dir, "tasks", annotated)
    return counts


def stage_dialogues(run_dir: str | os.PathLike, cfg: dict, backend: str | None = None) -> dict:
    """Generate, verify and repair candidates for every task without dialogues yet.

    Each task's candidates, verdicts and dialogues are written as soon as that task is done."""
    from synth.annotate import order_curriculum
    from synth.generate import make_generator
    from synth.repair import run_dialogues
    from verifier.api import VerifyConfig

    backend = resolve_backend(cfg, backend)
    run = cfg["run"]
    tasks = order_curriculum(store.read_records(run_dir, "tasks"))
    done = {d.task_id for d in store.read_records(run_dir, "dialogues") if d.backend == backend}
    todo = [t for t in tasks if t.task_id not in done]

    def save(result) -> None:
        store.write_records(run_dir, "candidates", result.candidates)
        store.write_records(run_dir, "verdicts", result.verdicts)
        store.write_records(run_dir, "dialogues", result.dialogues)

    generator = make_generator(cfg["generate"], backend=backend, bug_rate=run["bug_rate"], seed=run.get("nnsmith_seed", 0))
    stats = run_dialogues(todo, generator, backend=backend, samples_per_task=run["samples_per_task"],
                          max_turns=run["max_turns"], verify_config=VerifyConfig.from_dict(cfg["verify"]),
                          on_task_done=save)
    return {"backend": backend, "tasks": len(todo), "skipped_done": len(tasks) - len(todo), **stats}


def stage_curate(run_dir: str | os.PathLike, cfg: dict) -> dict:
    """Build the sft / rft / rl corpora, the dataset card and the report inside the run directory."""
    from curation.corpus import build_corpora

    return build_corpora(run_dir, run_dir, cfg=cfg["curate"])


SUMMARY_SQL = """
SELECT t.level,
       count(DISTINCT t.task_id)                                   AS tasks,
       count(v.candidate_id)                                       AS candidates,
       round(avg(CASE WHEN v.correct THEN 1 ELSE 0 END), 3)        AS pass_rate,
       count(DISTINCT CASE WHEN v.correct THEN t.task_id END)      AS tasks_solved,
       round(median(v.speedup_eager) FILTER (WHERE v.correct), 3)  AS median_speedup_eager
FROM read_parquet('{root}/tasks/*.parquet') t
LEFT JOIN read_parquet('{root}/verdicts/*.parquet') v USING (task_id)
GROUP BY t.level ORDER BY t.level
"""


def summarize(run_dir: str | os.PathLike) -> str:
    """A per-level summary table computed by DuckDB over the run's Parquet files."""
    import duckdb

    root = Path(run_dir).resolve().as_posix()
    con = duckdb.connect()
    rel = con.sql(SUMMARY_SQL.format(root=root))
    cols = rel.columns
    rows = rel.fetchall()
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(str(c)) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(str(v).rjust(w) for v, w in zip(vals, widths))  # noqa: E731
    return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def run_all(out: str | os.PathLike, cfg: dict, backend: str = "auto") -> dict:
    """Every stage in order, without Prefect (the flow in flows/pipeline.py does the same as tasks)."""
    from kernelmill.config import record_latest_run

    run_dir = Path(out).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    record_latest_run(run_dir)
    result: dict = {"run_dir": str(run_dir)}
    result["tasks"] = stage_tasks(run_dir, cfg)
    result["dialogues"] = stage_dialogues(run_dir, cfg, None if backend == "auto" else backend)
    result["curate"] = stage_curate(run_dir, cfg)
    result["summary"] = summarize(run_dir)
    return result
