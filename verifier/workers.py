"""Trusted execution processes: each execution slot's harness and judge in a verifier process of its own.

Why: everything that measures and decides for a candidate (the harness driving its clocked brackets, the judge
running the reference on every trial's inputs and every checked timed call, the knockout, the run-time builds'
scans) is Python in a trusted process. With every slot a thread of one verifier process they shared one
interpreter lock: on one H200 (caf0d0a) the verifier's process used 0.94 of a core over the whole batch, its six
execution threads' judging took 6.4 s median per candidate, and twelve threads made it 21.8 s (more slots only
waited). Here each slot is a process: the engine's execution thread hands the slot's process a candidate whose
builds are done and waits for its verdict.

Trust: these processes are the verifier's own, started from the verifier's code (never a fork of a process that
ran anything of a candidate's), and they never import, load or run candidate code either: candidate code runs in
the execution children they start, sandboxed as before (verifier/execute/processes.py). What crosses the pipe is
the verifier's own objects (the candidate's Work with its compile results, the config; the Work with its verdict
back), pickled between trusted processes. The device lock is the host's (file locks), so a timing window has the
device alone whichever process holds it.

Memory admission stays one first-come-first-served gate for the device, in the engine's process: a slot's process
asks it over the pipe (``admission.admit_through``) for the bytes its job plans to hold and gives them back after;
the engine gives back whatever a process that died still held.

Guarantees: one job at a time per process; a process that dies or cannot be reached ends its candidate as a
``verifier_error`` (never the candidate's verdict), and the slot starts a new process for its next candidate; a
process is kept for the next batch of the same verifier process (a reward server's next call starts nothing) and
ended when the verifier process exits (its pipe closes; ``PR_SET_PDEATHSIG`` where the verifier is killed).
Not guaranteed: a bound on how long a job of a live process may take (each of its children has its timeout).

Enters: the engine's execution thread's Work and compile results. Leaves: the Work with its verdict. Imports:
verifier.common, verifier.execute (admission). The job itself is the engine's function, named by the engine.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from verifier.execute import admission
from verifier.execute.processes import end_servers, end_together, start_lasting

REPO_ROOT = str(Path(__file__).resolve().parents[1])
START_TIMEOUT_S = 120.0  # the new process's first word (its imports: torch)


class WorkerDied(RuntimeError):
    """The slot's trusted process ended or stopped answering during a job, or its job raised on the verifier's side
    (the process then lives on): the verifier's failure, never the candidate's verdict."""


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the kernel ends this process when the thread that started it ends (the engine's
    lasting spawner thread, which lives as long as the verifier process)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:  # noqa: BLE001 - not Linux: the closed pipe still ends it
        pass


class TrustedProcess:
    """One slot's trusted process: ``run(job)`` sends it a job and serves its admission requests until the
    result comes back. Made in two steps: the constructor starts the process (on the lasting spawner thread, to
    which its death signal is tied) and ``wait_ready`` waits for its first word (its imports, seconds) in the
    caller's thread, so that the slots' processes start side by side. When the spawner waited for each one's
    imports, a cold batch's eight slots came up one after another, 6-7 s apart on one H200 (8b1b652: the last at
    65 s), and every fork server a task's reference timing needed queued behind them on the same thread: most of
    the batch's first reference timings began after 74 s."""

    def __init__(self, entry: str):
        self.entry = entry
        self.signature = _signature()
        self.busy_since: float | None = None  # time.monotonic() when its job was sent
        ours, theirs = socket.socketpair()
        module, func = entry.split(":")
        code = (f"import sys; from {module} import {func} as serve; serve(int(sys.argv[1]))")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                                     stdin=subprocess.DEVNULL, stdout=2, env=env, cwd=REPO_ROOT,
                                     preexec_fn=_die_with_parent)
        theirs.close()
        self.conn = Connection(ours.detach())

    def wait_ready(self) -> None:
        """Its first word ("ready", once its imports are done); WorkerDied (and the process ended) when it does not
        come within START_TIMEOUT_S or is not that."""
        if not self.conn.poll(START_TIMEOUT_S):
            self.close()
            raise WorkerDied(f"the trusted execution process did not start within {START_TIMEOUT_S:.0f} s")
        try:
            hello = self.conn.recv()
        except (EOFError, OSError) as e:
            self.close()
            raise WorkerDied(f"the trusted execution process failed to start (exit {self.proc.poll()})") from e
        if hello != ("ready", self.proc.pid):
            self.close()
            raise WorkerDied(f"the trusted execution process answered {hello!r} instead of ready")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, job: tuple, turns: admission.ChildTurns | None = None):
        """The job's result, computed in the process; admission requests served meanwhile from this process's
        gates, and its child's turn from ``turns`` (none needed where None). WorkerDied when the process ends or the
        pipe breaks before the result."""
        held: list[tuple[admission.MemoryGate, int]] = []
        turn = [False]
        self.busy_since = time.monotonic()
        failed = None
        try:
            self.conn.send(("job", job))
            while True:
                kind, *rest = self.conn.recv()
                if kind == "admit":
                    device, budget_gib, n, capacity = rest
                    try:
                        gate = admission.gate_for(device, budget_gib, capacity)
                    except Exception as e:  # noqa: BLE001 - told to the job, which raises it where its own
                        self.conn.send(("refused", f"{type(e).__name__}: {e}"))  # errors are judged (and retried)
                        continue
                    t0 = time.perf_counter()
                    gate.acquire(n)
                    held.append((gate, n))
                    self.conn.send(("admitted", time.perf_counter() - t0))
                elif kind == "release":
                    device, budget_gib, n = rest
                    gate = admission.gate_for(device, budget_gib)
                    held.remove((gate, n))
                    gate.release(n)
                elif kind == "turn":  # its candidate's child is about to start
                    waited = turns.take() if turns is not None else 0.0
                    turn[0] = turns is not None
                    self.conn.send(("turn_go", waited))
                elif kind == "turn_over":  # the child has ended: its judging runs beside another slot's child
                    if turn[0]:
                        turn[0] = False
                        turns.give_back()
                elif kind == "done":
                    return rest[0]
                elif kind == "failed":  # the job raised on the verifier's side; the process lives on for the next
                    failed = rest[0]
                    break
                else:
                    raise WorkerDied(f"the trusted execution process sent {kind!r}")
        except (EOFError, OSError, ValueError) as e:
            try:  # its end closes the pipe before the kernel lets it be reaped: wait for the exit status a moment
                rc = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                rc = None
            self.close()
            raise WorkerDied("the trusted execution process " + (f"ended (exit {rc})" if rc is not None else
                                                                  f"stopped answering ({type(e).__name__})")) from e
        except BaseException:
            self.close()
            raise
        finally:
            self.busy_since = None
            for gate, n in held:
                gate.release(n)
            if turn[0]:  # (a process that died during its child)
                turns.give_back()
        raise WorkerDied(failed)

    def close(self) -> None:
        self.ask_to_end()
        self.reap()

    def ask_to_end(self) -> None:
        """Tell the process to end (its loop returns on None or a closed pipe); ``reap`` waits for it."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        with contextlib.suppress(OSError):
            self.conn.close()

    def reap(self) -> None:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)


def _signature() -> tuple:
    """What a kept process inherited that a later batch may not share: the GPUs it sees."""
    return (os.environ.get("CUDA_VISIBLE_DEVICES"),)


_IDLE: list[TrustedProcess] = []  # kept for the next lease
_LEASED: set[TrustedProcess] = set()  # serving a slot now
_IDLE_LOCK = threading.Lock()


@contextlib.contextmanager
def lease(entry: str):
    """A slot's trusted process for the block: a kept one that still runs with this process's signature, or a new one
    (started from the lasting spawner thread, so that its death signal is tied to the verifier's life, not to the
    batch's thread). Kept for the next lease afterwards when it is still alive."""
    proc = None
    with _IDLE_LOCK:
        while _IDLE and proc is None:
            p = _IDLE.pop()
            if p.alive() and p.entry == entry and p.signature == _signature():
                proc = p
            else:
                p.close()
    holder = [proc]

    def current() -> TrustedProcess:
        if holder[0] is None or not holder[0].alive():
            with _IDLE_LOCK:
                _LEASED.discard(holder[0])
            if holder[0] is not None:
                holder[0].close()
            holder[0] = None
            started = start_lasting(TrustedProcess, entry)
            started.wait_ready()  # here, not on the spawner's thread: the slots' processes import side by side
            holder[0] = started
        with _IDLE_LOCK:
            _LEASED.add(holder[0])
        return holder[0]

    try:
        yield current
    finally:
        p = holder[0]
        if p is not None:
            with _IDLE_LOCK:
                _LEASED.discard(p)
                if p.alive():
                    _IDLE.append(p)
            if not p.alive():
                p.close()


@atexit.register
def _close_idle() -> None:
    """At the verifier's exit: the kept processes ended side by side (each ends its fork servers and job roots)."""
    with _IDLE_LOCK:
        procs, _IDLE[:] = list(_IDLE), []
    end_together(procs)


def end_kept() -> None:
    """Between batches (none running in this process): every process kept for the next batch ended, the slots'
    trusted processes and this process's own fork servers (a task's reference job runs in them). On cuda each holds
    CUDA contexts, three a slot (its process and two warm children) and two for each of this process's slots,
    which wait on the device doing nothing until the next batch; the next batch starts them again (seconds).
    For a caller that gives the device back while it does something else (tests/gpu after each module: ten
    pytest workers' kept processes held about a hundred contexts on one H200)."""
    _close_idle()
    end_servers()


def serve(fd: int, run_job) -> None:
    """The slot process's loop: jobs from the pipe ``fd``, each run by ``run_job(*job)``, its result sent back; memory
    admission asked of the engine's gate over the same pipe. Ends when the pipe closes or says None."""
    conn = Connection(fd)
    admission.admit_through(_RemoteAdmission(conn))
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        _, job = msg
        try:
            result = run_job(*job)
        except BaseException as e:  # noqa: BLE001 - the engine's own failure: told, never the candidate's verdict
            conn.send(("failed", f"{type(e).__name__}: {e}"))
            if not isinstance(e, Exception):
                raise
            continue
        conn.send(("done", result))


class _RemoteAdmission:
    """The engine's memory gates, asked over the slot's pipe (one job at a time per process, so requests and
    answers never interleave)."""

    def __init__(self, conn: Connection):
        self.conn = conn

    @contextlib.contextmanager
    def admit(self, device: str, budget_gib: float, n: int, capacity: int | None = None):
        self.conn.send(("admit", device, budget_gib, n, capacity))
        kind, waited = self.conn.recv()
        if kind == "refused":  # the engine's gate could not be made: its error, raised in the job (out of memory
            raise RuntimeError(f"the engine could not admit the job: {waited}")  # there is tried again)
        if kind != "admitted":
            raise RuntimeError(f"the engine answered {kind!r} to an admission request")
        try:
            yield waited
        finally:
            self.conn.send(("release", device, budget_gib, n))

    @contextlib.contextmanager
    def child_turn(self):
        """The engine's turn for this slot's execution child (admission.ChildTurns), held for the block."""
        self.conn.send(("turn",))
        kind, waited = self.conn.recv()
        if kind != "turn_go":
            raise RuntimeError(f"the engine answered {kind!r} to a child's turn")
        try:
            yield waited
        finally:
            self.conn.send(("turn_over",))
