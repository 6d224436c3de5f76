"""One device, many processes: a shared/exclusive lock so that a timing phase has the device to itself.

Every process of a batch that runs work on the device (the verifier's reference runs, a candidate's
correctness trials) holds the lock shared; a timing phase holds it exclusive. On a GPU, work from another
process's CUDA context time-slices with the one being timed and lands inside its events; on a CPU it takes
cores from it. Three flock(2) files: the device file; a turnstile that every taker passes through and a
waiting timer keeps, so that a stream of shared holders cannot starve it; and the timers' queue, held shared by
every timer from its first wait to its release, which shared takers stand back for (a bounded while), so that
timers waiting together take the device one after another instead of each waiting for the shared work between.

Shared holders give way at the points between their pieces of device work (``yield_to_timer``: between a
candidate's load steps and trials, between the judge's trials), so a waiting timer waits for one piece, not for a
neighbour's whole correctness phase.

Every wait is bounded. The lock protects timing accuracy; it must never turn a slow or hanging neighbour
into someone else's timeout. A process that cannot get it in time goes on without it, and the result says
so (``held`` stays None). Locks go with their process: a killed candidate releases what it held.

Where a file ``<lock>.trace`` exists beside the lock (a benchmark makes it: bench/lib/lock_trace.py), every hold is
appended to it as it ends: process, mode, when the take began, when it got the lock, when it let go, the line of
the verifier's code that took it, the last point of giving way it passed holding on (no timer waited there) and the
line that let go: a waiting timer waited for the code between those two. Diagnostics only: a candidate's process
can write there as it can flock the lock, and nothing of a verdict reads it.

Standard library only: imported inside the execution child, which has torch and nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time


TIMERS_FIRST_S = 5.0  # the longest a shared taker stands back while timers wait (see DeviceLock.acquire)
BEHIND_TIMERS_S = 10.0  # the longest a timer that goes behind the others stands back while they wait (the same)
TRACE_SUFFIX = ".trace"  # the holds' log beside a lock, where one exists (see the module's docstring)


def lock_files(path: str) -> list[str]:
    """The files of the lock at ``path``: the device, the turnstile, the timers' queue, and its trace where one
    exists (a sandboxed process binds them all writable)."""
    files = [str(path), f"{path}.turn", f"{path}.timers"]
    return files + [f"{path}{TRACE_SUFFIX}"] if os.path.isfile(f"{path}{TRACE_SUFFIX}") else files


_FRAMES_PASSED = ("devlock.py", "locks.py", "contextlib.py")  # the lock's own frames and its context managers'


def _site() -> str:
    """``file:line`` of the first caller outside the lock's own modules: the verifier's code that took it."""
    f = sys._getframe(1)
    while f is not None and os.path.basename(f.f_code.co_filename) in _FRAMES_PASSED:
        f = f.f_back
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}" if f is not None else "?"


class DeviceLock:
    def __init__(self, path: str):
        self.path = str(path)
        self._dev: int | None = None
        self._turn: int | None = None
        self._timers: int | None = None  # held shared by every timer from its first wait to its release
        self.held: str | None = None  # "shared", "exclusive" or None
        self.waited_s = 0.0
        self.yielded_s = 0.0  # of waited_s: spent giving way to timers (yield_to_timer)
        self._trace: int | None = None  # the holds' log (TRACE_SUFFIX), where it exists
        self._hold: tuple = ()  # the hold being traced: (take began, got, site)
        self._passed: tuple = ()  # traced: (when, where) the last point of giving way this hold passed holding on

    def _open(self) -> None:
        if self._dev is None:
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
            self._dev, self._turn, self._timers = (os.open(f, flags, 0o666) for f in lock_files(self.path)[:3])
            try:
                self._trace = os.open(f"{self.path}{TRACE_SUFFIX}", os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            except OSError:
                self._trace = None

    @staticmethod
    def _take(fd: int, op: int, deadline: float) -> bool:
        delay = 0.0005
        while True:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(delay)
                delay = min(delay * 2, 0.01)

    def acquire(self, exclusive: bool, timeout_s: float, behind_timers: bool = False) -> bool:
        """Take the lock (dropping any mode held before); False when ``timeout_s`` passed first.

        Timers go one after another: a timer joins the timers' queue (a shared hold of its file) as it starts to
        wait, and a shared taker stands back while the queue is not empty (``TIMERS_FIRST_S`` at most, then it goes
        to the turnstile as before). When a timing phase ends, the next waiting timer takes the device at once,
        where it used to queue behind shared takers at the turnstile and wait again for every one of their pieces
        of work to end (one H200, eight slots: trials spent 6.6 s of their 9.0 s giving way, median).
        A timer ``behind_timers`` (a timing nobody waits for yet: a task's torch.compile model) stands back while
        other timers are queued, ``BEHIND_TIMERS_S`` at most, before it joins them: the timings candidates wait for
        go first (a batch's first minute queues two reference timings a task beside the candidates')."""
        self.release()
        self._open()
        t0 = time.monotonic()
        deadline = t0 + max(0.0, timeout_s)
        got = False
        if exclusive and behind_timers:
            self._stand_back(min(deadline, t0 + BEHIND_TIMERS_S))
        queued = exclusive and self._take(self._timers, fcntl.LOCK_SH, deadline)
        if not exclusive:
            self._stand_back(min(deadline, t0 + TIMERS_FIRST_S))
        if self._take(self._turn, fcntl.LOCK_EX, deadline):
            try:
                got = self._take(self._dev, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline)
            finally:
                fcntl.flock(self._turn, fcntl.LOCK_UN)
        if queued and not got:
            fcntl.flock(self._timers, fcntl.LOCK_UN)
        now = time.monotonic()
        self.waited_s += now - t0
        self.held = ("exclusive" if exclusive else "shared") if got else None
        if got and self._trace is not None:
            self._hold = (t0, now, _site())
        return got

    def _timers_queued(self) -> bool:
        """Whether some timer waits for the device or holds it (a look that does not wait)."""
        try:
            fcntl.flock(self._timers, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._timers, fcntl.LOCK_UN)
        return False

    def _stand_back(self, until: float) -> None:
        """A shared taker's wait while timers are queued, until ``until`` at most."""
        delay = 0.0005
        while self._timers_queued() and time.monotonic() < until:
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def timer_waiting(self) -> bool:
        """Whether, while this process holds the lock shared, a timer waits for the device (one that holds it cannot:
        the hold is exclusive). A look that does not wait; False when this process holds nothing shared."""
        if self.held != "shared" or self._timers is None:
            return False
        return self._timers_queued()

    def yield_to_timer(self, budget_s: float) -> bool:
        """A point between two pieces of shared device work: when a timer waits, let it have the device first (drop
        the shared hold, queue behind it at the turnstile, take the lock shared again once its timing is over). A
        timer then waits for the shared holders' current piece of work, not for all of it: with whole correctness
        phases held shared, timers queued behind every neighbour's load and trials (a median wait of 14-23 s per
        candidate on one H200, bench/results/throughput_real_NVIDIA_H200_de518ce.md). ``budget_s`` bounds the time
        this lock spends giving way, all its yields together (``yielded_s``), so that neighbours' timings never push
        a job into its timeout; past it the hold is kept. Returns whether the lock is held shared after it."""
        left = budget_s - self.yielded_s
        if left > 0 and self.timer_waiting():
            t0 = time.monotonic()
            self.acquire(False, left)
            self.yielded_s += time.monotonic() - t0
        elif self._hold:
            self._passed = (time.monotonic(), _site())
        return self.held == "shared"

    @contextlib.contextmanager
    def aside(self, budget_s: float):
        """Host work of a shared holder that puts nothing on the device (a profiler's start: CUPTI and Kineto, seconds
        while the host's cores compile): the hold is dropped for its length, so that no timer waits for it, and taken
        back after it, that wait counted with the yields (``budget_s`` bounds them all, as ``yield_to_timer``'s; past
        it the hold is kept throughout)."""
        if self.held != "shared" or budget_s - self.yielded_s <= 0:
            yield
            return
        self.release()
        try:
            yield
        finally:
            t0 = time.monotonic()
            self.acquire(False, budget_s - self.yielded_s)
            self.yielded_s += time.monotonic() - t0

    def release(self) -> None:
        if self.held is not None and self._dev is not None:
            fcntl.flock(self._dev, fcntl.LOCK_UN)
            if self.held == "exclusive":
                fcntl.flock(self._timers, fcntl.LOCK_UN)
            if self._trace is not None and self._hold:
                t0, got, site = self._hold
                mode = "x" if self.held == "exclusive" else "s"
                passed_t, passed = self._passed or (got, site)
                line = (f"{os.getpid()} {mode} {t0:.6f} {got:.6f} {time.monotonic():.6f} {site} {passed_t:.6f} "
                        f"{passed} {_site()}\n")
                try:  # one short append: lines of several processes do not interleave
                    os.write(self._trace, line.encode())
                except OSError:
                    pass
        self.held = None
        self._hold, self._passed = (), ()

    def close(self) -> None:
        self.release()
        for fd in (self._dev, self._turn, self._timers, self._trace):
            if fd is not None:
                os.close(fd)
        self._dev = self._turn = self._timers = self._trace = None

    def __enter__(self) -> "DeviceLock":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class NoLock(DeviceLock):
    """Stands in where a job names no lock file."""

    def __init__(self):
        super().__init__("")

    def acquire(self, exclusive: bool, timeout_s: float, behind_timers: bool = False) -> bool:
        return False

    def yield_to_timer(self, budget_s: float) -> bool:
        return False

    def close(self) -> None:
        pass


def held_exclusive(path: str) -> bool:
    """Whether some process holds the device lock at ``path`` exclusive now: a shared take that does not wait (and
    is dropped at once) fails only then. It says that a timer holds the device, not which one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def device_lock(path: str | None) -> DeviceLock:
    return DeviceLock(path) if path else NoLock()
