"""The fork server behind ``python -m verifier.child.worker --serve PROCS_MAX``: one per backend and execution slot,
started by verifier/execute/processes.py.

It imports torch once (and, through ``_preload``, what the profiler's first session imports), then runs every job
named on its stdin in a fresh child forked from itself, so no job inherits another's state and none pays the
imports again. What the child runs is verifier/child/worker.py's ``main``, handed in by worker.py's ``__main__`` as
``job_main``: a forked child runs the module the server was started as, not a second copy of it imported here.

- warm mode (``childenv.SERVE_WARM``, cuda): the next job's child is forked ahead of its job; it creates its CUDA
  context and starts the profiler while earlier jobs run, then waits for its job dir on a pipe (``_prefork``); one
  whose warm-up failed takes no job, which then runs in a process forked for it (``_hand_over``);
- inside a sandbox (``childenv.SANDBOXED``, verifier/common/sandbox.py): after each job the server kills what the job
  left in its pid namespace, reports those processes, a fork bomb and any network use, and empties the private
  scratch and /dev/shm (``_wipe_private_dirs``).

What it does NOT do: run torch ops itself (a CUDA context or an OpenMP pool in the server would make its forks
unusable; ``_preload`` ends a server whose CUDA got initialised), look at a job's results (the child writes them
to its job dir; the verifier judges them), or defend itself against a child that signals or ptraces it.

Imports: torch, the standard library, verifier.common.childenv and verifier.common.sandbox.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable

import torch

from verifier.common import childenv, hostwait, sandbox


def _run_forked(job_dir: str, job_main: Callable[[str], int], notes: tuple = ()) -> None:
    """Body of a forked child: own session, output to the job's log (``notes`` first), ``job_main(job_dir)``
    (which writes the result file), then _exit with its status."""
    code = 1
    try:
        if os.getsid(0) != os.getpid():  # a pre-forked warm child has its session already
            os.setsid()
        log = os.open(os.path.join(job_dir, "child.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.chdir(job_dir)
        if notes:
            print(*notes, sep="\n", flush=True)
        code = job_main(job_dir)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _warm_up() -> list[str]:
    """What a job would otherwise start itself: the CUDA context and the profiler's CUDA side (CUPTI, kineto:
    6.2 s per candidate when it started inside the job, bench/results/throughput_h100.md), and torch._dynamo.
    Returns notes on what failed (the job then initialises lazily)."""
    notes = []
    try:
        if os.environ.get(childenv.WARM_BACKEND, "cuda") == "cuda" and torch.cuda.is_available():
            if os.environ.get(childenv.HOST_WAITS, "spin") == "block":  # before the context: its waits sleep
                hostwait.block_on_waits()  # (verifier/common/hostwait.py)
            torch.empty(1, device="cuda")
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                torch.empty(1, device="cuda").add_(1)
            torch.cuda.synchronize()
        # "as": a plain ``import torch._dynamo`` would make ``torch`` a local name of this function, unbound above
        import torch._dynamo as _dynamo  # noqa: F401  (imported lazily by the first torch.compile / disable wrapper)
    except Exception:  # noqa: BLE001
        notes.append("warm-up failed:\n" + traceback.format_exc(limit=3))
    return notes


def _preload() -> None:
    """What the profiler's first session imports (``torch._dynamo``, and through it ``torch._inductor``), imported
    once by a fork server so that its children start with it instead of paying it per candidate. Python modules
    only: the import starts no thread and touches no CUDA; a server whose CUDA got initialised would hand its
    children a bad fork, so that ends it with the reason."""
    import torch._dynamo as _dynamo  # noqa: F401  ("as": keeps ``torch`` the module's global)

    if torch.cuda.is_initialized():
        raise RuntimeError("importing torch._dynamo initialised CUDA in the fork server: its children could not use it")


WARM_UP_FAILED = 4  # a pre-forked child's exit status when its warm-up failed (it takes no job)
READY_WAIT_S = 120.0  # how long the server waits for a pre-forked child's warm-up when a job comes, at most


def _prefork(job_main: Callable[[str], int]) -> tuple[int, int, int]:
    """Fork the next job's process now (the fork server's warm mode): in its own session, away from the
    server's protocol pipes, it restores the thread count a fresh process would have, warms up (the CUDA
    context cannot exist in the server, which must stay forkable), says whether that worked on a pipe of its own
    (``_hand_over`` waits for it), then reads ONE job dir from a pipe and runs it. A child whose warm-up failed
    ends at once (``WARM_UP_FAILED``): a CUDA context made in a bad moment (the device short of memory, say)
    would fail the job it is handed, and the retry of that verdict too, whose child was forked right after it.
    Returns (pid, the job pipe's write end, the ready pipe's read end)."""
    r, w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(r)
        os.close(ready_w)
        return pid, w, ready_r
    try:
        os.close(w)
        os.close(ready_r)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # fd 0/1 are the server's protocol: a warm-up message must not reach them
            os.dup2(devnull, fd)
        os.close(devnull)
        if not os.environ.get(childenv.SANDBOXED):  # isolation before CUDA, as in a job (in bubblewrap it is private
            ctypes.CDLL(None, use_errno=True).unshare(0x40000000)  # already, and its supervisor reads the counters)
        threads = os.environ.get(childenv.CHILD_OMP_THREADS, "")
        torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else len(os.sched_getaffinity(0)))
        started = time.perf_counter()
        notes = _warm_up()
        warm_s = time.perf_counter() - started
        if notes:
            os._exit(WARM_UP_FAILED)
        os.write(ready_w, b"1")
        os.close(ready_w)
        job = b""
        while not job.endswith(b"\n"):
            part = os.read(r, 4096)
            if not part:
                os._exit(0)
            job += part
    except BaseException:  # noqa: BLE001 - nothing to report to: the server runs the job in a plain fork
        os._exit(3)
    note = f"[verifier] warm execution process ready in {warm_s:.2f} s before this job (forked by its fork server)"
    _run_forked(job.decode().strip(), job_main, (note,))


def _hand_over(pending: tuple[int, int, int] | None, job_dir: str, notes: list | None = None) -> int | None:
    """Give the job to the pre-forked child once its warm-up has worked (``READY_WAIT_S`` at most); its pid, else
    None, and in ``notes`` why the child forked ahead did not take it (the job's process is then forked for it)."""
    if pending is None:
        return None
    pid, w, ready_r = pending
    why = "it could not be handed the job"
    try:
        if not select.select([ready_r], [], [], READY_WAIT_S)[0]:
            why = f"its warm-up had not finished in {READY_WAIT_S:.0f} s"
        else:
            # "1": warmed up (and still alive: it takes the job); nothing (EOF): it ended without a job
            done, status = os.waitpid(pid, os.WNOHANG if os.read(ready_r, 1) == b"1" else 0)
            if not done:
                os.write(w, (job_dir + "\n").encode())
                return pid
            code = os.waitstatus_to_exitcode(status)
            why = ("its warm-up failed (the CUDA context or the profiler)" if code == WARM_UP_FAILED else
                   f"it had ended (exit {code})")
    except OSError:
        pass
    finally:
        os.close(w)
        os.close(ready_r)
    if notes is not None:
        notes.append(f"[verifier] the process forked ahead of this job did not take it: {why}; this job's process "
                     f"was forked when the job came, and started cold")
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    return None


def _wipe_private_dirs() -> None:
    """Empty the sandbox's private scratch (HOME, TMPDIR: a tmpfs that lives as long as the server) and its
    /dev/shm, except mount points (the slot's job root is bound there): nothing a job leaves in them reaches
    the next job (a poisoned compiler cache in $HOME would reach a later reference's torch.compile)."""
    try:
        mounts = {line.split()[4] for line in open("/proc/self/mountinfo")}
    except OSError:
        mounts = set()
    for top in (sandbox.SCRATCH, "/dev/shm"):
        try:
            entries = os.listdir(top)
        except OSError:
            continue
        for name in entries:
            path = os.path.join(top, name)
            if any(m == path or m.startswith(path + "/") for m in mounts):
                continue
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass


def serve(procs_max: int, job_main: Callable[[str], int]) -> int:
    """A fork server: torch is imported once here, and every job runs ``job_main(JOB_DIR)`` in a fresh forked child.

    Protocol on stdin/stdout (never visible to a child, whose fds 0-2 are replaced):
    ``JOB_DIR<TAB>TIMEOUT_S`` in, ``RC<TAB>TIMED_OUT<TAB>FINDINGS`` out. The server never runs torch ops
    itself, so forking is safe; a child that outlives its timeout is killed with its whole process group.
    Inside a sandbox (``childenv.SANDBOXED``, verifier/common/sandbox.py) the server is alone in its pid and network
    namespaces: after each job it kills every other process there (setsid() does not escape that) and
    reports them and any network use as FINDINGS (a JSON list)."""
    sandboxed = bool(os.environ.get(childenv.SANDBOXED))
    if sandboxed:
        sandbox.become_subreaper()
    if os.environ.get(childenv.CPU_PERTURB):
        libc = ctypes.CDLL(None)
        libc.mallopt(-6, int(os.environ[childenv.CPU_PERTURB]))  # M_PERTURB
        libc.mallopt(-3, 32 * 1024 * 1024)  # M_MMAP_THRESHOLD: poisoned heap rather than fresh zero pages

    if not os.environ.get(childenv.NO_PRELOAD):
        try:
            _preload()
        except RuntimeError as e:  # this process can no longer fork usable children: the same server, without it
            print(f"[verifier] {e}; the fork server starts again without the preload", file=sys.stderr, flush=True)
            os.execve(sys.executable, [sys.executable, "-m", "verifier.child.worker", "--serve", str(procs_max)],
                      dict(os.environ, **{childenv.NO_PRELOAD: "1"}))
    warm = bool(os.environ.get(childenv.SERVE_WARM))
    pending = _prefork(job_main) if warm else None
    for line in sys.stdin:
        job_dir, _, timeout = line.rstrip("\n").partition("\t")
        net0 = sandbox.net_counters() if sandboxed else {}
        cold: list[str] = []
        pid, pending = _hand_over(pending, job_dir, cold), None
        if pid is None:
            pid = os.fork()
            if pid == 0:
                _run_forked(job_dir, job_main, tuple(cold))
        deadline = time.monotonic() + float(timeout or 120)
        timed_out, status, bomb, next_count = False, 0, [], 0.0
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if sandboxed and time.monotonic() > next_count:  # a fork bomb ends the job (sandbox.watch)
                next_count = time.monotonic() + sandbox.WATCH_S
                bomb = sandbox.end_if_bomb(pid, procs_max)
                if bomb:
                    _, status = os.waitpid(pid, 0)
                    break
            if time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.005)
        try:  # leftovers of the child's session (a forked grandchild)
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        rc = os.waitstatus_to_exitcode(status)
        findings = []
        if sandboxed:  # after a timeout the job's leftovers (a build it started) are killed, not evidence
            left = sandbox.reap_namespace()
            findings = bomb + ([] if timed_out or bomb else left) + sandbox.net_findings(net0, sandbox.net_counters())
            _wipe_private_dirs()
        try:
            sys.stdout.write(f"{rc}\t{int(timed_out)}\t{json.dumps(findings)}\n")
            sys.stdout.flush()
        except BrokenPipeError:  # the verifier closed its end (its batch ended, or it did): nobody to answer, and
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no traceback at exit's flush either
            return 0
        if warm:  # the next job's process, forked and warmed up while this server waits for it
            pending = _prefork(job_main)
    return 0
