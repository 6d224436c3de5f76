"""The orchestrator: runs stages of orchestrator/stages.py's list over a run directory, recording what
finished in the run's ledger.

    prepare_run        create the run directory, remove partial writes, move damaged part files aside
    run_stage          one stage's ``run``, recorded in the run's ledger; its start and end told to the progress hook
    run_stages         the named stages (default: every default stage) in list order, plain calls
    summarize          a per-level table computed by DuckDB over the run's Parquet files

It sits above the stages: nothing under synth/, graphs/, curation/, verifier/ or train/ imports it.
The Prefect flows (flows/) call the same ``Stage.run`` functions through ``run_stage``, one Prefect
task per stage; the CLI calls ``run_stages`` for ``kernelmill run --no-prefect`` and for each stage
subcommand; the loop (orchestrator/loop.py) runs its sub-run directories with the same runner's
``orchestrator.ledger.run_steps``.

Resume has one record and one writer: every step a runner finishes is marked in its directory's
``ledger.json`` (orchestrator/ledger.py; ``run_stage`` records through ``ledger.recorded_run``). Data
stays idempotent on its own (every stage skips rows already stored), so a stage runs again on a resumed
run unless the ledger says it need not: a gatherer (``Stage.once``) recorded with equal settings, a
sub-run step recorded done. The annotate stage's failed tasks are recorded in its entry and left out of
its next run. Before any stage reads, whoever runs the
stages (the CLI, a Prefect flow, a worker), :func:`prepare_run` removes partial writes, moves unreadable
part files aside (their rows are then missing, so the stage that wrote them recomputes them) and refuses
a damaged ledger (an InputError naming the file).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import duckdb

from kernelmill import store
from kernelmill.errors import InputError
from kernelmill.settings import Settings
from orchestrator import ledger
from orchestrator.stages import BY_NAME, DEFAULT_STAGES, RAW, STAGES, ProgressFn, Stage, no_progress, note_progress

log = logging.getLogger("orchestrator.pipeline")

_progress_hook: ProgressFn | None = None


def set_progress_hook(fn: ProgressFn | None) -> ProgressFn | None:
    """Install the callback a stage reports progress to when its caller passes none (the CLI's bar,
    also under a Prefect flow run in this process); returns the previous one."""
    global _progress_hook
    prev, _progress_hook = _progress_hook, fn
    return prev


def progress_hook(stage: str, done: int, total: int) -> None:
    (_progress_hook or no_progress)(stage, done, total)


def progress_note(stage: str, line: str) -> None:
    """A line about a stage's work to the installed hook, where it prints lines (stages.note_progress)."""
    note_progress(_progress_hook, stage, line)


progress_hook.note = progress_note  # a stage handed the hook itself (run_stage's default) can send it lines too


def run_stage(stage: Stage, run_dir: Path, settings: Settings, progress: ProgressFn | None = None) -> dict:
    """``stage.run`` over the run directory, recorded in its ledger when it returns (orchestrator.ledger.recorded_run);
    the installed hook (the CLI's orchestrator.progress.StageProgress) is told when it starts and ends, with
    its counts. Every runner calls this: ``run_stages`` and the Prefect task of flows/stages.py."""
    hook = _progress_hook
    if hasattr(hook, "begin"):
        hook.begin(stage.name)
    t0 = time.perf_counter()
    counts = ledger.recorded_run(stage, Path(run_dir), settings, progress or progress_hook)
    if hasattr(hook, "end"):
        hook.end(stage.name, counts, time.perf_counter() - t0)
    return counts


