"""The verifier's stages and its local engine (``verify_batch``: a batch with compiling and executing
overlapped). Callers verify through verifier/entry.py (``verify``, ``verify_candidate``), which runs this engine.

A candidate travels: extract -> static legality (verifier/screen.py) -> compile (CompilePool, keyed build dirs; the
results and the built library read by verifier/screen.py) ->
execution child (verifier/child/worker.py: trials, runtime checks, timing) -> judge (verifier/judge/verdict.py: outputs
against reference outputs computed in THIS process, which the child never sees) -> reward and feedback.

Guarantees: every call returns one Verdict per candidate, whatever the candidate does (crash, hang,
memory blow-up, garbage output); ``status`` is what was decided and ``stage_reached`` the stage that
decided it: extract, static, compile (the build and the built library's scan), correctness (the
candidate's process until its trials are over, the trials judged; a task that cannot judge it), runtime
(the legality checks on what the trials ran), timing (the candidate's process after its trials, the
timed outputs; every pass ends here). Only problems of the verifier itself (a reference that does not
run, no compiler) raise.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import dataclasses
import functools
import os
import shutil
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.utils.cpp_extension as cpp_extension

from kernelmill.errors import InputError
from kernelmill.schema import Candidate, Task, Verdict
from verifier import workers as trusted
from verifier.build.pool import CompilePool
from verifier.build.runtime import child_builder
from verifier.common.backends import get_backend, out_of_device_memory
from verifier.common.config import HostSettings, VerifyConfig, resolve_backend, usable_cores
from verifier.common import hostwait
from verifier.execute import admission
from verifier.execute.locks import device_work, give_back_cache, lock_path, lock_wait_s
from verifier.execute.processes import clear_job_root, exec_slot
from verifier.execute.queue import ReadyQueue, build_order
from verifier.judge import cpu_time
from verifier.judge.execution import Execution
from verifier.judge.knockout import run_knockout
from verifier.judge.outputs import forget_reference, warm_reference
from verifier.judge.prefetch import ReferencePrefetch
from verifier.judge.plan import (  # noqa: F401
    _PLANS,
    PlanOutOfMemory,
    _float64_check,  # (re-exported)
    _pick_size_change,  # (re-exported)
    _plan_key,
    _release_plan,
    load_reference,
    plan_settings,  # (re-exported)
    plan_to_hand_over,
    take_plan,
    task_plan,
)
from verifier.judge.verdict import Work, finish, judge
from verifier.screen import compile_done, front
from verifier.runs import (
    CompiledParts,
    add_compiled,
    compiled_kept,
    eager_timing,
    make_harness,
    new_job,
    new_job_dir,
    prep_workers,
    preparing,
    run_driven,
    warm_slot,
)

PREFETCH_BACKENDS = ("cuda",)  # the judge's reference runs ahead (cpu: the cores are the trials' and the timing's)

__all__ = ["VerifyConfig", "resolve_backend", "load_reference", "verify_batch"]


def build_host(cfg: VerifyConfig) -> HostSettings:
    """The host settings of a batch's builds: ``cfg``'s, with the device locks of every backend of this host as the
    locks its import checks hold shared (``HostSettings.code_locks``: the candidate's static initialisers run
    there, so never inside a timing window, a reference's included)."""
    locks = tuple(p for p in (lock_path(cfg, "cpu"), lock_path(cfg, "cuda")) if p)
    return dataclasses.replace(cfg.host(), code_locks=locks)


# ---------------------------------------------------------------------------- stages 4-6 (jobs: verifier/runs.py; 1-3: verifier/screen.py)


def _execute(w: Work, backend: str, cfg: VerifyConfig, build_root: Path) -> Verdict:
    """Correctness, runtime legality and timing of a compiled candidate; judged here. Problems on the
    verifier's side (the task does not fit, its reference fails) end as ``verifier_error``."""
    v = w.verdict
    v.stage_reached = "correctness"
    device = "cuda" if backend == "cuda" else "cpu"
    t0 = time.perf_counter()
    try:
        plan = task_plan(w.reference_code, backend, cfg, v.task_id or "task")
        v.stage_seconds["execute_plan"] = round(time.perf_counter() - t0, 3)
    except InputError as e:
        # out of device memory while planning: the device's, run again after the set-up waits (execute_item)
        w.setup_failed = isinstance(e, PlanOutOfMemory)
        return finish(w, "verifier_error", [f"The verifier could not run this task: {e}"])
    if plan.skip_reason:
        return finish(w, "verifier_error", [f"The verifier could not run this task: {plan.skip_reason}."])
    if plan.task_fault:
        return finish(w, "task_error", [f"This task cannot judge a candidate: {plan.task_fault}. The task is at "
                                        "fault, not your kernel."])
    n = cfg.trials + (1 if plan.other_shape else 0)
    job = new_job("candidate", backend, cfg, build_root, w.reference_code, candidate_code=w.code, n_trials=n,
               other_shape=plan.other_shape, input_files=not plan.reproducible, n_timing=cfg.timing_trials,
               cpu_sampler=cpu_time.sampler_for(backend, build_root))
    job_dir = new_job_dir(job, cfg)

    def ship_inputs(i: int, seed: int) -> None:
        """Inputs a seed does not reproduce travel as a file, written when the child reaches their trial."""
        with device_work(cfg, backend):
            inputs = [x.cpu() if isinstance(x, torch.Tensor) else x for x in plan.draw_trial(job, i, device, seed)]
        torch.save({"inputs": inputs}, job_dir / f"trial_{i}.pt")

    # the child's and the judge's memory, admitted together (verifier/execute/admission.py): jobs whose planned bytes do
    # not fit beside those running wait, first come first served; one larger than the whole budget runs alone
    try:
        with admission.gate_for(device, cfg.memory_budget_gib).admit(admission.ALONE if w.alone else plan.job_bytes()) \
                as waited:
            v.stage_seconds["execute_admission"] = round(waited, 3)
            # timed once per task, before the first candidate runs and outside any device lock: the eager part (its
            # null reduces the candidate's brackets); torch.compile's part waits for the judge
            ref_timing = eager_timing(plan, backend, cfg, build_root) if cfg.timing_trials > 0 else None
            v.stage_seconds["execute_prepare"] = round(time.perf_counter() - t0, 3)
            t_child, began = time.perf_counter(), time.monotonic()
            timeout = plan.run_limit_s(cfg, job, child_compiles=cfg.allow_child_compile and not w.specs)
            harness = make_harness(plan, job, job_dir, device, cfg, check=True,
                               null=ref_timing.null() if ref_timing is not None else None)
            warm_reference(plan, job, cfg)  # its harness's, prefetch's and judge's reference, constructed once
            # extensions the child asks for at run time are built and scanned here (verifier/build/runtime.py)
            driven = functools.partial(run_driven, on_build=child_builder(build_root, cfg) if job.allow_child_compile
                                       else None)
            # the reference's answers to the trials, computed while the child runs them (verifier/judge/prefetch.py)
            prefetch = (ReferencePrefetch(plan, job, device, cfg, backend, plan.job_bytes() // 2)
                        if backend in PREFETCH_BACKENDS and not job.input_files else None)
            t_wait = 0.0
            # the child's turn (admission.child_turn: where slots outnumber the children at a time), given back as the
            # child ends, so that this slot's judging runs beside another slot's child
            turn = contextlib.ExitStack()
            try:
                waited = turn.enter_context(admission.child_turn())
                v.stage_seconds["execute_child_turn"] = round(waited, 3)
                t_child, began = t_child + waited, began + waited  # (the child's own span starts after it)
                run, ledger, clocked = driven(job, job_dir, timeout, cfg, harness=harness,
                                              on_trial=ship_inputs if job.input_files else None,
                                              on_seed=prefetch.seed if prefetch is not None else None,
                                              on_child_end=turn.close)
            finally:
                turn.close()
                if prefetch is not None:
                    t_wait = time.perf_counter()
                    prefetch.close(lock_wait_s(cfg) + 60.0)
                    t_wait = time.perf_counter() - t_wait
            v.stage_seconds["execute_child"] = round(time.perf_counter() - t_child, 3)
            returned = time.monotonic() - t_wait
            # of it, in this process after the child ended: the harness's held checks, the prefetch's last answers
            v.stage_seconds["execute_held_checks"] = round(clocked.close_s, 3)
            for part, seconds in clocked.serve_s.items():  # the brackets' seconds in the harness, by part
                v.stage_seconds[f"harness_{part}"] = round(seconds, 3)
            v.stage_seconds["execute_prefetch_wait"] = round(t_wait, 3)
            timed = ref_timing is not None and any(b.label == "candidate" for b in clocked.brackets)
            v.device = get_backend(backend).describe() if backend == "cpu" or torch.cuda.is_available() else backend
            poison = get_backend(backend).poison_byte
            with device_work(cfg, backend) as lock:  # the judge runs the reference on the trial inputs
                def knockout(keep_scalars: bool = False):
                    """The partial policy's knockout trial (verifier/judge/knockout.py), run by the judge only where
                    it decides. Its child holds the device lock as any job's does; the judge's own shared hold is
                    let go meanwhile, so that no timer waits for the whole of a child's run."""
                    lock.release()
                    try:
                        return run_knockout(w, plan, cfg, build_root, make_job=new_job, job_dir_of=new_job_dir,
                                            run_driven=driven, backend=backend, keep_scalars=keep_scalars)
                    finally:
                        lock.acquire(False, lock_wait_s(cfg))
                give_way = functools.partial(lock.yield_to_timer, lock_wait_s(cfg))
                aside = functools.partial(lock.aside, lock_wait_s(cfg))
                t_judge = time.perf_counter()
                try:
                    judge(w, cfg, plan, Execution(job, job_dir, run, ledger, device, poison, clocked, knockout,
                                                  give_way, prefetch, (began, returned), aside), ref_timing)
                finally:
                    v.stage_seconds["execute_judge"] = round(time.perf_counter() - t_judge, 3)
            if timed and v.runtime_us is not None:
                # torch.compile's figures (of a verdict with a speedup only): its task's compiled part where it is
                # timed already (by the task's preparation, runs.preparing); else the verdict is handed on without
                # them and the engine adds them once the preparation has timed it (``CompiledParts``), the slot free
                compiled = compiled_kept(plan, backend, cfg, build_root)
                if compiled is not None:
                    add_compiled(w, compiled)
                w.compiled_pending = compiled is None and cfg.time_torch_compile
            return v
    finally:
        forget_reference(plan, job, cfg)
        v.stage_seconds["execute"] = round(time.perf_counter() - t0, 3)
        if not cfg.keep_jobs:  # the job directory, and anything the candidate left beside it in the slot's root
            clear_job_root(cfg.host())  # (the candidate's job is the slot's outermost: nothing else of it is alive)


# ---------------------------------------------------------------------------- public API


def execute_item(w: Work, results: list, cfg: VerifyConfig, build_root: Path) -> Work:
    """A candidate whose builds are over, to its verdict: the compile results read (the built library's scan),
    then the execution and the judging (``_execute``). Problems on the verifier's side end as ``verifier_error``.
    Runs in the engine's execution thread, or in the slot's trusted process (verifier/workers.py), which returns
    the Work."""
    try:
        if not w.setup_failures and not compile_done(w, results, build_root):  # (read once: not on a requeued run)
            return w
        w.requeued = False
        failures = w.setup_failures  # each failed attempt's first line, on the verdict (versions["setup_failures"])
        schedule = (*SETUP_RETRY_S, None)
        for k in range(len(failures), len(schedule)):
            wait_s = schedule[k]
            attempt = w if wait_s is None else copy.deepcopy(w)  # a copy while a retry may need the Work as it was
            try:
                _execute(attempt, attempt.verdict.backend, cfg, build_root)
            except Exception as e:  # noqa: BLE001 - the verifier's own device work out of memory: run it again
                if wait_s is None or not device_memory_error(e):
                    raise
                give_back_cache("cuda")
                failures.append(f"{type(e).__name__}: {str(e).strip()[:200]}")
                if _requeue(w):
                    return w
                _before_retry(w, wait_s)
                continue
            if not attempt.setup_failed or wait_s is None:
                if k:
                    attempt.verdict.versions["setup_retries"] = k
                    attempt.verdict.versions["setup_failures"] = failures
                if attempt.alone:
                    attempt.verdict.versions["memory_alone"] = True
                return attempt
            failures.append(_attempt_line(attempt.verdict.feedback))
            if _requeue(w):
                return w
            _before_retry(w, wait_s)
    except InputError as e:
        finish(w, "verifier_error", [f"The verifier could not run this task: {e}"])
    except Exception as e:  # noqa: BLE001 - one candidate never stops the batch
        finish(w, "verifier_error", [f"Verifier error on this candidate: {type(e).__name__}: {e} (raised at "
                                     f"{raised_at(e)})"])
    return w


def raised_at(e: BaseException) -> str:
    """Where in the verifier's own code an exception was raised: its innermost frame under the repository (file:line
    function), or its innermost frame at all; what a verifier_error's operator needs to find the failing step."""
    frames = traceback.extract_tb(e.__traceback__)
    root = str(Path(__file__).resolve().parent.parent)
    own = [f for f in frames if f.filename.startswith(root)] or frames
    if not own:
        return "an unknown place"
    f = own[-1]
    return f"{os.path.relpath(f.filename, root) if f.filename.startswith(root) else f.filename}:{f.lineno} {f.name}"


def device_memory_error(e: BaseException) -> bool:
    """Whether an exception of the verifier's own process is its device out of memory (the judge's reference, the
    inputs it draws on the device: other processes held the memory), which a wait may cure, as for a set-up failure."""
    return isinstance(e, torch.OutOfMemoryError) or (type(e).__name__ in ("AcceleratorError", "RuntimeError")
                                                     and out_of_device_memory(e))


def _before_retry(w: Work, wait_s: float) -> None:
    """What comes before a set-up failure's next attempt: the first is run again at once with the execution memory
    gate to itself (``Work.alone``: no other job of this verifier admitted beside it; the admission waits for those
    running to end and give their memory back), which cures a shortage this verifier's own jobs caused, the trial's
    workspace beside them (``verdict._device_shortage``) as much as the device's warm-up or the harness's
    allocation; later ones, a shortage that stays with the device to itself, wait for other processes to give
    theirs back. One H100's real batch at b1f71d4 had its last candidate wait 85 s on the fixed waits after the
    other 23 were done, with the device idle."""
    if not w.alone:
        w.alone = True
        return
    time.sleep(wait_s)


def _requeue(w: Work) -> bool:
    """Whether a job whose first attempt failed on the verifier's side goes back to the batch's ready queue for its
    run alone (``Work.requeued``; the engine's slot takes other candidates meanwhile) instead of running alone at once:
    a run alone waits for every job admitted beside it to end and holds the next ones back, so mid-batch it stopped
    the other seven slots. On one H100's real batch at 048b0da (k = 8) three such runs held the candidates behind them
    22-57 s each at memory admission (793 s of the slots' 2,804 s executing). The queue gives it a slot once no other
    candidate is ready (verifier/execute/queue.py ``ReadyQueue``), where its run alone costs the batch least.
    False where the caller cannot hold it (``Work.retry_later`` unset: one candidate's verify, a test) or it ran alone
    already: run at once, as before."""
    if not w.retry_later or w.alone:
        return False
    w.alone = w.requeued = True
    return True


def _attempt_line(feedback: str) -> str:
    """A failed attempt's verdict, as the retries record it: the three lines after its status line (what failed and
    the error it quotes), 300 characters."""
    lines = [ln.strip() for ln in (feedback or "").splitlines() if ln.strip()]
    return " | ".join(lines[1:4] or lines)[:300]


# the verifier's own device work out of memory (device_memory_error), or an execution process that failed before the
# candidate's code ran (Work.setup_failed: its device warm-up or the verifier's set-up, out of device memory when other
# processes held it) is run again: first at once alone (``_before_retry``: a wait is spent only by a job that ran
# alone already), then after the later waits; then it is the verifier_error it says. On one H200 shared by ten test
# workers, each verifier's slots with their own CUDA contexts, nine honest candidates' children ran out of memory
# while starting their profiler (9ec18ff), and at 7024904 one honest candidate's child did so three times in 25 s (its
# profiler's stop: CUPTI's buffers): a third wait of a minute, as a verifier_error costs the candidate its verdict and
# the batch its row
SETUP_RETRY_S = (5.0, 20.0, 60.0)


SLOT_ENTRY = "verifier.engine:serve_slot"


def serve_slot(fd: int) -> None:
    """The main of a slot's trusted process (verifier/workers.py): its jobs are ``execute_item``'s, run in one
    execution slot (its fork servers kept from job to job)."""
    with exec_slot():
        trusted.serve(fd, _slot_job)
    # the pipe closed: the exit handlers end this process's fork servers and job roots (side by side), then it ends
    # without the interpreter's teardown of torch (seconds a process, at every verifier's exit)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@dataclasses.dataclass(frozen=True)
class SlotWarmUp:
    """The job a slot's process gets before its first candidate: its execution processes for ``backends`` started
    (``runs.warm_slot``) while the batch's first builds compile."""
    backends: tuple[str, ...]


def _slot_job(w: Work | SlotWarmUp, results: list, cfg: VerifyConfig, build_root: Path) -> Work | None:
    """``execute_item`` in a slot's process, with torch's CPU threads the slot's share of the cores (the judge's
    reference, built on the CPU, and its float64 copy run beside the other slots'). The device memory the judge's
    caching allocator kept is given back after the job: the slot's process waits between jobs, and the execution
    children of every slot need the device's memory (its CUDA context stays)."""
    threads = cfg.host().child_threads
    if threads and not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(threads)
    cuda = "cuda" in (w.backends if isinstance(w, SlotWarmUp) else (w.verdict.backend,))
    if cuda and cfg.host_waits == "block" and not torch.cuda.is_initialized():  # before its CUDA context: the judge's
        hostwait.block_on_waits()  # float64 forwards and the harness's windows wait asleep, beside the batch's builds
    if isinstance(w, SlotWarmUp):
        warm_slot(w.backends, cfg, build_root)
        return None
    if w.plan is not None:  # the engine's plan of the task: this process does not plan it again
        with contextlib.suppress(Exception):  # (not taken: the job plans the task itself and meets what fails)
            take_plan(w.plan, w.verdict.backend, cfg, w.verdict.task_id or "task")
        w.plan = None  # (the Work goes back without it)
    try:
        return execute_item(w, results, cfg, build_root)
    finally:
        give_back_cache("cuda")


def _check_toolchain(backend: str) -> None:
    if shutil.which(os.environ.get("CXX", "c++")) is None and shutil.which("g++") is None:
        raise InputError("compiler", "no C++ compiler (c++/g++) on PATH: the verifier cannot build any candidate")
    if backend == "cuda":
        if not cpp_extension.CUDA_HOME:
            raise InputError("nvcc", "CUDA_HOME is not set and nvcc was not found: cuda candidates cannot be built")


def _stamp(w: Work) -> Verdict:
    w.verdict.stage_seconds["total"] = round(time.perf_counter() - w.started, 3)
    return w.verdict


def verify_batch(items: Sequence[tuple[Task, Candidate]], *, config: VerifyConfig | None = None,
                 compile_workers: int | None = None, on_verdict: Callable[[int, Verdict], None] | None = None,
                 live: dict | None = None) -> list[Verdict]:
    """The local engine of verifier.entry.verify (callers go through the entry: identical-code reuse, Ray,
    streaming; tests/test_one_entry.py holds product code to it). Verifies every item as given, none reused:
    extraction and static checks up front, all extensions submitted to one compile pool at once, and each
    candidate executed as soon as its builds are done (in ``config.exec_slots(backend)`` slots, up to
    ``config.exec_children(backend)`` execution children at a time; their timing phases serialise on a lock).

    Returns verdicts in the order of ``items``; ``on_verdict(i, verdict)`` is called as each finishes
    (from a worker thread, one call at a time). ``live``, when given, is kept current while the batch works, for a
    caller's progress lines: ``compiled`` (candidates whose builds are over, failed ones included) and ``executing``
    (candidates in an execution child or being judged now)."""
    cfg = config or VerifyConfig()  # its host settings (pch, sandbox, job_dir, ...) go to what it starts below
    n = len(items)
    verdicts: list[Verdict | None] = [None] * n
    if not n:
        return []
    backends = {resolve_backend(c.backend or "cpu") for _, c in items}
    for b in backends:
        _check_toolchain(b)
        lock_path(cfg, b)  # a lock directory that cannot be used is the run's error, before any candidate starts
    workers = compile_workers if compile_workers is not None else (cfg.compile_workers or usable_cores())
    done_lock = threading.Lock()
    plan_keys: list[tuple | None] = [None] * n  # the plan a pending candidate holds (released at its verdict)
    live = live if live is not None else {}
    live.update(compiled=0, executing=0)

    def count(key: str, by: int) -> None:
        with done_lock:
            live[key] += by

    def deliver(i: int, w: Work) -> None:
        v = _stamp(w)
        if plan_keys[i] is not None:
            _release_plan(plan_keys[i])
        with done_lock:
            verdicts[i] = v
            if on_verdict:
                on_verdict(i, v)

    ready = ReadyQueue(plan_keys)
    works: list[Work] = [None] * n  # type: ignore[list-item]  (each set below before anything reads it)
    pending = [0]
    with preparing(prep_workers(cfg, backends), on_end=ready.poke) as prepare, CompilePool(cfg.build_root(), workers=max(1, workers),
                                              timeout_s=cfg.compile_timeout_s,
                                              full_fallback=cfg.full_build_fallback, host=build_host(cfg)) as pool:
        ready.prepared = prepare.prepared
        compiled_parts = CompiledParts(cfg, prepare, deliver)  # verdicts whose torch.compile figures are to come
        for i in build_order(items):
            task, cand = items[i]
            backend = resolve_backend(cand.backend or "cpu")
            w = front(task.reference_code, cand.code or cand.response, backend, task.task_id, cand.candidate_id)
            w.retry_later = True  # a set-up failure's run alone waits in the ready queue (execute_item, _requeue)
            works[i] = w
            if w.verdict.status:
                deliver(i, w)
                continue
            plan_keys[i] = _plan_key(task.reference_code, backend, cfg)
            _PLANS.hold(plan_keys[i])
            # the task's preparation (once per batch) runs while its candidates compile
            prepare.submit(plan_keys[i], task.reference_code, backend, cfg, cfg.build_root(), task.task_id or "task")
            futs = [pool.submit(s) for s in w.specs]
            pending[0] += 1
            if not futs:
                count("compiled", 1)
                ready.put((i, []))
                continue

            def when_built(_f, i=i, futs=futs):
                if all(f.done() for f in futs):
                    with done_lock:
                        if getattr(works[i], "_queued", False):
                            return
                        works[i]._queued = True  # type: ignore[attr-defined]
                        live["compiled"] += 1
                    ready.put((i, futs))

            for f in futs:
                f.add_done_callback(when_built)

        in_processes = any(cfg.exec_in_processes(b) for b in backends)
        # where slots outnumber the children at a time (``judging_slots``), a child's turn is taken from these
        turns = {b: admission.ChildTurns(cfg.exec_children(b)) for b in backends
                 if cfg.exec_slots(b) > cfg.exec_children(b)}

        warm_up = SlotWarmUp(tuple(sorted(backends)))

        def slot_wanted(k: int) -> bool:
            """Wait until slot ``k`` has work in sight: ``k`` candidates built (slot 0 at once), so that the slots'
            processes start one after another as builds finish instead of all at the batch's start, where they and
            their warm execution processes held 9-14 of an H100 host's 16 cores for the first 45 s and the builds
            (niced below them) 1-2, every first build taking ~45 s (the real batch at 29c4704, bench/results/
            HISTORY.md). False: the batch ended first (nothing to start the slot for)."""
            while True:
                with done_lock:
                    if all(v is not None for v in verdicts):
                        return False
                    if live["compiled"] >= min(k, pending[0]):
                        return True
                time.sleep(0.05)

        def exec_loop(k: int) -> None:
            if not slot_wanted(k):
                ready.get(set())  # the batch is over: take this slot's end
                return
            if in_processes:  # the slot's harness and judge in a trusted process of its own (verifier/workers.py)
                with trusted.lease(SLOT_ENTRY) as slot_process:
                    try:  # its process and execution processes started before its candidate reaches it
                        slot_process().run((warm_up, [], cfg, cfg.build_root()))
                    except trusted.WorkerDied as e:  # started again for its first candidate, whose verdict says
                        print(f"[verifier] a slot's warm-up failed: {e}", file=sys.stderr, flush=True)  # if it fails
                    exec_jobs(slot_process)
            else:
                with exec_slot():  # this thread's fork servers and job root: kept for the next batch
                    warm_slot(warm_up.backends, cfg, cfg.build_root())
                    exec_jobs(None)

        def exec_jobs(slot_process) -> None:
            seen: set = set()  # the tasks this slot has judged: its process holds their plans already
            while True:
                item = ready.get(seen)
                if item is None:
                    return
                i, futs = item
                seen.add(plan_keys[i])
                w = works[i]
                count("executing", 1)
                try:
                    results = [f.result() for f in futs]
                    if slot_process is None:
                        admission.turns_for_thread(turns.get(w.verdict.backend))
                        w = execute_item(w, results, cfg, cfg.build_root())
                    else:
                        try:
                            w.plan = plan_to_hand_over(w.reference_code, w.verdict.backend, cfg)
                            w = slot_process().run((w, results, cfg, cfg.build_root()), turns.get(w.verdict.backend))
                        except trusted.WorkerDied as e:
                            finish(w, "verifier_error", [f"Verifier error on this candidate: {e}; this is not your "
                                                         "kernel's outcome."])
                    works[i] = w
                except Exception as e:  # noqa: BLE001 - one candidate never stops the batch
                    finish(w, "verifier_error", [f"Verifier error on this candidate: {type(e).__name__}: {e}"])
                finally:
                    count("executing", -1)
                if w.requeued:  # its run alone, once no other candidate is ready (``_requeue``)
                    ready.put_later(item)
                    continue
                if w.compiled_pending and w.verdict.status != "verifier_error":
                    compiled_parts.add(plan_keys[i], i, w)  # the slot takes its next candidate meanwhile
                else:
                    deliver(i, w)

        threads = [threading.Thread(target=exec_loop, args=(k,), name=f"km-exec-{k}", daemon=True)
                   for k in range(max(cfg.exec_slots(b) for b in backends))]
        for t in threads:
            t.start()
        while True:
            with done_lock:
                if all(v is not None for v in verdicts):
                    break
            time.sleep(0.05)
        for _ in threads:
            ready.put(None)
        for t in threads:
            t.join()
    return [v for v in verdicts if v is not None]
