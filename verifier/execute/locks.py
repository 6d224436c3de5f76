"""The device lock (verifier/common/devlock.py) as the verifier's own process takes it.

``lock_path``: the lock's file for a backend, one per device of the host in ``[verify] lock_dir``; ``lock_wait_s``:
the longest wait for it; ``shared_lock``: the lock for the verifier's own device work (cuda only); and
``device_work``, the one frame in which this process runs the reference on the device (a task's plan, the judging
of a candidate's trials and timed calls, inputs drawn for a child): on cuda it holds the device lock shared, so that
no timing phase of another process has this work inside its window, gives way to a waiting timer between its torch
calls (``GivingWay``), and gives the allocator's free blocks back as it ends.

Enters: the config and the backend. Leaves: a held DeviceLock (NoLock on cpu or with ``device_lock`` off).
Imports: torch, verifier.common.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from kernelmill.errors import InputError
from verifier.common.config import VerifyConfig
from verifier.common.devlock import DeviceLock, device_lock
from torch.overrides import TorchFunctionMode


def lock_path(cfg: VerifyConfig, backend: str) -> str:
    """The device lock's file for ``backend``: one per device of the host, in the host's lock directory (``[verify]
    lock_dir``), so that every verifier process timing on that device takes the same lock, whatever its build root (a
    batch beside a reward server; parallel test workers: each with its own lock, their timing phases time-sliced one
    GPU and a 0.1 ms kernel read 1-2 ms). cuda: the first device this process sees, by the host's name for it (the
    first ``CUDA_VISIBLE_DEVICES`` entry; 0 when unset), so that verifier pools of several GPUs (verifier/ray_pool.py)
    do not hold each other's timing; cpu: the host's cores, one lock."""
    if not cfg.device_lock:
        return ""
    if backend == "cpu":
        name = "cpu"
    else:
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
        name = "cuda-" + re.sub(r"[^\w.-]", "_", first)
    return str(_lock_root(cfg) / f"timing-{name}.lock")


_CHECKED_ROOTS: dict[Path, tuple[int, int]] = {}  # lock directory -> (st_dev, st_ino) when this process checked it


def _lock_root(cfg: VerifyConfig) -> Path:
    """The lock directory, made if missing. It is in a shared place (the temporary directory) by default, so one
    that another user owns, or a link, is refused rather than followed (their files would decide our locks). Checked
    once per process and directory (it is asked for per job and per shared lock): later calls cost one ``lstat``, and a
    directory removed or replaced since is checked again."""
    root = cfg.lock_root()
    seen = _CHECKED_ROOTS.get(root)
    if seen is not None:
        try:
            st = os.lstat(root)
            if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == seen:
                return root
        except OSError:
            pass
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(root)
    except OSError as e:
        raise InputError(f"[verify] lock_dir {root}", f"cannot be made or read ({e.strerror})") from e
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise InputError(f"[verify] lock_dir {root}", f"not a directory of this user (owner uid {st.st_uid}, a link or "
                         f"a file); set verify.lock_dir to a directory of your own")
    _CHECKED_ROOTS[root] = (st.st_dev, st.st_ino)
    return root


def shared_lock(cfg: VerifyConfig, backend: str) -> DeviceLock:
    """The device lock for the verifier's own device work, taken shared on cuda only: there another
    process's kernels time-slice into a timed region; on cpu (bench/results/timing_noise_cpu.md) keeping
    other work off the cores during timing did not lower the noise and cost 15-25% of the batch time."""
    return device_lock((lock_path(cfg, backend) or None) if backend == "cuda" else None)


def lock_wait_s(cfg: VerifyConfig) -> float:
    """Longest wait for the device lock (verifier/common/devlock.py): a share of the run timeout, so that a
    neighbour holding the device can delay a candidate's timing but never push it into a timeout."""
    return min(30.0, 0.2 * cfg.run_timeout_s)


# RLocks under which this process's device work never gives way (``unyielding``): a thread that gave way waits for
# the timer's whole phase, and that timer may be a candidate whose brackets a harness thread of this process clocks,
# drawing each one's inputs under the RNG lock (verifier/execute/harness.py): held by a thread that gave way, it
# would stop the timing it waits for until the lock's budget ran out
_UNYIELDING: list = []


def unyielding(rlock):
    """Register ``rlock`` (a ``threading.RLock``) as a lock under which ``GivingWay`` never gives way; returns it."""
    _UNYIELDING.append(rlock)
    return rlock


def give_way_to_timer(lock: DeviceLock, budget_s: float, backend: str) -> bool:
    """A point between two pieces of this process's shared device work: where a timer waits, this thread's queued
    device work is finished first (a timer given the device must not find this process's kernels still running in
    its window), then the timer goes first (``DeviceLock.yield_to_timer``, within ``budget_s`` for all the lock's
    yields). Never under an ``unyielding`` lock this thread holds. Returns whether a timer waited."""
    if not lock.timer_waiting() or any(r._is_owned() for r in _UNYIELDING):
        return False
    if backend == "cuda" and torch.cuda.is_initialized():
        torch.cuda.current_stream().synchronize()
    lock.yield_to_timer(budget_s)
    return True