def parse_stage_names(text: str | None) -> list[str]:
    """``"verify,curate"`` -> ``["verify", "curate"]``; an unknown name is an InputError listing the stages."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    bad = [n for n in names if n not in BY_NAME]
    if bad:
        raise InputError(f"--stages {','.join(bad)}", f"unknown; choose from {', '.join(BY_NAME)}")
    return names


def sweep_partial_writes(run_dir: str | os.PathLike) -> list[Path]:
    """Delete the temporary files a process killed mid-write left in the run's table folders.

    A write renames its temporary file into place only once it is complete (kernelmill.store), so
    a ``.tmp-*.parquet`` file is never part of a table; it must not be read (it may be truncated)
    and is removed before a run resumes. Assumes no other process is writing this run directory
    at the same time (one writer per run, as the store requires)."""
    root = Path(run_dir)
    removed = []
    for table in store.TABLES:
        for base in (root, root / RAW):
            d = base / table
            if d.is_dir():
                for f in d.glob(".tmp-*"):
                    f.unlink(missing_ok=True)
                    removed.append(f)
    if removed:
        log.warning("removed %d partial write(s) left by a killed run: %s", len(removed),
                    ", ".join(str(f) for f in removed))
    return removed


def heal_run(run_dir: str | os.PathLike) -> list[Path]:
    """Move every part file of the run's tables (raw ones included) that does not read as Parquet to
    ``<run>.unreadable/`` (kernelmill.store.heal: beside the run directory, so never in a corpus pushed to the
    Hub), with one warning line each; returns where they went. The rows they held are then missing, so the stage
    that wrote them recomputes them."""
    moved = []
    aside = store.aside_dir(run_dir)
    for base, to in ((Path(run_dir), aside), (Path(run_dir) / RAW, aside / RAW)):
        for was, dest in store.heal(base, to):
            log.warning("%s: not a readable Parquet file; moved aside to %s, its rows are recomputed", was, dest)
            moved.append(dest)
    return moved


def prepare_run(out: str | os.PathLike) -> Path:
    """The run directory, absolute: created, partial writes removed, damaged part files moved aside
    (:func:`heal_run`), its ledger read (InputError naming the file when it is damaged, before any stage
    runs). Every way of running stages calls it first: the CLI, ``kernelmill run`` with or without
    Prefect, and every flow."""
    run_dir = Path(out).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    sweep_partial_writes(run_dir)
    heal_run(run_dir)
    ledger.entries(run_dir)
    return run_dir


def run_stages(out: str | os.PathLike, settings: Settings, names: list[str] | None = None,
               progress: ProgressFn | None = None) -> dict:
    """The named stages (default: the default run's) in list order, each called once; returns
    ``{"run_dir", <stage>: counts..., "summary"}``."""
    wanted = set(names or DEFAULT_STAGES)
    created = not Path(out).exists()
    run_dir = prepare_run(out)
    try:
        return _run_stages(run_dir, settings, wanted, progress)
    except BaseException:
        if created and not any(run_dir.rglob("*.parquet")):  # nothing was stored: leave no empty --out behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _run_stages(run_dir: Path, settings: Settings, wanted: set, progress: ProgressFn | None) -> dict:
    result: dict = {"run_dir": str(run_dir)}
    for stage in STAGES:
        if stage.name in wanted:
            result[stage.name] = run_stage(stage, run_dir, settings, progress)
    result["summary"] = summary_if_any(run_dir)
    return result


SUMMARY_SQL = """
SELECT t.level,
       count(DISTINCT t.task_id)                                   AS tasks,
       count(v.candidate_id)                                       AS candidates,
       round(avg(v.correct::INT), 3)                               AS pass_rate,
       count(DISTINCT CASE WHEN v.correct THEN t.task_id END)      AS tasks_solved,
       round(median(v.speedup_eager) FILTER (WHERE v.correct), 3)  AS median_speedup_eager
FROM read_parquet('{root}/tasks/*.parquet') t
LEFT JOIN read_parquet('{root}/verdicts/*.parquet') v USING (task_id)
GROUP BY t.level ORDER BY t.level
"""


def summarize(run_dir: str | os.PathLike) -> str:
    """A per-level summary table computed by DuckDB over the run's Parquet files."""
    root = Path(run_dir).resolve().as_posix()
    rel = duckdb.connect().sql(SUMMARY_SQL.format(root=root))
    cols, rows = rel.columns, rel.fetchall()
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(str(c)) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(str(v).rjust(w) for v, w in zip(vals, widths))  # noqa: E731
    return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def summary_if_any(run_dir: str | os.PathLike) -> str:
    """The DuckDB summary once the run has tasks and verdicts; a note before that."""
    if all(any((Path(run_dir) / t).glob("part-*.parquet")) for t in ("tasks", "verdicts")):
        return summarize(run_dir)
    return "(no summary yet: the run has no tasks or no verdicts)"
