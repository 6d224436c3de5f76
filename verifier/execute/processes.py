"""Execution processes for the verifier: where a candidate's job runs.

- a fork server per backend and execution slot (``verifier.child.worker --serve``: the server in
  verifier/child/forkserver.py, the job it forks in verifier/child/worker.py) imports torch once and forks a fresh
  child per job (the server never runs torch ops, so forking is safe);
- cuda: a CUDA context cannot be forked, so the server never creates one: in its warm mode it forks the next job's
  child ahead of the job, and that child creates its CUDA context while earlier jobs run, then waits for its job.
  Each slot has two such servers in separate sandboxes, taking turns: the warm child waiting for the next job
  never shares a sandbox with the job running now. ``VerifyConfig.warm_processes`` = 0 gives a cuda job a fresh
  interpreter instead;
- every job gets its own process, a wall-clock timeout and its process group killed after it; job directories go
  under ``[verify] job_dir`` when set, else to memory-backed /dev/shm when it has room (a KernelBench-sized job's
  inputs and outputs are hundreds of MB), else the default temporary directory.

Host settings (``HostSettings``: sandbox, its limits, ``job_dir``): every function here that starts a process or
picks a job directory takes the ones to use as an argument (verify_batch passes its config's); a fork server and a
job root serve one host's settings only (``environment_signature``, the job roots' key), so two configs used in one
process at once never share either.

Sandbox (verifier/common/sandbox.py): where bubblewrap runs, every fork server and every fresh execution process
runs inside one: a read-only view, writable only in this slot's job root (``_job_root``: one directory per process
and execution slot, so a candidate never sees another slot's jobs, emptied after every job) and a private scratch
(HOME, TMPDIR; a fork server empties it after every job), no network, no host environment, a private pid
namespace. After every job the processes the job left are killed (the fork server, or the ``--supervise`` wrapper,
lists them first), the network counters and the view's root are checked, and what a candidate job attempted goes
to ``sandbox.json`` in its job directory, a line in its log and exit status ``sandbox.ESCAPE_EXIT``.

What a server shares between the jobs it serves: the interpreter it forks from (which no job can write: each job
is a child process) and nothing on disk (job root and scratch are emptied between jobs).

Imports: the standard library (verifier.common.backends, for the cpu children's environment, when a fork server
starts).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

from verifier.common import childenv, sandbox
from verifier.common.config import HostSettings
from verifier.common.devlock import lock_files

REPO_ROOT = Path(__file__).resolve().parents[2]


def child_env(host: HostSettings, **extra: str) -> dict:
    """The environment of every execution process: this repository importable, no bytecode written, the sandbox's
    status under ``host`` (for the verdict's versions)."""
    return dict(_passed_env(), PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
                PYTHONDONTWRITEBYTECODE="1", **{childenv.SANDBOX_NOTE: json.dumps(sandbox.status(host))}, **extra)


def _threads(host: HostSettings) -> str:
    """The CPU threads a cuda execution process runs torch with where the environment sets none: the host's share
    (``HostSettings.child_threads``), "" for every usable core."""
    return str(host.child_threads) if host.child_threads > 0 else ""


# variables torch sets in this process itself on first use, to the value a child would take by itself anyway:
# inductor's cache_dir() writes TORCHINDUCTOR_CACHE_DIR (its default) into os.environ. Counted in the signature, it
# made every slot's first job start its fork servers again (a cold start: 13-17 s on one H200 at 5adc643), the
# pair warmed before the job having started before the variable was set
SELF_SET_ENV = ("TORCHINDUCTOR_CACHE_DIR",)
# variables a runner rewrites at every step of its own, which nothing an execution process runs reads: pytest names
# the test now running in PYTEST_CURRENT_TEST. Counted in the signature, it started every slot's fork server again
# at every test (176 servers, 395 CPU-s of the suite's ~2,860 at 6b49484: 14% of it); passed on, a server would
# only carry the name of the test that started it
VOLATILE_ENV = ("PYTEST_CURRENT_TEST",)


def _passed_env() -> dict:
    """This process's environment as execution processes get it: less ``VOLATILE_ENV``."""
    return {k: v for k, v in os.environ.items() if k not in VOLATILE_ENV}


def _environ() -> dict:
    """What a server's signature counts of it: the environment passed on, less ``SELF_SET_ENV``."""
    return {k: v for k, v in _passed_env().items() if k not in SELF_SET_ENV}


# the host settings an execution process uses (its sandbox and the sandbox's limits, where jobs go, the children's
# threads), and those only the build side reads (the compile pool's headers, binding form and split, the locks its
# import check holds); every field of HostSettings is one or the other (tests/test_verifier_processes.py). Counted
# whole, a config that changed only the build side's (a test module's pch = false) started every slot's fork server
# again
SERVER_HOST_FIELDS = ("sandbox", "sandbox_procs", "sandbox_pids", "bwrap", "job_dir", "child_threads", "host_waits")
BUILD_HOST_FIELDS = ("pch_dir", "canonical_binding", "split_build", "code_locks")


def environment_signature(host: HostSettings) -> str:
    """What a long-lived execution process inherited: the environment (everything child_env passes, less
    ``SELF_SET_ENV`` and ``VOLATILE_ENV``), the host settings it was started with that its processes use
    (``SERVER_HOST_FIELDS``) and whether bubblewrap is used. A process serves only callers whose signature is the one
    it started with."""
    state = [sorted(_environ().items()), [repr(getattr(host, f)) for f in SERVER_HOST_FIELDS], sandbox.enabled(host)]
    return hashlib.sha256(json.dumps(state).encode()).hexdigest()


class ForkServer:
    """One long-lived ``verifier.child.worker --serve`` process per backend and execution slot: torch is
    imported once, and every candidate runs in a fresh child forked from it (so no candidate can
    leave state for the next). Replaced when it dies, and when the environment or host settings it started with are
    not the caller's (``signature``)."""

    def __init__(self, backend: str, host: HostSettings, job_root: str | None = None, build_root: str = "",
                 locks: list = (), warm: bool = False):
        from verifier.common.backends import CPU_CHILD_ENV, CPU_PERTURB  # here: this module stays torch-free

        self.host = host
        self.signature = environment_signature(host)
        self.environ = _environ()  # what it started under, to say what changed (``unfit_for``)
        env = child_env(host)
        if backend == "cpu":
            env.update(CPU_CHILD_ENV, **{childenv.CPU_PERTURB: str(CPU_PERTURB)})
            env.setdefault("OMP_NUM_THREADS", "1")
        if warm:
            # the server itself runs one OpenMP thread (an OpenMP pool does not survive a fork); each child
            # sets the count a fresh process would have had
            # NVML for torch's device count: `import torch.utils.cpp_extension` counts devices, and the CUDA
            # runtime's count marks every later fork "bad" (no CUDA there); NVML's does not (measured on the H100)
            env.update({childenv.SERVE_WARM: "1", childenv.WARM_BACKEND: backend, "OMP_NUM_THREADS": "1",
                        "PYTORCH_NVML_BASED_CUDA_CHECK": "1", childenv.HOST_WAITS: host.host_waits,
                        childenv.CHILD_OMP_THREADS: os.environ.get("OMP_NUM_THREADS", "") or _threads(host)})
        cmd = [sys.executable, "-m", "verifier.child.worker", "--serve", str(host.sandbox_procs)]
        self.sandbox, self.limit, self.job_root, self.build_root = None, None, job_root, build_root
        self.locks = list(locks)
        if job_root and sandbox.enabled(host):
            self.sandbox = sandbox.Sandbox(Path(tempfile.mkdtemp(prefix="km-sbx-", dir=sandbox._scratch_base())),
                                           writable=[job_root, *locks], host=host, read_only=[build_root],
                                           gpu=backend != "cpu")
            self.limit = sandbox.PidsLimit(host.sandbox_pids)
            cmd, env = self.sandbox.argv(cmd, dict(env, **{childenv.SANDBOXED: "1"})), {}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1,
                                     preexec_fn=self.limit.enter if self.limit else None)

    def run(self, job_dir: Path, timeout_s: float) -> tuple[int, bool, list[str]]:
        """Run one job; returns (exit status, timed out, what the job attempted outside its sandbox)."""
        hits = self.limit.hits() if self.limit else 0
        self.proc.stdin.write(f"{job_dir}\t{timeout_s}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise BrokenPipeError("fork server died")
        rc, timed_out, *rest = line.rstrip("\n").split("\t")
        findings = json.loads(rest[0]) if rest and rest[0] else []
        if self.sandbox:
            findings += _write_findings(self.sandbox.outside_writes())
        if self.limit and self.limit.hits() > hits:
            findings.append(f"the process limit ({self.host.sandbox_pids} processes and threads) was hit: a fork bomb")
        return int(rc), bool(int(timed_out)), findings

    def alive(self) -> bool:
        return self.proc.poll() is None

    def unfit_for(self, host: HostSettings, job_root: str, build_root: str, locks: list) -> str:
        """Why this server cannot serve a job with these settings ("" where it can)."""
        if not self.alive():
            return f"it had ended (exit {self.proc.poll()})"
        if (self.build_root, self.job_root, self.locks) != (build_root, job_root, list(locks)):
            return "another build root, job root or device lock"
        if self.signature != environment_signature(host):
            now = _environ()
            changed = sorted(k for k in {*self.environ, *now} if self.environ.get(k) != now.get(k))
            return f"the environment changed ({', '.join(changed[:8])})" if changed else "other host settings"
        return ""

    def close(self) -> None:
        self.ask_to_end()
        self.reap()

    def ask_to_end(self) -> None:
        """Close its job pipe: the server ends (and its pre-forked child with it); ``reap`` waits for that."""
        if self.alive():
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def reap(self) -> None:
        if self.alive():
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for part in (self.sandbox, self.limit):
            if part:
                part.remove()


def _write_findings(paths: list[str]) -> list[str]:
    return [f"wrote {p} (outside the job directory; the write went to a discarded copy)" for p in paths[:10]] + (
        [f"... and {len(paths) - 10} more paths"] if len(paths) > 10 else [])


# ---------------------------------------------------------------------------- execution slots
# Fork servers (and the warm children they forked) and job roots belong to an execution *slot*, not to a thread: a verify_batch
# leases one slot per execution thread for the thread's life and gives it back at the end, and the next
# batch's threads lease the same slots. So the warm child a slot's server forked for its next job (cuda:
# CUDA context and profiler started, ~6.7 CPU-s; the server itself ~6.3 for torch) serves the next batch's first job
# instead of being left behind, and the processes alive at any time are bounded by the most execution
# threads that ever ran at once (an RL run verifies hundreds of batches). A thread that leased no slot (a
# direct caller of the execution functions) is its own slot, as before.

_SLOT = threading.local()
_SLOTS_LOCK = threading.Lock()
_FREE_SLOTS: list[int] = []
_SLOTS_MADE = 0


@contextmanager
def exec_slot():
    """Lease an execution slot for this thread while the block runs (the lowest free one)."""
    global _SLOTS_MADE
    with _SLOTS_LOCK:
        if _FREE_SLOTS:
            n = _FREE_SLOTS.pop(0)
        else:
            n, _SLOTS_MADE = _SLOTS_MADE, _SLOTS_MADE + 1
    _SLOT.n = n
    try:
        yield n
    finally:
        _SLOT.n = None
        with _SLOTS_LOCK:
            _FREE_SLOTS.append(n)
            _FREE_SLOTS.sort()


def _slot() -> tuple[str, int]:
    n = getattr(_SLOT, "n", None)
    return ("slot", n) if n is not None else ("thread", threading.get_ident())


class _Spawner:
    """Starts the processes that outlive a job (fork servers) from one thread that lives as
    long as this process. bubblewrap's ``--die-with-parent`` (PR_SET_PDEATHSIG) kills a sandboxed process
    when the *thread* that started it ends, and a batch's execution threads end with the batch."""

    def __init__(self):
        self._q: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn, *args, **kwargs):
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="km-spawner", daemon=True)
                self._thread.start()
        fut: Future = Future()
        self._q.put((fut, fn, args, kwargs))
        return fut.result()

    def _loop(self) -> None:
        while True:
            fut, fn, args, kwargs = self._q.get()
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - the caller's error, raised in the caller's thread
                fut.set_exception(e)


