"""Annotate tasks into a tasks table as they finish: the annotate stage's loop.

``annotate_into(root, tasks, ...)`` is what ``kernelmill annotate``, ``kernelmill load`` (load, then
annotate) and ``kernelmill run`` call. It annotates with synth.annotate.annotator.annotate_stream (worker
processes, fake tensors) and guarantees:

- **Writing as it goes.** Annotated rows go to ``root/tasks`` every ``flush_every`` tasks or
  ``flush_s`` seconds, whichever comes first, and once more when the loop ends for any reason
  that runs Python's ``finally`` (an exception, Ctrl-C). A process killed outright (SIGKILL, or
  SIGTERM with Python's default handler) loses at most the rows finished since the last flush.
- **Resuming.** Tasks already in ``root/tasks`` are not annotated again, and rows are keyed by
  task_id, so nothing is duplicated. Tasks that could not be annotated are recorded in
  ``root/annotate_failures.json`` (name, origin path, level, category, reason), written with
  each flush, and a later call does not try them again unless ``retry_failed`` is set.
- **Bounded per task.** Each task has ``timeout_s`` in a worker; one that hangs, crashes its
  worker, needs more memory than the budget, needs the network (a Hugging Face Hub model, offline
  in the worker) or a GPU runtime becomes a named failure with a category; the rest go on.

Not guaranteed: two processes annotating into the same ``root`` at once may both annotate a task
(the table still holds it once); the failures file is then whichever wrote last.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernelmill import store
from kernelmill.schema import Task
from kernelmill.settings import AnnotateSettings  # the keyword defaults of annotate_into are its defaults
from synth.annotate.annotator import annotate_stream, order_curriculum
from synth.annotate.devices import get_device

FAILURES_FILE = "annotate_failures.json"

# (category, substrings of a failure reason that put it there); the first match wins
FAILURE_CATEGORIES = (
    ("timeout", ("timeout:",)),
    ("crash", ("worker crashed",)),
    ("needs-hub", ("huggingface.co", "cached files", "OfflineModeIsEnabled", "HF_HUB_OFFLINE")),
    ("needs-cuda", ("not compiled with CUDA", "not linked with support for cuda", "NVIDIA driver",
                    "no CUDA GPUs")),
    ("memory", ("MemoryError", "can't allocate memory", "out of memory")),
    ("missing-module", ("ModuleNotFoundError", "ImportError")),
    ("no-tensor-output", ("forward returned no tensor",)),
)


def failure_category(reason: str) -> str:
    """A short category for a failure reason (FAILURE_CATEGORIES), ``program-error`` otherwise."""
    for category, needles in FAILURE_CATEGORIES:
        if any(n in reason for n in needles):
            return category
    return "program-error"


@dataclass
class AnnotationFailure:
    """A task that is not in the tasks table, and why."""
    task_id: str
    name: str
    path: str  # the task's origin path (relative to a loaded KernelBench directory), or its name
    level: int
    category: str
    reason: str
    seconds: float = 0.0


@dataclass
class AnnotateReport:
    """What one ``annotate_into`` call did. ``failures`` holds this call's failures and, unless
    retried, those recorded by earlier calls (``failed_before`` of them)."""
    todo: int = 0  # tasks this call annotated or tried to
    already: int = 0  # tasks whose rows were stored before this call
    failed_before: int = 0
    annotated: list[Task] = field(default_factory=list)
    failures: list[AnnotationFailure] = field(default_factory=list)
    written: int = 0
    seconds: float = 0.0
    slowest: list[tuple[str, float]] = field(default_factory=list)  # (path, seconds) of this call

    def by_category(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for f in self.failures:
            counts[f.category] = counts.get(f.category, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def failure_lines(self) -> list[str]:
        """``path [category]: reason`` per failure, by category then level then path."""
        return [f"{f.path} [{f.category}]: {f.reason}"
                for f in sorted(self.failures, key=lambda f: (f.category, f.level, f.path))]


def _task_path(t: Task) -> str:
    return t.origin.path or t.name


def read_failures(root: str | os.PathLike) -> dict[str, AnnotationFailure]:
    """The failures recorded under ``root`` by task_id ({} when none or the file is damaged)."""
    f = Path(root) / FAILURES_FILE
    if not f.is_file():
        return {}
    try:
        rows = json.loads(f.read_text()).get("failures", [])
        return {r["task_id"]: AnnotationFailure(**r) for r in rows}
    except (ValueError, TypeError, KeyError, AttributeError):  # a damaged file only costs a retry
        return {}


def _write_failures(root: Path, failures: dict[str, AnnotationFailure]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{FAILURES_FILE}.tmp"
    rows = [dataclasses.asdict(f) for f in sorted(failures.values(), key=lambda f: (f.level, f.path))]
    tmp.write_text(json.dumps({"failures": rows}, indent=1, sort_keys=True))
    os.replace(tmp, root / FAILURES_FILE)


class _LogProgress:
    """A progress line on stderr at most every ``every_s`` seconds, for logs (no terminal, no bar)."""

    def __init__(self, every_s: float = 15.0):
        self.every_s, self.last = every_s, 0.0

    def __call__(self, done: int, total: int, failed: int) -> None:
        now = time.monotonic()
        if done == total or now - self.last >= self.every_s:
            self.last = now
            print(f"annotate: {done}/{total} done, {failed} failed", file=sys.stderr, flush=True)


def annotate_into(root: str | os.PathLike, tasks: list[Task], *, device_spec: str = AnnotateSettings.device_spec,
                  timeout_s: float = AnnotateSettings.timeout_s,
                  memory_limit_gb: float = AnnotateSettings.memory_limit_gb, workers: int = AnnotateSettings.workers,
                  real_budget_gb: float = AnnotateSettings.real_budget_gb,
                  retry_failed: bool = AnnotateSettings.retry_failed,
                  progress: Callable[[int, int], None] | None = None, log_progress: bool | None = None,
                  flush_every: int = AnnotateSettings.chunk, flush_s: float = 10.0) -> AnnotateReport:
    """Annotate the ``tasks`` not yet in ``root/tasks`` into it; see the module docstring.

    ``progress(done, total)`` is called after every task. ``log_progress`` prints a plain progress
    line on stderr every 15 s (default: when stderr is not a terminal, where a bar would not show).
    Raises InputError for an unknown device spec; a task's own failure never raises."""
    t0 = time.perf_counter()
    get_device(device_spec)
    root = Path(root)
    known = store.stored_ids(root, "tasks") if (root / "tasks").is_dir() else set()
    ids = {t.task_id for t in tasks}
    recorded = read_failures(root)
    failures = {} if retry_failed else {tid: f for tid, f in recorded.items() if tid in ids and tid not in known}
    # failures of tasks not in this call stay in the file
    kept = {tid: f for tid, f in recorded.items() if tid not in ids and tid not in known}
    todo = [t for t in tasks if t.task_id not in known and t.task_id not in failures]
    report = AnnotateReport(todo=len(todo), already=len(ids & known), failed_before=len(failures))
    if log_progress is None:
        log_progress = not sys.stderr.isatty()
    log = _LogProgress() if log_progress and todo else None

    buffer: list[Task] = []
    last_flush = time.perf_counter()
    timings: list[tuple[str, float]] = []

    def flush() -> None:
        nonlocal last_flush
        if buffer:
            report.written += store.write_records(root, "tasks", order_curriculum(buffer))
            buffer.clear()
        if failures or recorded:
            _write_failures(root, {**kept, **failures})
        last_flush = time.perf_counter()

    done = 0
    if progress:
        progress(0, len(todo))
    try:
        for o in annotate_stream(todo, device_spec=device_spec, timeout_s=timeout_s, memory_limit_gb=memory_limit_gb,
                                 workers=workers, real_budget_gb=real_budget_gb):
            done += 1
            timings.append((_task_path(o.task), o.seconds))
            if o.annotated is not None:
                buffer.append(o.annotated)
                report.annotated.append(o.annotated)
            else:
                failures[o.task.task_id] = AnnotationFailure(
                    o.task.task_id, o.task.name, _task_path(o.task), o.task.level, failure_category(o.reason),
                    o.reason, round(o.seconds, 2))
            if progress:
                progress(done, len(todo))
            if log:
                log(done, len(todo), len(failures))
            if len(buffer) >= flush_every or time.perf_counter() - last_flush >= flush_s:
                flush()
    finally:
        flush()
        report.failures = list(failures.values())
        report.slowest = sorted(timings, key=lambda x: -x[1])[:5]
        report.seconds = time.perf_counter() - t0
    return report
