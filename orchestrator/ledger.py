"""Resume in one place: the record of a run directory (``<run_dir>/ledger.json``, one entry per finished
step) and the runner functions, the only code that writes it.

    Entry                        step, counts (what it did), finished (UTC), note, model, skip
    entries(run_dir)             every entry of the directory, by step
    done(run_dir, step)          the step's entry, or None when it has none or its model path is gone
    recorded_run(stage, ...)     one stage of orchestrator/stages.py's list, recorded (orchestrator.pipeline.run_stage)
    run_steps(sub_dir, steps)    the steps of a sub-run directory (the loop's round-<r>/pool, rft, rl, eval-<i>)
                                 in order, each run once
    copy_sub_run(src, dst)       a finished sub-run directory copied with its record (the loop's shared start)

``mark`` writes an entry (the file replaced atomically: tmp + os.replace); only the functions here call
it, and stages and the loop read entries at most (tests/test_ledger.py checks both). The runner's rule:
data is idempotent on its own (every stage skips rows already stored, kernelmill.store), so a stage runs
again on a resumed run unless its entry says it need not: a gatherer (``Stage.once``) recorded with equal
settings, or a sub-run step recorded done. A step's ``skip`` holds ids it gave up on (the annotate stage's
failed tasks), which its next run leaves out unless told to retry. These functions live here, not in
orchestrator/pipeline.py, because the loop (which pipeline's stage list holds) calls them: pipeline.py
imports the stage list, so the loop importing pipeline would close an import circle.

A damaged ledger (not JSON, or entries of the wrong shape) is an InputError naming the file: it is never
guessed at. Deleting it loses only the record, not the rows: the gatherers gather again, the loop's
sub-runs run their steps again (skipping stored rows), failed annotations are tried again.

Run directories of earlier versions kept the record in other files. Where no ledger.json exists they are
read as its entries (and written into ledger.json at the next mark, so they are read once):

    raw/gathered.txt         (a run)         "<n>\\t<gatherer>:<settings json>" -> the gatherer's entry
    annotate_failures.json   (a run)         the failed task ids -> the annotate entry's ``skip``
    ../phases.json           (round-<r>/pool, rft, rl)  pool: generate, verify, repair, curate; rft, rl: their entry
    ../metrics.jsonl         (eval-<i>)      model i has a line: generate, verify, score

Not guaranteed: two processes marking one run directory at once (one writer per run, as the store
requires); threads of one process are serialised. A step killed before it returns is not recorded: it
runs again (the annotate stage then tries again the tasks that failed in the killed call).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernelmill.errors import InputError

LEDGER = "ledger.json"
SKIP = "_skip"  # a step's counts may hand the runner, under this key, the ids to record as its entry's skip
_LOCK = threading.Lock()
POOL_STEPS = ("generate", "verify", "repair", "curate")  # a loop round's pool sub-run
EVAL_STEPS = ("generate", "verify", "score")  # a loop evaluation sub-run


@dataclass(frozen=True)
class Entry:
    """One finished step of a run directory."""
    step: str
    counts: dict  # what the step did, as it returned it
    finished: str  # UTC, ISO 8601
    note: str = ""
    model: str = ""  # a model path the step left (a checkpoint); the step is not done once it is gone
    skip: tuple[str, ...] = field(default_factory=tuple)  # ids the step gave up on (its next run leaves them out)


def settings_step(name: str, settings) -> tuple[str, str]:
    """(step, note) of a step recorded per settings (a gatherer): the name with a digest of the settings
    section, and the settings as JSON."""
    text = json.dumps(dataclasses.asdict(settings), sort_keys=True, default=str)
    return _digest_step(name, text), text


def _digest_step(name: str, settings_json: str) -> str:
    """The step name a gatherer is recorded under: its name and a digest of its settings as JSON (one formula
    for new entries and for the gathered.txt lines of earlier versions, so those resume under the same step)."""
    return f"{name} {hashlib.sha256(settings_json.encode()).hexdigest()[:16]}"


def _path(run_dir) -> Path:
    return Path(run_dir) / LEDGER


def _read(path: Path) -> dict[str, Entry]:
    try:
        data = json.loads(path.read_text())
        return {e["step"]: Entry(**{**e, "skip": tuple(e.get("skip", ()))}) for e in data["entries"]}
    except (ValueError, TypeError, KeyError) as e:
        raise InputError(str(path), f"is not a kernelmill ledger ({type(e).__name__}: {e}); delete it to run the "
                                    "steps it recorded again (stored rows are kept)") from None


def entries(run_dir: str | os.PathLike) -> dict[str, Entry]:
    """Every entry of ``run_dir``'s ledger by step; where there is no ledger.json, those an earlier
    version's files record (see the module docstring). InputError for a damaged ledger."""
    path = _path(run_dir)
    return _read(path) if path.is_file() else _legacy(Path(run_dir))


