"""Jobs in execution children, as the engine runs them: a candidate's or a reference's ``Job`` built from the
``[verify]`` config (``new_job``) in a fresh directory under the slot's job root (``new_job_dir``), run in a child
driven by this process (``run_driven``: the channel hands out its seeds, the trusted harness clocks its brackets,
``make_harness``), under the device lock (verifier/execute/locks.py); and a task's reference
timed once in its own child, where no candidate code ever ran (``reference_timing``, kept on disk by
verifier/judge/prep_cache.py), prepared while the task's candidates compile (``prepare_task``, ``preparing``,
``prep_workers``); and the verdicts judged before their task's torch.compile part was timed, completed and delivered
once it is (``CompiledParts``, ``add_compiled``), so that no slot waits for it.

Enters: a TaskPlan (verifier/judge/plan.py) and the config. Leaves: ChildRun, Ledger and Clocked per job
(verifier/judge/verdict.py judges them), ReferenceTiming per task.
Imports: torch, verifier.common, verifier.execute and verifier.judge (the plan, the prep cache, the RNG lock, the
speedups' torch.compile figures).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import queue
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from verifier.common.backends import device_memory_text, get_backend
from verifier.common.config import VerifyConfig
from verifier.common.contract import ChildReport, Job
from verifier.common.inputs import draw_inputs
from verifier.execute import admission, compile_cache
from verifier.execute.channel import Driver, Ledger
from verifier.execute.brackets import Clocked
from verifier.execute.harness import Harness
from verifier.execute.locks import give_back_cache, lock_path, lock_wait_s
from verifier.execute.processes import _job_root, _run_child, exec_slot, made_lock_files, warm_servers
from verifier.judge import cpu_time, prep_cache
from verifier.judge.execution import ChildRun
from verifier.judge.outputs import RNG_LOCK, forget_reference, reference_cpu
from verifier.judge.plan import _PLAN_LOCK, _PLANS, TaskPlan, task_plan
from verifier.judge.speedups import record_compiled
from verifier.judge.verdict import Work


def seeds(n: int) -> list[int]:
    return [secrets.randbelow(2**31 - 1) + 1 for _ in range(n)]


def new_job(kind: str, backend: str, cfg: VerifyConfig, build_root: Path, reference_code: str, **kw) -> Job:
    return Job(kind=kind, backend=backend, build_root=str(build_root), reference_code=reference_code,
               init_seed=seeds(1)[0], warmup=cfg.warmup, timed_checks=cfg.timed_checks, gap_probes=cfg.gap_probes,
               warm_device_ms=cfg.warm_device_ms, hide_launch_us=cfg.hide_launch_us,
               time_torch_compile=cfg.time_torch_compile, memory_limit_gb=cfg.memory_limit_gb,
               allow_child_compile=cfg.allow_child_compile, timing_lock=lock_path(cfg, backend),
               lock_wait_s=lock_wait_s(cfg), eval_mode=cfg.eval_mode, n_brackets=max(3, min(cfg.timed_brackets, cfg.timing_trials)),
               timing_budget_s=cfg.timing_budget_s, **kw)


def _warm(cfg: VerifyConfig, backend: str) -> int:
    """``warm_processes`` (-1: on, as many as the backend's execution children; 0: a fresh interpreter per cuda job)."""
    return cfg.exec_children(backend) if cfg.warm_processes < 0 else cfg.warm_processes


def warm_slot(backends, cfg: VerifyConfig, build_root: Path) -> None:
    """This slot's execution processes started ahead of its first job on each of ``backends`` (the pair of warm
    servers a job of ``run_job`` takes turns on: verifier/execute/processes.py), where jobs run in them."""
    for backend in backends:
        if _warm(cfg, backend) > 0:
            warm_servers(backend, cfg.host(), str(build_root), made_lock_files(lock_path(cfg, backend)))


def new_job_dir(job: Job, cfg: VerifyConfig) -> Path:
    """A new directory for ``job`` in this slot's job root under ``cfg``'s host settings (``job_dir``)."""
    return Path(tempfile.mkdtemp(prefix=f"km-{job.kind}-", dir=_job_root(cfg.host())))


def run_job(job: Job, job_dir: Path, timeout_s: float, cfg: VerifyConfig) -> ChildRun:
    """Write the job into its directory and run it in an execution child (its files already there), started with
    ``cfg``'s host settings."""
    job.write(job_dir)
    rc, timed_out, log = _run_child(job_dir, job.backend, timeout_s, cfg.host(),
                                    warm=_warm(cfg, job.backend))
    return ChildRun(rc, timed_out, log, timeout_s)


@dataclass
class ReferenceTiming:
    """The reference's timings, measured once per task where no candidate code ever ran: its child's report
    (launch times, errors, the device) and what the harness clocked (verifier/execute/harness.py): ``clocked`` holds
    ``eager_s`` and ``compile_s`` (time per call, null subtracted) and ``null`` (the null bracket's seconds by
    its number of calls, as a string key), which every candidate's brackets of the task are reduced by. A task's
    timing is measured in two parts (``EAGER``, ``COMPILED``), each in a child of its own, and ``joined`` for the
    judge."""

    report: ChildReport
    clocked: dict = dataclasses.field(default_factory=dict)

    def null(self) -> dict[int, float]:
        return {int(k): float(v) for k, v in (self.clocked.get("null") or {}).items()}


# A task's reference timing in two parts: the eager model and the null bracket, which a candidate's execution needs
# (its brackets are reduced by the null; its early stop reads its time against the eager one), and torch.compile's
# model, which only the judge needs (the verdict's ``compile_us``). torch.compile's build takes seconds to a minute a
# task (8.2 s median, 50 s at most on an H200's real batch, 5adc643) and held every candidate of its task until it was
# done; now the candidates start on the eager part, and the compiled one is built beside them.
EAGER, COMPILED = "eager", "compiled"


def joined(eager: ReferenceTiming, compiled: ReferenceTiming | None) -> ReferenceTiming:
    """The task's whole timing as the judge reads it: the eager part with the compiled part's time per call and
    samples, its failure as the report's ``compile_error``, and what both held the device alone for (summed by part)."""
    if compiled is None:
        return eager
    rep = compiled.report
    report = dataclasses.replace(eager.report, compiled=rep.compiled,
                                 compile_error=_failure(rep))
    clocked = {**eager.clocked, **{k: v for k, v in compiled.clocked.items() if k.startswith("compile_")}}
    held = [t.clocked.get("held") or {} for t in (eager, compiled)]
    if any(held):
        clocked["held"] = held_joined(*held)
    return ReferenceTiming(report, clocked)


def held_joined(a: dict, b: dict) -> dict:
    out: dict = {}
    for k in ("held_s", "before_s", "brackets", "late", "harness_s"):
        both = {**(a.get(k) or {})}
        for name, x in (b.get(k) or {}).items():
            both[name] = round(both.get(name, 0) + x, 4)
        out[k] = both
    out["host_waits"] = [*(a.get("host_waits") or []), *(b.get("host_waits") or [])]
    return out


_REF_TIMINGS: dict[tuple, ReferenceTiming] = {}
_REF_LOCKS: dict[tuple, threading.Lock] = {}


def run_driven(job: Job, job_dir: Path, timeout_s: float, cfg: VerifyConfig, on_trial=None,
                harness: Harness | None = None, on_build=None, on_seed=None,
                on_child_end: Callable[[], object] | None = None) -> tuple[ChildRun, Ledger, Clocked]:
    """Run a job whose child asks this process for its seeds and its clocked brackets (verifier/execute/channel.py,
    verifier/execute/harness.py), and for the extensions it builds at run time (``on_build``: verifier/build/runtime.py
    ``child_builder``, which the engine passes in). ``on_child_end()`` as the child has ended, before the harness's
    held checks (the engine gives its child's turn back there)."""
    driver = Driver(job_dir, job.n_trials, job.n_timing, on_trial=on_trial,
                    on_bracket=harness.serve if harness is not None else None, on_build=on_build, on_seed=on_seed)
    try:
        try:
            run = run_job(job, job_dir, timeout_s, cfg)
        finally:
            if on_child_end is not None:
                on_child_end()
    finally:
        ledger = driver.close()
        clocked = harness.close() if harness is not None else Clocked()
    job.trial_seeds = [ledger.trial_seeds.get(i, 0) for i in range(job.n_trials)]
    job.timing_seeds = list(ledger.timing_seeds)
    return run, ledger, clocked


def make_harness(plan: TaskPlan, job: Job, job_dir: Path, device: str, cfg: VerifyConfig, check: bool,
             null: dict[int, float] | None = None) -> Harness:
    """The harness of one job: the reference built as the child builds it (same init seed), inputs drawn as the
    trials draw them; at most the job's brackets per model, fewer once a model's time is tight (``null``: the
    task's null brackets, which the candidate's times are reduced by)."""
    def reference():  # a copy of the job's reference, constructed as the job started (outputs.warm_reference)
        return reference_cpu(plan, job, cfg).to(device)

    def draw(seed: int) -> list:
        return draw_inputs(plan.ref_mod.get_inputs, seed, device, plan.text)

    check = check and not plan.stateful  # a reference that keeps state has no answer for one timed call of its own
    harness = Harness(job.backend, job_dir, reference, draw, check=check, keep=cfg.timed_checks if check else 0,
                      rng_lock=RNG_LOCK, budget_s=cfg.timing_budget_s, brackets=job.n_brackets, null=null,
                      lock_path=job.timing_lock, lock_wait_s=job.lock_wait_s, ties=plan.selects)
    if plan.stateful and job.kind == "candidate":
        harness.result.unchecked = True
        harness.result.unchecked_why = ("the task's reference keeps state between calls (its output on the same "
                                        "inputs changes from one call to the next, so a timed call has no answer of "
                                        "its own)")
    return harness


def _timing_key(text: str, backend: str, cfg: VerifyConfig, build_root: Path, part: str) -> tuple:
    return (hashlib.sha256(text.encode()).hexdigest(), backend, cfg.timing_trials, cfg.warmup, cfg.time_torch_compile,
            cfg.eval_mode, str(build_root), cfg.prep_cache, part)


def _eager_cfg(cfg: VerifyConfig) -> VerifyConfig:
    """The settings of the eager part: those of a run that does not time torch.compile (the same part, kept once)."""
    return dataclasses.replace(cfg, time_torch_compile=False) if cfg.time_torch_compile else cfg


def timing_to_measure(reference_code: str, backend: str, cfg: VerifyConfig, build_root: Path) -> bool:
    """Whether ``eager_timing`` of this task would start a child: it is timed on this device under these settings
    neither in this process nor in the prep cache (a guess: another process may keep it meanwhile)."""
    cfg = _eager_cfg(cfg)
    if cfg.timing_trials <= 0 or _timing_key(reference_code, backend, cfg, build_root, EAGER) in _REF_TIMINGS:
        return False
    return not cfg.prep_cache or prep_cache.read(
        build_root, prep_cache.entry_key(reference_code, backend, device_name(backend), cfg, EAGER)) is None


def _timed(plan: TaskPlan, backend: str, cfg: VerifyConfig, build_root: Path, part: str, measure) -> ReferenceTiming:
    """One part of a task's timing, measured once per process (``measure``) in a child where no candidate code has
    ever run (so no candidate can slow the reference down), then reused for every candidate of the task. With
    ``cfg.prep_cache`` a measurement that succeeded is also kept under the build root (verifier/judge/prep_cache.py)
    and read by later processes on the same device with the same settings, which then start no child. Its report's
    timing_error is set when it could not be timed."""
    key = _timing_key(plan.text, backend, cfg, build_root, part)
    with _PLAN_LOCK:
        lock = _REF_LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key in _REF_TIMINGS:
            return _REF_TIMINGS[key]
        measured = _again_if_short_of_device(measure)
        timing = measured() if not cfg.prep_cache else prep_cache.kept_or_measured(
            build_root, prep_cache.entry_key(plan.text, backend, device_name(backend), cfg, part),
            cfg.run_timeout_s + (180 if part == COMPILED else 60), measured, ReferenceTiming)
        _REF_TIMINGS[key] = timing
        return timing


# A reference's timing that failed for want of the device's memory is measured again after a pause, twice at most:
# the shortage is the device's state, not the task's (a GPU shared by other processes, their contexts, a burst of
# builds), and the failure would be kept for every candidate of the task. On one H200 shared by ten pytest workers'
# verifiers (about a hundred CUDA contexts) torch.compile's reference failed 'CUDA error: out of memory' and its
# task's ten verdicts came without compile_us (tests/gpu at 53a4b28 and 871ae8c).
SHORTAGE_PAUSES_S = (5.0, 15.0)


def _failure(rep: ChildReport) -> str:
    """Why a reference timing's report has no time: its build's, its set-up's or its timing's error ('' if none)."""
    return rep.compile_error or rep.setup_error or rep.timing_error


def _short_of_device(timing: ReferenceTiming) -> bool:
    rep = timing.report  # (any of its errors, not only the first _failure names)
    return device_memory_text(" ".join((rep.compile_error, rep.setup_error, rep.timing_error)))


def _again_if_short_of_device(measure: Callable[[], ReferenceTiming]) -> Callable[[], ReferenceTiming]:
    def measured() -> ReferenceTiming:
        timing = measure()
        for pause in SHORTAGE_PAUSES_S:
            if not _short_of_device(timing):
                break
            time.sleep(pause)
            timing = measure()
        return timing
    return measured


def eager_timing(plan: TaskPlan, backend: str, cfg: VerifyConfig, build_root: Path) -> ReferenceTiming:
    """The task's eager reference and null bracket, timed (``_timed``): what a candidate's execution needs."""
    cfg = _eager_cfg(cfg)
    return _timed(plan, backend, cfg, build_root, EAGER,
                  lambda: measure_reference(plan, backend, cfg, build_root, EAGER, None))


def compiled_timing(plan: TaskPlan, backend: str, cfg: VerifyConfig, build_root: Path) -> ReferenceTiming | None:
    """torch.compile of the task's reference, timed (``_timed``) in a child of its own and reduced by the eager
    part's null (which it measures first if no one has); None where ``cfg`` does not time torch.compile."""
    if not cfg.time_torch_compile:
        return None
    null = eager_timing(plan, backend, cfg, build_root).null()
    return _timed(plan, backend, cfg, build_root, COMPILED,
                  lambda: measure_reference(plan, backend, cfg, build_root, COMPILED, null))


def compiled_kept(plan: TaskPlan, backend: str, cfg: VerifyConfig, build_root: Path) -> ReferenceTiming | None:
    """The task's compiled part where it is timed already (in this process, or kept in the prep cache by another),
    without waiting or measuring: None where it is not, or where ``cfg`` does not time torch.compile. A slot's judge
    reads it so, and hands a verdict whose compiled part is still to come on to the engine (``CompiledParts``)
    rather than wait for it: a slot of the first wave waited 7-49 s so on one H200 (7ba3cb6)."""
    if not cfg.time_torch_compile or cfg.timing_trials <= 0:
        return None
    key = _timing_key(plan.text, backend, cfg, build_root, COMPILED)
    if key in _REF_TIMINGS:
        return _REF_TIMINGS[key]
    if cfg.prep_cache and prep_cache.read(build_root, prep_cache.entry_key(plan.text, backend, device_name(backend),
                                                                           cfg, COMPILED)) is not None:
        return compiled_timing(plan, backend, cfg, build_root)  # (read from the cache, kept in this process)
    return None


def reference_timing(plan: TaskPlan, backend: str, cfg: VerifyConfig, build_root: Path) -> ReferenceTiming:
    """The task's whole reference timing: the eager part, then the compiled one, ``joined``."""
    return joined(eager_timing(plan, backend, cfg, build_root), compiled_timing(plan, backend, cfg, build_root))


PREP_WORKERS_MIN = 2  # tasks prepared at once ahead of their candidates, at least (each a plan, then a reference child)


def prep_workers(cfg: VerifyConfig, backends) -> int:
    """Tasks prepared at once in a batch on ``backends``: as many as the execution children that may run at a time
    (``cfg.exec_children``), at least ``PREP_WORKERS_MIN``. A task's preparation is mostly its reference's own child
    (import, torch.compile's build, a timed window that holds the device alone only while it times), so it overlaps
    like a candidate's execution does. Two at a time capped a cold batch with one candidate per task: on one H200
    (0dca253) a task's preparation took 14-22 s (median), so two workers prepared at most about 330-510 tasks an hour
    while the issue asks 1,000 candidates an hour at one per task."""
    return max(PREP_WORKERS_MIN, max((cfg.exec_children(b) for b in backends), default=1))


def prepare_task(key: tuple, reference_code: str, backend: str, cfg: VerifyConfig, build_root: Path,
                 name: str, part: str = EAGER) -> bool:
    """A task's one-off preparation (its plan, then its reference timing's ``part``), run as soon as a batch meets the
    task so that it overlaps the compiling of the task's candidates instead of following it: on the H100 a task's
    preparation took 31-62 s (median) and its first candidate waited for all of it after its own build. The
    timing child is admitted by the memory gate for what it holds (``TaskPlan.timing_bytes``), not for a
    candidate's job. Skipped when no candidate of the task is pending any more (all stopped at compile); any
    failure is left for the candidate's own call, which meets it again and makes it that candidate's verdict.
    Returns whether the task's compiled part is still to be prepared (after its eager part, where ``cfg`` times
    torch.compile)."""
    if not _PLANS.held(key):
        return False
    try:
        with exec_slot():  # (a slot: its fork servers are kept for the next task's)
            if part == EAGER and timing_to_measure(reference_code, backend, cfg, build_root):
                warm_slot([backend], cfg, build_root)  # the reference's child warms up while the plan is made
            plan = task_plan(reference_code, backend, cfg, name)
            if plan.skip_reason or plan.task_fault or cfg.timing_trials <= 0 or not _PLANS.held(key):
                return False
            # the compiled part in the background: no candidate waits for memory behind its build (its judge waits
            # for it, or times it itself, where it has not begun)
            gate = admission.gate_for(plan.device, cfg.memory_budget_gib)
            with gate.admit(plan.timing_bytes(), background=part == COMPILED):
                if part == EAGER:
                    eager_timing(plan, backend, cfg, build_root)
                    return cfg.time_torch_compile
                compiled_timing(plan, backend, cfg, build_root)
    except Exception:  # noqa: BLE001 - met again, and judged, by the task's first candidate
        pass
    return False


class Preparations:
    """What ``preparing`` hands its block: ``submit(key, *rest)`` queues ``prepare_task(key, *rest)`` once per plan
    key; ``prepared(key)`` says whether there is nothing to wait for: that key's eager part is over (done, skipped
    or failed), was never asked for, or has not begun (it waits behind other tasks' for a thread: a slot that takes
    its candidate times the reference itself, as the thread would, and the thread then finds it kept). A task's
    compiled part is queued when its eager part ends, behind every eager part queued: a candidate waits for its
    task's eager part, never for the compiled one, which only the verdict's torch.compile figures need (the engine
    adds them once ``compiled_over(key)`` is set: the compiled part ended, or none will run here). A compiled part
    whose verdicts wait for it (``hurry(key)``) goes before every part queued, eager or not: one H200's real batch
    (3b865ef) held such verdicts 57 s at the median behind the other tasks' eager parts, and a batch cut at its
    budget lost those still held."""

    HURRIED, EAGER_FIRST, COMPILED_NEXT, STOP = -1, 0, 1, 2  # the queue's order

    def __init__(self, jobs: queue.PriorityQueue, on_end: Callable[[tuple], None] | None = None):
        self._jobs = jobs
        self._order = itertools.count()
        self._seen: set[tuple] = set()
        self._over: set[tuple] = set()
        self._begun: set[tuple] = set()
        self._compiled: dict[tuple, threading.Event] = {}
        self._lock = threading.Lock()
        self._hurried: set[tuple] = set()  # keys whose compiled part verdicts wait for
        self._queued: dict[tuple, tuple] = {}  # key -> its compiled part's item, queued and not begun
        self._on_end = on_end

    def submit(self, key: tuple, *rest) -> None:
        if key not in self._seen:
            self._seen.add(key)
            self._compiled[key] = threading.Event()
            self._put(self.EAGER_FIRST, (EAGER, key, *rest))

    def compiled_over(self, key: tuple) -> threading.Event | None:
        """Set once ``key``'s compiled part has ended here, or once its eager part ended without one to follow;
        None for a key never submitted."""
        return self._compiled.get(key)

    def prepared(self, key: tuple) -> bool:
        return key in self._over or key not in self._begun

    def hurry(self, key: tuple) -> None:
        """Verdicts wait for ``key``'s compiled part: queued, it goes first now; not queued yet (its eager part is
        under way), it will go first when it is."""
        with self._lock:
            self._hurried.add(key)
            item = self._queued.get(key)
        if item is not None:
            self._put(self.HURRIED, item)  # (the item queued before finds the part begun and does nothing)

    def _queue_compiled(self, item: tuple) -> None:
        with self._lock:
            self._queued[item[1]] = item
            rank = self.HURRIED if item[1] in self._hurried else self.COMPILED_NEXT
        self._put(rank, item)

    def _put(self, rank: int, item) -> None:
        self._jobs.put((rank, next(self._order), item))

    def _run(self, item: tuple) -> None:
        part, key, *rest = item
        if part == COMPILED:
            with self._lock:
                if self._queued.pop(key, None) is None:  # begun by an item queued for it before or after this one
                    return
            try:
                prepare_task(key, *rest, part=COMPILED)
            finally:
                self._compiled[key].set()
            return
        self._begun.add(key)
        follows = False
        try:
            follows = prepare_task(key, *rest, part=EAGER)
            if follows:
                self._queue_compiled((COMPILED, key, *rest))
        finally:
            if not follows:
                self._compiled[key].set()
            self._over.add(key)
            if self._on_end is not None:
                self._on_end(key)


@contextlib.contextmanager
def preparing(workers: int, on_end: Callable[[tuple], None] | None = None):
    """``workers`` threads running ``prepare_task`` on what the block submits to the ``Preparations`` it is handed
    (the eager parts first); ``on_end(key)`` after each task's eager part ends.
    Daemon threads, as the execution threads are: on an exception (a Ctrl-C) the block is left without waiting
    for a reference child, and the interpreter's exit does not join them; each ends after its current task.
    A block that finishes waits for them (a task whose candidates all stopped early may still be timing)."""
    jobs: queue.PriorityQueue = queue.PriorityQueue()
    preps = Preparations(jobs, on_end)

    def loop() -> None:
        while (item := jobs.get()[2]) is not None:
            preps._run(item)

    threads = [threading.Thread(target=loop, name=f"km-prep-{k}", daemon=True) for k in range(max(1, workers))]
    for t in threads:
        t.start()
    try:
        yield preps
    finally:
        for _ in threads:
            preps._put(Preparations.STOP, None)
    for t in threads:
        t.join()


def device_name(backend: str) -> str:
    return get_backend(backend).describe() if backend == "cpu" or torch.cuda.is_available() else backend


# the reference child's phases with the device held alone (verifier/child/reference.py), and their parts
BEFORE_PHASES = ("load", "compile_build", "lock_wait")
HELD_PHASES = ("eager", "warm_device", "template", "reference_brackets", "null_brackets", "probes", "compile")


def reference_hold(rep: ChildReport, clocked: Clocked) -> dict:
    """What the reference's timing held the device alone for, as the verdict reports it (``versions["timing"]
    ["reference"]``): its child's seconds per part of the exclusive hold, and per model (reference, null, compiled)
    the brackets the harness clocked, how many came late and whether the child hinted that it waits on the host."""
    labels = sorted({b.label for b in clocked.brackets})
    return {"held_s": {k: rep.phase_s[k] for k in HELD_PHASES if k in rep.phase_s},
            # and its child's seconds before the hold: the reference built, torch.compile's build, the lock's wait
            "before_s": {k: rep.phase_s[k] for k in BEFORE_PHASES if k in rep.phase_s},
            "brackets": {lb: sum(b.label == lb for b in clocked.brackets) for lb in labels},
            "late": {lb: sum(b.late for b in clocked.brackets if b.label == lb) for lb in labels},
            "host_waits": [lb for lb in clocked.host_waits if lb not in clocked.host_waits_taken_back],
            # the harness's own seconds of its brackets, by part (verifier/execute/harness.py ``serve_s``: the
            # private inputs drawn, the waits for the RNG lock before them, the clock, the checks), inside the hold
            "harness_s": {k: round(v, 4) for k, v in clocked.serve_s.items()}}


def measure_reference(plan: TaskPlan, backend: str, cfg: VerifyConfig, build_root: Path, part: str,
                      null: dict[int, float] | None) -> ReferenceTiming:
    """One part of the reference's timing (``EAGER`` or ``COMPILED``, the latter's brackets reduced by ``null``) in
    its own child, clocked by the harness in this process."""
    compiled = part == COMPILED
    job = new_job("reference", backend, cfg, build_root, plan.text, n_timing=cfg.timing_trials, time_eager=not compiled,
                  cpu_sampler=cpu_time.sampler_for(backend, build_root))  # sampled as the candidate's calls are
    job_dir = new_job_dir(job, cfg)
    device = "cuda" if backend == "cuda" else "cpu"
    harness = make_harness(plan, job, job_dir, device, cfg, check=False, null=null if compiled else None)
    if compiled:  # what torch.compile built for the tasks before, on this machine (verifier/execute/compile_cache.py)
        with contextlib.suppress(OSError):  # (without it the build takes longer, nothing else)
            compile_cache.seed(job_dir, build_root, torch.__version__)
    try:
        run, ledger, clocked = run_driven(job, job_dir, cfg.run_timeout_s + (120 if compiled else 0), cfg,
                                          harness=harness)
    finally:
        forget_reference(plan, job, cfg)  # the harness's copy of the reference is all it took of it
        # and what the harness drew and built on the device goes back to the driver: the engine's process times the
        # tasks' references in its preparation threads and has no job's end to give it back at (an H100's real batch
        # at cfbce7a: the engine's process held 20 to 30 GB of the device through the batch, and the slots' plans and
        # children ran out of memory beside it)
        harness = None
        give_back_cache(backend)
    try:
        rep = ChildReport.read(job_dir)
    except Exception as e:  # noqa: BLE001
        rep = ChildReport(kind="reference", timing_error=f"the reference timing process failed (exit {run.rc}, "
                                                         f"timed out {run.timed_out}): {e}; {run.log[-500:]}")
    if ledger.harness_error and not rep.timing_error:
        rep.timing_error = f"the harness failed: {ledger.harness_error}"
    if compiled and run.rc == 0 and not run.timed_out and not _failure(rep):
        with contextlib.suppress(OSError):  # a build root this process cannot write keeps nothing
            compile_cache.keep(job_dir, build_root, torch.__version__)
    if not cfg.keep_jobs:
        shutil.rmtree(job_dir, ignore_errors=True)
    figures: dict = {"held": reference_hold(rep, clocked)}
    if not compiled:
        null = clocked.null_by_calls()
        figures["null"] = {str(k): v for k, v in null.items()}
    for label, key in (("reference", "eager"), ("compiled", "compile")):
        per_call = clocked.per_call_s(label, null)
        if per_call is not None:  # the time per call, and each bracket's (the speedup's interval: judge.py)
            figures[f"{key}_s"] = per_call
            figures[f"{key}_samples"] = clocked.samples(label, null)
            figures[f"{key}_calls"] = clocked.sample_calls(label)  # their brackets' calls (the time's resolution)
    return ReferenceTiming(rep, figures)


# ---------------------------------------------------------------------------- verdicts waiting for a compiled part


def add_compiled(w: Work, compiled: ReferenceTiming | None, note: str = "") -> None:
    """torch.compile's figures added to a judged verdict (``record_compiled``): the task's compiled part's time per
    call and its hold of the device joined to the eager part's; ``note`` (the verifier's own failure to time it) a
    line of its feedback. Nothing the status or the reward reads changes."""
    v = w.verdict
    w.compiled_pending = False
    if compiled is not None:
        why = _failure(compiled.report)
        if compiled.clocked.get("compile_s") is None and why and not note:  # said, not a compile_us silently missing
            note = f"torch.compile's reference was not timed (not your kernel's doing): {why[:400]}"
        held = compiled.clocked.get("held")
        ref_held = v.versions.get("timing", {}).get("reference")
        record_compiled(v, compiled.clocked.get("compile_s"), held_joined(ref_held or {}, held) if held else None)
    if note:
        v.feedback += "\n" + note


class CompiledParts:
    """Verdicts a slot handed on before their task's torch.compile part was timed (``Work.compiled_pending``), each
    delivered once it is: one thread a task waits for the task's preparation to end its compiled part
    (``Preparations.compiled_over``), reads it (``runs.compiled_timing``: kept in this process by then, or timed
    here where the preparation could not), adds it to every verdict of the task waiting (``add_compiled``) and
    delivers them. The slots meanwhile take their next candidates: in one H200's real batch the first wave's slots
    waited 7-49 s each for it (7ba3cb6; 140 of 2,544 slot-seconds at k = 8)."""

    WAIT_S = 1800.0  # a compiled part's end waited for at most this long (its child has its own timeout)

    def __init__(self, cfg: VerifyConfig, preps, deliver: Callable[[int, Work], None]):
        self._cfg, self._preps, self._deliver = cfg, preps, deliver
        self._lock = threading.Lock()
        self._waiting: dict[tuple, list[tuple[int, Work, float]]] = {}

    def add(self, key: tuple, i: int, w: Work) -> None:
        with self._lock:
            first = key not in self._waiting
            self._waiting.setdefault(key, []).append((i, w, time.perf_counter()))
        if first:
            self._preps.hurry(key)  # ahead of every part the preparations have queued
            threading.Thread(target=self._complete, args=(key,), name="km-compiled", daemon=True).start()

    def _complete(self, key: tuple) -> None:
        over = self._preps.compiled_over(key)
        if over is not None:
            over.wait(self.WAIT_S)
        with self._lock:
            i, w, _ = self._waiting[key][0]
        compiled, note = None, ""
        try:
            v = w.verdict
            plan = task_plan(w.reference_code, v.backend, self._cfg, v.task_id or "task")
            with exec_slot():  # (a child only where the preparation did not keep the part)
                compiled = compiled_timing(plan, v.backend, self._cfg, self._cfg.build_root())
        except Exception as e:  # noqa: BLE001 - the verifier's failure: the verdicts keep what they have
            note = f"torch.compile's reference could not be timed (the verifier's failure, not your kernel's): {e}"
        with self._lock:
            items = self._waiting.pop(key)
        for i, w, handed in items:
            add_compiled(w, compiled, note)
            w.verdict.stage_seconds["verdict_compiled_wait"] = round(time.perf_counter() - handed, 3)
            self._deliver(i, w)
