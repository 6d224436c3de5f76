"""Ctrl-C of a command that writes a run directory: one line saying how to resume, then out, at once.

Every table is written atomically and every stage skips what is stored (kernelmill.store), so a run
stopped anywhere resumes by starting the same command again; nothing needs to be wound down in order.
Winding down is what made Ctrl-C slow and noisy under Prefect: the ephemeral API server gets the same
SIGINT and stops first, and the flow engine then spends minutes failing to report states to it, with
tracebacks. So on SIGINT :func:`exit_on_interrupt`'s handler, in the command's own process:

1. flushes what was printed, writes ``<command>: interrupted ...; resume with: kernelmill ...`` to stderr;
2. points its stdout and stderr at /dev/null (a thread that logs while the process goes prints nothing);
3. kills every process it started, children of children included (the Prefect server, compile workers,
   sandboxes: they would otherwise finish work nobody waits for), with SIGKILL;
4. leaves with exit status 130 (``os._exit``: no atexit handler, no Prefect exit drain).

What the next start does: removes the temporary files a killed write left (orchestrator.pipeline
.sweep_partial_writes) and recomputes what was not stored. Not covered: processes a child detached
from its parent (double-forked daemons) are not found; a second SIGINT while the handler runs is ignored.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (children first), from /proc; [] where there is no /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])  # after "pid (comm) state": ppid
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def resume_line(command: str, argv: list[str]) -> str:
    return (f"kernelmill {command}: interrupted; what was stored is kept. "
            f"Resume with: kernelmill {shlex.join(argv)}")


def exit_on_interrupt(command: str, argv: list[str]):
    """Install the SIGINT handler described in the module docstring for this process; returns the handler it
    replaced (the CLI puts it back when the command returns, for a caller that runs ``main`` in-process).

    A process forked from this one (a pool worker) inherits the handler; there it only exits, quietly."""
    if threading.current_thread() is not threading.main_thread():
        return None  # signal handlers belong to the main thread: a caller running the CLI in a thread keeps its own
    main_pid = os.getpid()
    line = resume_line(command, argv)

    def handler(signum, frame) -> None:
        if os.getpid() != main_pid:
            os._exit(130)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a stream in any state: the line below still goes out
                pass
        tail = "\x1b[?25h" if os.isatty(2) else ""  # a live progress bar hid the cursor
        try:
            os.write(2, f"{tail}\n{line}\n".encode())
        except OSError:
            pass
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        for pid in descendants(main_pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os._exit(130)

    return signal.signal(signal.SIGINT, handler)
