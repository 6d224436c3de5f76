"""What a command shows while its stages run: a start line, progress and an end line per stage.

    StageProgress    the reporter the CLI installs as orchestrator.pipeline's progress hook
    counts_table     a stage's counts (or a whole run's) as a few aligned lines

Stages report ``progress(stage, done, total)``; orchestrator.pipeline.run_stage adds the start and the end
of every stage (with its counts), whoever runs it (plain calls, or a Prefect task in this process).

On a terminal (stderr) the reporter draws one rich bar per stage, and log lines printed while the bars
are live (Prefect's console handler, plain logging handlers on stderr) go through the bars' console, so
they appear above the bars instead of inside them. Anywhere else (a log file, a pipe, `make run > log`)
it prints plain lines to stderr: ``[verify] started``, ``[verify] 3/18 (42 s)`` at most once every
``every_s`` seconds per stage and once when it completes, and ``[verify] done in 85 s: candidates 18,
...``. A stage may also send lines of its own (``note``): the verify stage prints each verdict as it arrives and,
every ``every_s`` while it works, a heartbeat (``[verify] verified 3/18, compiled 7, executing 2, pending 15
(45 s)``), so a run whose first verdicts are minutes of compiling away is not silent. Not guaranteed: a stage that reports no progress (load, nnsmith, curate) prints its start
and end lines only.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from orchestrator.pipeline import set_progress_hook


def _scalar(v) -> bool:
    return isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 40)


def _show(v):
    return round(v, 3) if isinstance(v, float) else v


def scalar_counts(counts: dict) -> list[tuple[str, object]]:
    """The counts a line has room for: numbers, short strings and booleans, and small tables of them
    (``rows (sft 12, rft 6, rl 6)``); longer lists and dicts are left to the JSON file, and so is the run
    directory, printed once at the end."""
    out = []
    for k, v in (counts or {}).items():
        if k == "run_dir":
            continue
        if _scalar(v):
            out.append((k, _show(v)))
        elif isinstance(v, dict) and 0 < len(v) <= 6 and all(_scalar(x) for x in v.values()):
            out.append((k, "(" + ", ".join(f"{kk} {_show(x)}" for kk, x in v.items()) + ")"))
    return out


def counts_line(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in scalar_counts(counts)) or "-"


def counts_table(result: dict, seconds: dict[str, float] | None = None, width: int = 100) -> str:
    """One line per stage: its name, seconds (when known) and its scalar counts, wrapped at ``width``."""
    names = [k for k in result if isinstance(result[k], dict)]
    if not names:
        return "(no stage ran)"
    w = max(len("stage"), *(len(n) for n in names))
    head = f"{'stage':<{w}}  {'seconds':>7}  counts"
    lines = [head, f"{'-' * w}  {'-' * 7}  {'-' * 6}"]
    indent = " " * (w + 11)
    for n in names:
        secs = f"{seconds[n]:.0f}" if seconds and n in seconds else ""
        row = f"{n:<{w}}  {secs:>7}  "
        for word in [f"{k} {v}" for k, v in scalar_counts(result[n])] or ["-"]:
            piece = word if row.endswith("  ") else ", " + word
            if len(row) + len(piece) > width and not row.endswith("  "):
                lines.append(row + ",")
                row, piece = indent, word
            row += piece
        lines.append(row)
    return "\n".join(lines)


class StageProgress:
    """The CLI's reporter (module docstring). ``enabled=False`` (``--no-progress``) prints nothing.

    Use as a context manager: it installs itself as the pipeline's progress hook and restores the
    previous one on exit. ``seconds`` holds each finished stage's wall time."""

    def __init__(self, enabled: bool = True, console: Console | None = None, every_s: float = 15.0,
                 clock: Callable[[], float] = time.monotonic):
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.terminal = enabled and self.console.is_terminal
        self.every_s = float(every_s)
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self._started: dict[str, float] = {}
        self._last_line: dict[str, float] = {}
        self._last_done: dict[str, int] = {}
        self._bars: dict[str, int] = {}
        self._noted: set[str] = set()  # stages whose own lines (``note``) carry their progress
        self._swapped: list[tuple[logging.Handler, str, object]] = []
        self.progress = Progress(TextColumn("[bold]{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=self.console, transient=False)

    # ------------------------------------------------------------------ events

    def begin(self, stage: str) -> None:
        self._started[stage] = self.clock()
        self._last_line[stage] = self.clock()
        self._say(f"[{stage}] started")

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if stage not in self._started:
            self._started[stage] = self._last_line[stage] = self.clock()
        if self.terminal:
            if stage not in self._bars:
                self._bars[stage] = self.progress.add_task(stage, total=total)
            self.progress.update(self._bars[stage], completed=done, total=total)
            return
        if stage in self._noted:
            return  # its own lines say it (the verify stage's heartbeat and verdicts): a count line only repeated them
        now = self.clock()
        complete = total > 0 and done >= total
        if self._last_done.get(stage) == done:
            return  # nothing new (a stage may report the same count again)
        if complete or now - self._last_line[stage] >= self.every_s:
            self._last_line[stage] = now
            self._last_done[stage] = done
            self._say(f"[{stage}] {done}/{total} ({now - self._started[stage]:.0f} s)")

    def note(self, stage: str, line: str) -> None:
        """A line about a stage's work (the verify stage's heartbeat and verdicts), printed as it comes: above the
        bars on a terminal, a plain line elsewhere, where they stand for the stage's count lines."""
        self._noted.add(stage)
        self._say(f"[{stage}] {line}")

    def end(self, stage: str, counts: dict, seconds: float) -> None:
        self.seconds[stage] = seconds
        self._say(f"[{stage}] done in {seconds:.0f} s: {counts_line(counts)}")

    def _say(self, line: str) -> None:
        if not self.enabled:
            return
        if self.terminal:
            self.console.print(line, highlight=False, markup=False, soft_wrap=True)  # above the bars
        else:  # written, not print()ed: a Prefect flow with log_prints would turn a print into a log record
            f = self.console.file
            f.write(line + "\n")
            f.flush()

    # ------------------------------------------------------------------ context

    def __enter__(self) -> "StageProgress":
        self._prev = set_progress_hook(self)
        if self.terminal:
            self.progress.start()
            self._route_logs_through_console()
        return self

    def __exit__(self, *exc) -> None:
        set_progress_hook(self._prev)
        if self.terminal:
            self.progress.stop()
            for handler, attr, old in reversed(self._swapped):
                setattr(handler, attr, old)
            self._swapped.clear()

    def _route_logs_through_console(self) -> None:
        """Log handlers that write to the terminal print through the bars' console while the bars are live
        (else a log line is written into the middle of a bar, which is then redrawn below it)."""
        live_stderr = sys.stderr  # rich's proxy while the bars are live (Progress redirects stderr)
        loggers = [logging.getLogger()] + [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
                                           if isinstance(logging.root.manager.loggerDict[n], logging.Logger)]
        seen = set()
        for lg in loggers:
            for h in lg.handlers:
                if id(h) in seen:
                    continue
                seen.add(id(h))
                if isinstance(getattr(h, "console", None), Console):  # prefect's PrefectConsoleHandler
                    self._swapped.append((h, "console", h.console))
                    h.console = self.console
                elif isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (sys.__stderr__,):
                    self._swapped.append((h, "stream", h.stream))
                    h.stream = live_stderr