def done(run_dir: str | os.PathLike, step: str) -> Entry | None:
    """The step's entry, or None: not recorded, or the model it left is gone (the step runs again)."""
    e = entries(run_dir).get(step)
    if e is None or (e.model and not Path(e.model).exists()):
        return None
    return e


def mark(run_dir: str | os.PathLike, step: str, counts: dict, *, note: str = "", model: str = "",
         skip=()) -> Entry:
    """Record ``step`` finished with ``counts`` (replacing an earlier entry of the step); returns the entry.
    Called by the runner functions below only."""
    entry = Entry(step, dict(counts), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), note, model,
                  tuple(sorted(skip)))
    path = _path(run_dir)
    with _LOCK:
        have = entries(run_dir)
        have[step] = entry
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{LEDGER}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"entries": [dataclasses.asdict(e) for e in have.values()]}, indent=1,
                                  default=str))
        os.replace(tmp, path)
    return entry


# ---------------------------------------------------------------------------- the runner


def recorded_run(stage, run_dir: Path, settings, progress) -> dict:
    """``stage.run``, then its entry in the run's ledger (a stage interrupted or failing records nothing).
    A gatherer (``stage.once``) is recorded under its settings and not run again with equal ones: it then
    answers ``{"tasks": n, "written": 0, "gathered_before": True}``. Ids a stage hands back under
    ``SKIP`` go into its entry's skip, not into the counts returned."""
    key = stage.once(settings) if stage.once else None
    step, note = settings_step(stage.name, key) if key is not None else (stage.name, "")
    if key is not None:
        prior = done(run_dir, step)
        if prior:
            return {"tasks": prior.counts.get("tasks", 0), "written": 0, "gathered_before": True}
    counts = stage.run(run_dir, settings, progress)
    skip = counts.pop(SKIP, ())
    if not stage.once or key is not None:  # a gatherer with nothing to gather is not recorded
        mark(run_dir, step, counts, note=note, skip=skip)
    return counts


UNFINISHED = "unfinished"  # a step's counts hold this (why) when it stopped early with something to resume from


@dataclass(frozen=True)
class Step:
    """One step of a sub-run directory: ``run(run_dir, settings, progress) -> counts``, as a stage's.
    ``context``: it runs with the settings run_steps' ``context`` yields (the loop: a model server's).
    Counts under ``"model"`` (a path) become the entry's model: once that path is gone the step runs again."""
    name: str
    run: Callable[[Path, object, Callable], dict]
    context: bool = False


@dataclass
class StepsDone:
    """What :func:`run_steps` left: the finished steps' entries (earlier calls' included, in step order),
    the counts of a step that stopped early (not recorded), and why the call ended early ("" if it did not)."""
    entries: dict[str, Entry] = field(default_factory=dict)
    unfinished: dict | None = None
    stopped: str = ""


