"""The clock that mining's time limits read: wall time minus the time a process waited for a CPU.

Mining bounds each module's work in time (a constructor that never returns, a forward that takes
minutes). With wall time, a busy machine decided which tasks exist: the same module took three times as
long with four other processes on two cores, ran past the limit and was dropped, or stopped growing its
inputs early and became a task with other shapes (another task id). The kernel counts, per thread, the time
it spent runnable but waiting for a CPU (``/proc/<pid>/task/<tid>/schedstat``, second field); this clock
is wall time minus that wait, so it advances like wall time on an idle machine, while the thread sleeps
(``time.sleep`` in a constructor that waits for a device still times out) and while it computes, and
stands still while other processes hold the CPUs. A limit on it costs the same on any load.

Not guaranteed: exact equality under load (caches and memory bandwidth shared with the other processes
still slow a running thread a little), and only one thread is measured, so a module that computes in
several threads of its own is timed by the one that waits for them. Where ``/proc`` has no schedstat
(not Linux) both functions fall back to wall time (no wait is known).
"""

from __future__ import annotations

import threading
import time


def _wait_s(path: str) -> float | None:
    try:
        with open(path) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def own_clock() -> float:
    """Seconds on this thread's clock (module docstring): ``time.monotonic()`` minus the time the calling
    thread waited for a CPU. Only differences are meaningful, as with ``time.monotonic``."""
    path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
    # the wait and the wall clock read as one pair: a preemption between the two reads would put its wait on
    # one side only, and a difference of two readings could then come out negative (a forward measured at
    # -3.7 ms under load); the kernel adds a wait when the thread runs again, so an unchanged wait before and
    # after the wall clock means none fell between them
    wait = _wait_s(path)
    for _ in range(8):
        now = time.monotonic()
        again = _wait_s(path)
        if again == wait:
            break
        wait = again
    return now - (wait or 0.0)


def waited_s(pid: int) -> float:
    """Seconds the main thread of process ``pid`` has waited for a CPU since it started (a freshly forked
    child starts at zero); 0.0 where that is not known (no schedstat, the process is gone)."""
    return _wait_s(f"/proc/{pid}/schedstat") or 0.0