class GivingWay(TorchFunctionMode):
    """The verifier's own device work under the shared hold (the plan's, the reference prefetch's, the judge's runs
    of the reference in fp32 and float64) gives way to a waiting timer between any two of its torch calls, not only
    at the points its code names: a float64 reference of a large convolution or of a whole network is one piece of
    seconds, and a timer waited for all of it (on one H100's real batch at 5b05a1b, 14 s of the drains timers waited
    on were the prefetch's float64 runs, 2.4 s each, and 4.8 s one judge's: bench/results/HISTORY.md).

    Two things make a call boundary a point to give way at. The timer is asked about at each call (a look at the
    lock's files; ``give_way_to_timer``), at most every ``LOOK_S``. And this thread's device work may run at most ``DEPTH``
    calls ahead of its host: each call's end is marked on the thread's stream by a blocking event, and a call waits
    for the mark ``DEPTH`` calls back (a sleep, not a spin, on the host) -- without it the host queues a whole
    float64 network in a millisecond, and the timer that comes next waits for the device to work through it.

    Passes every call through unchanged (the results are the calls'); thread-local, as torch's modes are; on cuda
    only (``device_work``). Attribute reads (``Tensor.shape``) queue nothing and pass straight through."""

    DEPTH = 3
    LOOK_S = 0.0002

    def __init__(self, lock: DeviceLock, budget_s: float, backend: str):
        super().__init__()
        self.lock, self.budget_s, self.backend = lock, budget_s, backend
        self.gave_way = 0  # how many times a timer went first
        self._marks: list = []
        self._k = 0
        self._looked = 0.0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") == "__get__":
            return out
        if self.backend == "cuda" and torch.cuda.is_initialized():
            self._bound()
        now = time.monotonic()
        if now - self._looked >= self.LOOK_S:
            self._looked = now
            if self.lock.held == "shared" and give_way_to_timer(self.lock, self.budget_s, self.backend):
                self.gave_way += 1
        return out

    def _bound(self) -> None:
        """Mark this call's end on the stream; wait for the mark ``DEPTH`` calls back."""
        if not self._marks:
            self._marks = [None] * self.DEPTH
        mark = self._marks[self._k]
        if mark is None:
            mark = self._marks[self._k] = torch.cuda.Event(blocking=True)
        else:
            mark.synchronize()  # (at once where it is done: the device is not behind)
        mark.record(torch.cuda.current_stream())
        self._k = (self._k + 1) % self.DEPTH


@contextlib.contextmanager
def device_work(cfg: VerifyConfig, backend: str) -> Iterator[DeviceLock]:
    """The verifier's own process running the reference on the device (a task's plan; the fp32 and float64
    references of the judging and their outputs; inputs drawn for a child). On cuda: the device lock held shared
    (within ``lock_wait_s``; the lock is yielded for what it holds: a judge gives way to timers and lets go while its
    knockout child runs), since work of this process that lands inside another's timing window is counted in that
    candidate's time; and what this work freed goes back to the driver as it ends (``empty_cache`` returns every
    cached block that no thread holds now). Execution threads do it side by side, each admitted by memory with its
    job (``admission.job_bytes`` counts the judge's copies). Without giving back, eight threads' cached blocks held
    77 GB of an 80 GB H100 and the candidates' own processes ran out of memory (on the test bed). One thread at a
    time, as it once was, queued every candidate's judging behind another's wait for the device lock and its knockout
    child: on one H200 six execution threads verified 381 real candidates an hour with the device 2% busy
    (bench/results/throughput_real_NVIDIA_H200_3d92699.md). Take it inside a memory gate's admission, never around
    one. On cpu it holds nothing and there is no cache to return."""
    with shared_lock(cfg, backend) as lock:
        lock.acquire(False, lock_wait_s(cfg))
        if backend != "cuda":
            yield lock
            return
        try:
            with GivingWay(lock, lock_wait_s(cfg), backend):
                yield lock
        finally:
            give_back_cache(backend)


# A clocked bracket's stream (verifier/execute/harness.py ``_clock_cuda``) waits on words that its harness's thread
# writes from Python after queuing (the hold, the gate) and on the child's done. ``empty_cache`` frees through
# cudaFree, which waits for every stream of the process, holding the allocator's lock and the interpreter's: the
# bracket's thread can then never write its word, and the process stops. At 92b516b an H100's real batch stopped so
# after its first candidate: the engine's preparation threads each gave the cache back after timing a task's
# reference (d0a2af8) while another thread's reference bracket was queued, and no later verdict came in 271 s. So
# the cache goes back only where no bracket of this process is in flight, and none starts meanwhile.
_BRACKETS = threading.Condition()
_in_flight = 0
GIVE_BACK_WAIT_S = 5.0  # the longest wait for brackets in flight to end; past it the cache is kept this time


@contextlib.contextmanager
def bracket_in_flight() -> Iterator[None]:
    """Held by a harness's thread from the first gated work it queues on its stream to the stream's drain."""
    global _in_flight
    with _BRACKETS:
        _in_flight += 1
    try:
        yield
    finally:
        with _BRACKETS:
            _in_flight -= 1
            _BRACKETS.notify_all()


def brackets_in_flight() -> int:
    return _in_flight


def give_back_cache(backend: str, wait_s: float = GIVE_BACK_WAIT_S) -> bool:
    """The allocator's free blocks back to the driver (cuda; nothing on cpu), once no clocked bracket of this process
    is in flight (waiting up to ``wait_s``; none starts while it runs): whether it did. The one way the verifier's
    processes empty the cache."""
    if backend != "cuda" or not torch.cuda.is_initialized():
        return False
    with _BRACKETS:
        if not _BRACKETS.wait_for(lambda: _in_flight == 0, timeout=wait_s):
            return False
        torch.cuda.empty_cache()
        return True
