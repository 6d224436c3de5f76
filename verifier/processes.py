"""Execution processes for the verifier: where a candidate's job runs.

- cpu: a fork server per backend and execution thread (``verifier.worker --serve``) imports torch once and
  forks a fresh child per job;
- cuda: a fresh interpreter per job (a CUDA context cannot be forked), taken from a WarmPool of single-use
  processes started ahead of need (``verifier.worker --wait``), or spawned on demand.
Every job gets its own process, a wall-clock timeout and its process group killed after it; job
directories go to memory-backed /dev/shm when it has room.

Imports: the standard library (verifier.backends, for the cpu children's environment, when a fork server starts).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def child_env(**extra: str) -> dict:
    """The environment of every execution process: this repository importable, no bytecode written."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
                PYTHONDONTWRITEBYTECODE="1", **extra)


class ForkServer:
    """One long-lived ``verifier.worker --serve`` process per backend and execution thread: torch is
    imported once, and every candidate runs in a fresh child forked from it (so no candidate can
    leave state for the next). Replaced when it dies."""

    def __init__(self, backend: str):
        from verifier.backends import CPU_CHILD_ENV, CPU_PERTURB  # here: this module stays torch-free

        env = child_env()
        if backend == "cpu":
            env.update(CPU_CHILD_ENV, KM_CPU_PERTURB=str(CPU_PERTURB))
            env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen([sys.executable, "-m", "verifier.worker", "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True, bufsize=1)

    def run(self, job_dir: Path, timeout_s: float) -> tuple[int, bool]:
        self.proc.stdin.write(f"{job_dir}\t{timeout_s}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise BrokenPipeError("fork server died")
        rc, timed_out = line.split("\t")
        return int(rc), bool(int(timed_out))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_SERVERS: dict[tuple[str, int], ForkServer] = {}
_SERVERS_LOCK = threading.Lock()


def _server(backend: str) -> ForkServer:
    key = (backend, threading.get_ident())
    with _SERVERS_LOCK:
        srv = _SERVERS.get(key)
        if srv is None or not srv.alive():
            srv = _SERVERS[key] = ForkServer(backend)
        return srv


@atexit.register
def _close_servers() -> None:
    for srv in list(_SERVERS.values()):
        srv.close()


def _job_root() -> str | None:
    """Where job directories go: ``KM_JOB_DIR``, else /dev/shm when it has room (inputs and outputs of a
    job are hundreds of MB for KernelBench-sized tensors: memory-backed files keep that off the disk),
    else the default temporary directory."""
    if os.environ.get("KM_JOB_DIR"):
        return os.environ["KM_JOB_DIR"]
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize > 8 * 2**30 and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    except OSError:
        pass
    return None


class WarmPool:
    """Single-use execution processes for the cuda backend, started ahead of need: each has imported
    torch and created its CUDA context before a candidate is assigned to it, runs exactly one job and
    exits (``verifier.worker --wait``). Isolation is that of a fresh process per candidate; the start-up
    cost (a CUDA context cannot be forked) overlaps with the execution of earlier candidates."""

    def __init__(self, backend: str, size: int):
        self.backend, self.size = backend, max(1, size)
        self._ready: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self.fill()

    def _start(self) -> subprocess.Popen:
        env = child_env(KM_WARM_BACKEND=self.backend)
        # output before a job arrives (a failed start) goes to one log per pool, for diagnosis
        with open(Path(tempfile.gettempdir()) / f"km-warm-{os.getpid()}-{self.backend}.log", "ab") as log:
            return subprocess.Popen([sys.executable, "-m", "verifier.worker", "--wait"], stdin=subprocess.PIPE,
                                    stdout=log, stderr=log, env=env, text=True, start_new_session=True)

    def fill(self) -> None:
        with self._lock:
            self._ready = [p for p in self._ready if p.poll() is None]
            while len(self._ready) < self.size:
                self._ready.append(self._start())

    def take(self) -> subprocess.Popen | None:
        with self._lock:
            proc = None
            while self._ready and proc is None:
                p = self._ready.pop(0)
                proc = p if p.poll() is None else None
        self.fill()
        return proc

    def close(self) -> None:
        with self._lock:
            for p in self._ready:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                p.wait()
            self._ready = []


_WARM: dict[str, WarmPool] = {}


def warm_pool(backend: str, size: int) -> WarmPool:
    with _SERVERS_LOCK:
        pool = _WARM.get(backend)
        if pool is None:
            pool = _WARM[backend] = WarmPool(backend, size)
        elif pool.size < size:
            pool.size = size
        return pool


@atexit.register
def _close_warm() -> None:
    for pool in list(_WARM.values()):
        pool.close()


def _spawn_child(job_dir: Path, timeout_s: float, backend: str = "cuda", warm: int = 0) -> tuple[int, bool]:
    """A fresh interpreter per candidate (cuda: a forked child cannot use CUDA once torch has been
    imported in a parent that touched it, so the cuda backend pays the import instead of forking); with
    ``warm`` > 0 the interpreter comes from the WarmPool, started before the job existed."""
    proc = None
    if warm > 0:
        proc = warm_pool(backend, warm).take()
        if proc is not None:
            try:
                proc.stdin.write(f"{job_dir}\n")
                proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                proc = None
        if proc is not None:
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                return proc.wait(), True
            if (job_dir / "child.log").is_file():
                return rc, False
            # the process died before it took the job (no log yet: the candidate never ran): run it fresh
            proc = None
    if proc is None:
        env = child_env()
        with open(job_dir / "child.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "verifier.worker", str(job_dir)], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=str(job_dir),
                                    start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(), True


def _run_child(job_dir: Path, backend: str, timeout_s: float, warm: int = 0) -> tuple[int | None, bool, str]:
    if backend != "cpu":
        rc, timed_out = _spawn_child(job_dir, timeout_s, backend, warm)
        log_file = job_dir / "child.log"
        return rc, timed_out, log_file.read_text(errors="replace") if log_file.is_file() else ""
    try:
        rc, timed_out = _server(backend).run(job_dir, timeout_s)
    except (BrokenPipeError, OSError, ValueError):
        rc, timed_out = _server(backend).run(job_dir, timeout_s)  # a fresh server, once
    log_file = job_dir / "child.log"
    text = log_file.read_text(errors="replace") if log_file.is_file() else ""
    return rc, timed_out, text