def run_steps(run_dir: str | os.PathLike, steps: list[Step], settings, progress: Callable | None = None,
              *, context: Callable[[], contextlib.AbstractContextManager] | None = None,
              stop: Callable[[], str] | None = None) -> StepsDone:
    """The ``steps`` of a sub-run directory in order, each recorded in its ledger when it returns; a step the
    ledger records done is not run again (its entry is reported).

    ``context()`` is entered at the first pending ``context`` step and left before the next step that is not
    one, so nothing is started (the loop's model server) for a sub-run whose context steps are done.
    ``stop()`` is asked once, before the first pending step; a non-empty answer ends the call there. A step
    whose counts hold UNFINISHED is not recorded: the call ends with ``stopped`` set to its text, and the
    next call runs that step again (it resumes from what it left, e.g. a checkpoint)."""
    run_dir = Path(run_dir)
    progress = progress or (lambda *_: None)
    out, asked = StepsDone(), False
    ctx: contextlib.ExitStack | None = None
    ctx_settings = settings
    try:
        for step in steps:
            prior = done(run_dir, step.name)
            if prior:
                out.entries[step.name] = prior
                continue
            if not asked:
                asked, out.stopped = True, stop() if stop else ""
                if out.stopped:
                    return out
            if step.context and context is not None and ctx is None:
                ctx = contextlib.ExitStack()
                ctx_settings = ctx.enter_context(context())
            elif not step.context and ctx is not None:
                ctx.close()
                ctx = None
            counts = step.run(run_dir, ctx_settings if step.context and ctx is not None else settings, progress)
            if counts.get(UNFINISHED):
                out.stopped, out.unfinished = counts.pop(UNFINISHED), counts
                return out
            model = counts.get("model")
            out.entries[step.name] = mark(run_dir, step.name, counts, model=model if isinstance(model, str) else "")
    finally:
        if ctx is not None:
            ctx.close()
    return out


def copy_sub_run(src: Path, dst: Path, note: str) -> bool:
    """The sub-run directory ``src`` copied to ``dst`` with its ledger's entries (an earlier version's
    record included), each noted ``note``; nothing is copied where ``dst`` exists. Returns whether it copied.
    The caller checks that ``src`` is finished."""
    if dst.exists():
        return False
    shutil.copytree(src, dst)
    for e in entries(src).values():
        mark(dst, e.step, e.counts, note=note, model=e.model, skip=e.skip)
    return True


# ---------------------------------------------------------------------------- earlier versions' files


def _legacy(run_dir: Path) -> dict[str, Entry]:
    found: list[Entry] = []
    marks = run_dir / "raw" / "gathered.txt"
    for line in marks.read_text().splitlines() if marks.is_file() else []:
        n, _, key = line.partition("\t")
        name, _, text = key.partition(":")
        if n.isdigit() and text:
            found.append(Entry(_digest_step(name, text), {"tasks": int(n)}, "", text))
    failures = run_dir / "annotate_failures.json"
    if failures.is_file():
        from synth.annotate.store import read_failures

        failed = tuple(sorted(read_failures(run_dir)))
        found.append(Entry("annotate", {}, "", "from annotate_failures.json", skip=failed))
    phases = run_dir.parent / "phases.json"
    if run_dir.name in ("pool", "rft", "rl") and phases.is_file():
        try:
            record = json.loads(phases.read_text()).get(run_dir.name)
        except ValueError:
            raise InputError(str(phases), "is not JSON; delete it to run the round's phases again") from None
        if run_dir.name == "pool" and record:
            found += [Entry(s, record.get(s, {}), "", "from phases.json") for s in POOL_STEPS]
        elif record:
            found.append(Entry(run_dir.name, record, "", "from phases.json", str(record.get("model") or "")))
    metrics = run_dir.parent / "metrics.jsonl"
    if run_dir.name.startswith("eval-") and run_dir.name[5:].isdigit() and metrics.is_file():
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        row = next((r for r in rows if r.get("model_index") == int(run_dir.name[5:])), None)
        if row is not None:
            found += [Entry(s, row if s == "score" else {}, "", "from metrics.jsonl") for s in EVAL_STEPS]
    return {e.step: e for e in found}