_SPAWNER = _Spawner()


def start_lasting(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` run on the thread that lives as long as this process: for what starts a process that
    must outlive the calling thread (a fork server, a slot's trusted process: verifier/workers.py)."""
    return _SPAWNER.call(fn, *args, **kwargs)


_SERVERS: dict[tuple, ForkServer] = {}
_SERVERS_LOCK = threading.Lock()


def _server(backend: str, host: HostSettings, build_root: str = "", locks: list = (),
            turn: int | None = None) -> ForkServer:
    """This slot's fork server, or its warm one of ``turn`` 0 or 1 (``_warm_server``), started with ``host``; its
    sandbox sees ``build_root`` (read-only), so a new build root means a new server, and other host settings
    (``environment_signature``) too."""
    key = (backend, *_slot(), turn)
    root = _job_root(host)
    with _SERVERS_LOCK:
        srv = _SERVERS.get(key)
        why = "none yet" if srv is None else srv.unfit_for(host, root, build_root, locks)
        if why:
            if srv is not None:
                if turn is not None:  # said: a warm server started again makes its next job a cold start
                    print(f"[verifier] the fork server of {key} is started again: {why}", file=sys.stderr, flush=True)
                srv.close()
            srv = _SERVERS[key] = start_lasting(ForkServer, backend, host, root, build_root, locks, turn is not None)
        return srv


WARM_BACKENDS = ("cuda",)  # backends whose jobs run in pre-forked, warmed-up children (a pair of servers per slot)
_TURNS: dict[tuple, int] = {}


def _warm_server(backend: str, host: HostSettings, build_root: str = "", locks: list = ()) -> ForkServer:
    """The cuda server whose turn it is in this slot; the other one (started now if it is not running) warms
    its next child while this job runs."""
    slot = (backend, *_slot())
    with _SERVERS_LOCK:
        turn = _TURNS.get(slot, 0)
        _TURNS[slot] = 1 - turn
    srv = _server(backend, host, build_root, locks, turn)
    _server(backend, host, build_root, locks, 1 - turn)
    return srv


def warm_servers(backend: str, host: HostSettings, build_root: str = "", locks: list = ()) -> None:
    """This slot's pair of warm servers started now, with what its jobs will ask for (``_job_fields``): their
    children import torch and create their CUDA contexts while the slot has nothing to run yet (a batch's first
    builds compile), not while its first candidate waits. Each cuda slot's first job waited 13-15 s for that on one
    H200 (8b1b652)."""
    if backend in WARM_BACKENDS:
        for turn in (0, 1):
            _server(backend, host, build_root, locks, turn)


def end_together(procs) -> None:
    """Processes that outlive their jobs (fork servers here, slots' trusted processes in verifier/workers.py), ended
    at exit side by side: each told to end first (``ask_to_end``), then each waited for (``reap``), not one after
    another (each waits up to seconds for what it ends itself)."""
    procs = list(procs)
    for p in procs:
        p.ask_to_end()
    for p in procs:
        p.reap()


@atexit.register
def end_servers() -> None:
    """This process's fork servers ended side by side and forgotten: the next job starts new ones. At exit, and
    where a caller gives back its kept processes between batches (verifier/workers.py ``end_kept``): on cuda each
    slot's pair of warm servers holds two children with a CUDA context each."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    end_together(servers)


def _base_job_root(host: HostSettings) -> str:
    if host.job_dir:
        return host.job_dir
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize > 8 * 2**30 and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    except OSError:
        pass
    return tempfile.gettempdir()


_JOB_ROOTS: dict[tuple, str] = {}
_JOB_ROOTS_LOCK = threading.Lock()


def _job_root(host: HostSettings) -> str:
    """Where this thread's job directories go: a directory of its own (the only one its sandboxed
    execution processes may write) under ``host.job_dir`` (``[verify] job_dir``), else /dev/shm when it has room
    (inputs and outputs of a job are hundreds of MB for KernelBench-sized tensors: memory-backed files keep that off
    the disk), else the default temporary directory."""
    tid = (*_slot(), host.job_dir)  # another [verify] job_dir: another root
    with _JOB_ROOTS_LOCK:
        root = _JOB_ROOTS.get(tid)
        if root is None or not os.path.isdir(root):
            base = _base_job_root(host)
            os.makedirs(base, exist_ok=True)
            root = _JOB_ROOTS[tid] = tempfile.mkdtemp(prefix=f"km-jobs-{os.getpid()}-", dir=base)
        return root


def clear_job_root(host: HostSettings) -> None:
    """Remove everything in this slot's job root under ``host`` (``_job_root``). Called after each job: its slot runs
    one job at a time, so whatever is left there (a file a candidate wrote beside its job directory) would otherwise
    be readable by the slot's next candidate, in this batch or a later one."""
    root = Path(_job_root(host))
    for entry in root.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@atexit.register
def _remove_job_roots() -> None:
    for root in list(_JOB_ROOTS.values()):
        shutil.rmtree(root, ignore_errors=True)


class Sandboxed:
    """One execution process, in a sandbox when there is one (verifier/common/sandbox.py): bubblewrap runs the
    ``--supervise`` wrapper, which runs ``command``, then kills whatever the job left in the sandbox and
    reports it (with network use) on a pipe the command does not inherit. ``writable`` is the one host
    directory the process may write; ``host`` says whether there is a sandbox and its limits."""

    def __init__(self, command: list, env: dict, writable: list, gpu: bool, host: HostSettings, read_only: list = (),
                 **popen):
        self.sandbox, self.limit, self._read, self.host = None, None, None, host
        if writable and writable[0] and sandbox.enabled(host):
            self.sandbox = sandbox.Sandbox(Path(tempfile.mkdtemp(prefix="km-sbx-", dir=sandbox._scratch_base())),
                                           writable=writable, host=host, gpu=gpu, read_only=read_only)
            self.limit = sandbox.PidsLimit(host.sandbox_pids)
            r, w = os.pipe()
            command = self.sandbox.argv(sandbox.supervise_argv(w, command, host),
                                        dict(env, **{childenv.SANDBOXED: "1"}))
            popen["pass_fds"] = (w,)
            env = {}
        self.proc = subprocess.Popen(command, env=env, text=True, start_new_session=True,
                                     preexec_fn=self.limit.enter if self.limit else None, **popen)
        if self.sandbox:
            os.close(w)
            self._read = os.fdopen(r)
        self.pid, self.stdin = self.proc.pid, self.proc.stdin

    def poll(self):
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout=timeout)

    def kill(self) -> list[str]:
        """End the process (a timeout): bubblewrap's pid namespace goes with it. Returns what the job had
        attempted by then (writes outside; a fork bomb the supervisor ended first)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        return self.findings()

    def findings(self) -> list[str]:
        """After the process ended: what its job attempted outside the sandbox (and the sandbox removed)."""
        out = []
        if self._read is not None:
            try:
                text = self._read.read()
                out += json.loads(text) if text.strip() else []
            except (OSError, ValueError):
                pass
            self._read.close()
            self._read = None
        if self.sandbox:
            out += _write_findings(self.sandbox.outside_writes())
            self.sandbox.remove()
        if self.limit:
            if self.limit.hits():
                out.append(f"the process limit ({self.host.sandbox_pids} processes and threads) was hit: a fork bomb")
            self.limit.remove()
        return out


def _spawn_child(job_dir: Path, timeout_s: float, host: HostSettings, backend: str = "cuda", build_root: str = "",
                 locks: list = ()) -> tuple[int, bool, list[str]]:
    """A fresh interpreter for one job (cuda with warm_processes 0, or a job dir outside the slot's root)."""
    writable = _job_root(host) if _under_root(job_dir, host) else str(job_dir)
    with open(job_dir / "child.log", "wb") as log:
        env = child_env(host)
        if backend != "cpu" and not env.get("OMP_NUM_THREADS") and _threads(host):
            env["OMP_NUM_THREADS"] = _threads(host)
        proc = Sandboxed([sys.executable, "-m", "verifier.child.worker", str(job_dir)], env,
                         [writable, *locks], gpu=backend != "cpu", host=host, read_only=[build_root], stdout=log,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(job_dir))
    try:
        return proc.wait(timeout=timeout_s), False, proc.findings()
    except subprocess.TimeoutExpired:
        return proc.proc.returncode, True, proc.kill()


def _under_root(job_dir: Path, host: HostSettings) -> bool:
    return sandbox._under(os.path.abspath(job_dir), _job_root(host))


def _job_fields(job_dir: Path) -> tuple[str, str, list[str]]:
    """(kind, build_root, lock files) of the job in ``job_dir``; the device lock's files (verifier/common/devlock.py)
    are made here, so that a sandbox can bind them writable (the rest of the build root is read-only)."""
    try:
        d = json.loads((job_dir / "job.json").read_text())
    except (OSError, ValueError, AttributeError):
        return "", "", []
    return str(d.get("kind", "")), str(d.get("build_root", "")), made_lock_files(str(d.get("timing_lock") or ""))


def made_lock_files(timing_lock: str) -> list[str]:
    """The device lock's files for ``timing_lock`` (none for ""), made where missing."""
    locks = lock_files(timing_lock) if timing_lock else []
    for f in locks:
        try:
            os.close(os.open(f, os.O_RDWR | os.O_CREAT, 0o666))
        except OSError:
            pass
    return locks


def _run_child(job_dir: Path, backend: str, timeout_s: float, host: HostSettings,
               warm: int = 0) -> tuple[int | None, bool, str]:
    """Run one job in a process started with ``host``'s settings; returns (exit status, timed out, its log). A
    candidate job that attempted to leave its sandbox gets ``sandbox.json`` in its directory, a last log line saying
    what, and (when it otherwise exited 0) exit status ``sandbox.ESCAPE_EXIT``. The log is redacted (host
    environment values)."""
    kind, build_root, locks = _job_fields(job_dir)
    if not _under_root(job_dir, host) or (backend != "cpu" and warm <= 0):
        rc, timed_out, findings = _spawn_child(job_dir, timeout_s, host, backend, build_root, locks)
    else:
        server = _warm_server if backend in WARM_BACKENDS else _server
        try:
            rc, timed_out, findings = server(backend, host, build_root, locks).run(job_dir, timeout_s)
        except (BrokenPipeError, OSError, ValueError):  # a fresh server, once
            rc, timed_out, findings = server(backend, host, build_root, locks).run(job_dir, timeout_s)
    log_file = job_dir / "child.log"
    text = log_file.read_text(errors="replace") if log_file.is_file() else ""
    text = sandbox.redact_env(text)
    if findings and kind != "reference":  # a reference job runs no candidate code
        sandbox.write_findings(job_dir, findings)
        text = text.rstrip("\n") + "\n" + sandbox.describe(findings) + "\n"
        if rc == 0:
            rc = sandbox.ESCAPE_EXIT
    return rc, timed_out, text
