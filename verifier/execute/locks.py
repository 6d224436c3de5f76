"""The device lock (verifier/common/devlock.py) as the verifier's own process takes it.

``lock_path``: the lock's file for a backend, one per device of the host in ``[verify] lock_dir``; ``lock_wait_s``:
the longest wait for it; ``shared_lock``: the lock for the verifier's own device work (cuda only); and
``device_work``, the one frame in which this process runs the reference on the device (a task's plan, the judging
of a candidate's trials and timed calls, inputs drawn for a child): on cuda it holds the device lock shared, so that
no timing phase of another process has this work inside its window, and gives the allocator's free blocks back as
it ends.

Enters: the config and the backend. Leaves: a held DeviceLock (NoLock on cpu or with ``device_lock`` off).
Imports: torch, verifier.common.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import torch

from kernelmill.errors import InputError
from verifier.common.config import VerifyConfig
from verifier.common.devlock import DeviceLock, device_lock


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
