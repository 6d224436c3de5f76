"""Judging an execution: the verdict for a candidate from what its execution child reported.

The child (verifier/child/worker.py) runs the candidate and reports raw facts (verifier/common/contract.py): output
files per trial, the aten ops two monitors saw, kernel device times, threads, what it changed in torch,
timed outputs and device times. Everything that decides is in the verifier's process, against reference outputs
the child never saw, computed on inputs drawn here from the same seeds. ``judge`` runs the checks in the order a
candidate's evidence becomes trustworthy, one stage function each, and stops at the first stage that decides. The
probes are functions named for what they see, registered under the codes they sight: the runtime, legality
and sandbox probes in verifier/judge/checks.py, those of the outputs (correctness; C05, C06, C08, C11 by the
reference's run in the child, C13, C16) in verifier/judge/outputs.py. Every code a verdict lists is decided by the
catalogue's one check for it (``cheats.decide`` over ``Evidence.seen``; verifier/cheats.py), the legality policies
included. The speedups are here.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelmill.schema import NOT_JUDGED, Verdict
from verifier import cheats
from verifier.common.config import VerifyConfig
from verifier.common.contract import FLAGS_FILE, ChildReport, ContractError, Job
from verifier.common.inputs import as_list
from verifier.common.ops import MOVES_DATA
from verifier.execute import admission
from verifier.execute.channel import Ledger, progress
from verifier.judge import feedback
from verifier.judge.checks import (
    check_bracket_samples,
    check_channel,
    check_child_built,
    check_compute_only_when_timed,
    check_extra_shape,
    check_fake_verdict,
    check_own_kernels,
    check_reference_held,
    check_sandbox_escape,
    check_tampering,
    check_threads_after_timing,
    check_threads_at_load,
    check_timed_inputs,
    check_trial_runtime,
    own_kernels_ran,
    own_work_ok,
    use_streamed_records,
)
from verifier.judge.execution import Execution, device_memory_line, last_line, memory_error
from verifier.judge.numerics import FLOAT64_OWN
from verifier.judge.outputs import (
    Evidence,
    check_clocked_outputs,
    reference_cpu,
    reference_models,
)
from verifier.judge.plan import TaskPlan
from verifier.judge.reward import reward_for
from verifier.judge.speedups import record_speedups
from verifier.judge.trials import check_trials, reference_name_hint


@dataclass
class Work:
    """One candidate on its way through the stages: its verdict so far, its code, the task's reference
    program, the load_inline specs found by the static stage, and notes for the feedback."""

    verdict: Verdict
    code: str = ""
    reference_code: str = ""
    specs: list = dataclasses.field(default_factory=list)
    started: float = 0.0
    notes: list = dataclasses.field(default_factory=list)
    torch_findings: list = dataclasses.field(default_factory=list)  # static: PyTorch compute in forward (strict only)
    binary_torch: list = dataclasses.field(default_factory=list)  # PyTorch compute ops the built extension imports
    # the verifier's own side failed in a way a wait may cure: the execution process before the candidate's code ran
    # (the device's warm-up, the verifier's own set-up: a device another tenant filled), or the timing harness out of
    # device memory (``device_memory_line``): the verifier's failure, which the engine tries again
    # (engine.execute_item)
    setup_failed: bool = False
    # judged and timed before its task's torch.compile part was: the engine adds torch.compile's figures once it is
    # timed, and only then delivers the verdict (verifier/runs.py ``CompiledParts``)
    compiled_pending: bool = False
    # the task's reference raised in the candidate's process (ChildReport.reference_error, no tampering seen): judged
    # once the trials before it are checked (``_reference_failed``)
    reference_failed_there: bool = False
    # run with the execution memory gate to itself (verifier/execute/admission.py): set where a trial ran out of
    # device memory beside other jobs (``_device_shortage``), which the engine then runs again alone
    alone: bool = False
    # the set-up retries (engine.execute_item): each failed attempt's line so far (versions["setup_failures"]), kept
    # while the job waits in the batch's ready queue for its run alone (``retry_later``, set by the engine where its
    # queue can hold it: verify_batch); ``requeued``: handed back for that run, not finished
    setup_failures: list = dataclasses.field(default_factory=list)
    retry_later: bool = False
    requeued: bool = False
    # the task's plan as the engine's process made it, without its module (verifier/judge/plan.py
    # ``plan_to_hand_over``): handed with the Work to a slot's trusted process, which takes it (``take_plan``) instead
    # of planning the task again, and sends the Work back without it
    plan: TaskPlan | None = None

    def note_binary_torch(self, ops) -> None:
        """PyTorch compute ops a built extension imports (the compile pool's or a run-time build's): kept for the
        judge and recorded in ``versions["binary"]``."""
        self.binary_torch = sorted(set(self.binary_torch) | set(ops))
        self.verdict.versions["binary"] = {"aten_compute_imports": self.binary_torch}


def finish(w: Work, status: str, details: list[str] | None = None, passed_share: float = 0.0) -> Verdict:
    """Close a verdict that stopped at ``status``: reward, feedback, versions."""
    v = w.verdict
    v.status = "cheat" if v.cheats and status not in NOT_JUDGED else status
    if status in NOT_JUDGED:
        v.cheats = []
        v.pass_strict = v.pass_partial = None
    else:  # a stop before the pass is a failure under both policies, unless the judge said otherwise
        v.pass_strict = bool(v.pass_strict) and status == "pass"
        v.pass_partial = bool(v.pass_partial)
    v.reward = reward_for(v, passed_share)
    v.feedback = feedback.compose(v.status, feedback.describe_cheats(v.cheats) + (details or []) + w.notes)
    v.versions = {**v.versions, "torch": torch.__version__, "python": sys.version.split()[0]}
    return v


def _warm_up_failed(log: str) -> bool:
    """The warm execution process's own first lines (written before any candidate code runs, so a candidate
    cannot put them first) say its device warm-up failed."""
    head = log.lstrip().splitlines()[:3]
    if not head or not head[0].startswith("[verifier] warm execution process ready"):
        return False
    notes = head[1:]
    if notes and notes[0].startswith("network isolation before warm-up failed"):  # the one note printed before
        notes = notes[1:]
    return bool(notes) and notes[0].startswith("warm-up failed")


def _read_flags(job_dir: Path) -> list[str]:
    try:
        return list(json.loads((job_dir / FLAGS_FILE).read_text()).get("patched", []))
    except (OSError, ValueError, AttributeError):
        return []


def run_stage(job: Job, ledger: Ledger, report: ChildReport | None = None) -> str:
    """The run stage the candidate's process was in when it stopped: "timing" once its correctness trials
    were over (its report says it began timing or, without a report, the record of every trial reached the
    verifier: each is sent once the trial is over, verifier/child/worker.py), else "correctness"."""
    if report is not None:
        return "timing" if report.timing_exclusive is not None else "correctness"
    n = job.n_trials
    return "timing" if n and all(f"trial{i}" in ledger.records for i in range(n)) else "correctness"


# ---------------------------------------------------------------------------- the judge


def judge(w: Work, cfg: VerifyConfig, plan, ex: Execution, reference_timing) -> Verdict:
    """The verdict of one executed candidate, in the order a candidate's evidence becomes trustworthy: how its
    process ended (``_process_outcome``), its report with the streamed records in place of its own
    (``_report_outcome``), the correctness trials against the reference computed here (``check_trials``, verifier/judge/trials.py), the
    runtime legality checks, the harness's timing (``_timing_outcome``) and the legality policies
    (``_legality_outcome``). ``plan`` is the task's TaskPlan (verifier/judge/plan.py), ``reference_timing`` the
    reference's timings (timed in its own process) or None."""
    v = w.verdict
    ev = Evidence()
    stopped = _process_outcome(w, cfg, plan, ex, ev)
    if stopped is not None:
        return stopped
    report = _report_outcome(w, plan, ex, ev)
    if isinstance(report, Verdict):
        return report
    clock = _JudgeClock(v)
    model, model64 = _judge_models(plan, ex, cfg)
    v.versions["tolerance"] = ("float64 reference" if model64 is not None else plan.float64 if plan.float64 == FLOAT64_OWN
                               else f"fixed: {plan.float64 or 'no copy'}")
    clock.lap("judge_models")
    t = check_trials(cfg, plan, ex, report, model, model64, ev)
    clock.lap("judge_trials")
    if ev.fallback_ops:
        v.fallback_ops = sorted(ev.fallback_ops)
        ev.details.insert(0, "Runtime check: forward ran PyTorch compute ops: " + ", ".join(v.fallback_ops) + ".")
    check_extra_shape(t.regular_ok, t.other_failed, bool(t.crash_detail), ev, t.other_raised, t.other_near)
    n = ex.job.n_trials
    v.trials = t.checked
    v.max_abs_err = max(e[0] for e in t.errs) if t.errs else None
    v.max_rel_err = max(e[1] for e in t.errs) if t.errs else None
    if w.reference_failed_there and not t.crash_detail and t.regular_ok and t.passed == len(report.trials):
        return _reference_failed(w, plan, ex, report, model, reference_timing, ev)
    if t.device_oom and not ev.codes and (shortage := _device_shortage(w, plan, f"Trial {t.device_oom}")):
        return shortage
    if t.crash_detail or not (t.regular_ok and t.passed == n):
        v.cheats = ev.decide(torch=False)
        return finish(w, "crash" if t.crash_detail else "wrong",
                      ([t.crash_detail] if t.crash_detail else []) + ev.details, t.passed / max(n, 1))
    v.correct = True
    v.stage_reached = "runtime"
    # ---- runtime legality
    check_own_kernels(report, cfg, v, ev)
    check_threads_after_timing(report, ev)
    if ev.codes:  # a cheat under either legality policy
        v.cheats, v.correct = ev.decide(), False
        return finish(w, "cheat", ev.details)
    v.stage_reached = "timing"
    if ex.ledger.harness_error or ex.clocked.error:
        return _harness_failed(w, cfg, report, ev, ex)
    stopped = _timing_outcome(w, plan, ex, report, reference_timing, model, model64, t.forbidden_per_trial, cfg, ev)
    clock.lap("judge_timed_checks")
    if stopped is not None:
        return stopped
    try:
        return _legality_outcome(w, cfg, report, ev, ex.knockout)
    finally:
        clock.lap("judge_legality")


class _JudgeClock:
    """The judge's seconds by part (its reference models built, the trials' checks with their lock waits, the timed
    outputs' full checks, the legality policies and a knockout), in ``Verdict.stage_seconds``: measured here, in the
    verifier's own process."""

    def __init__(self, v: Verdict):
        self.v, self.t = v, time.perf_counter()

    def lap(self, key: str) -> None:
        now = time.perf_counter()
        self.v.stage_seconds[key] = round(now - self.t, 4)
        self.t = now


def _judge_models(plan, ex: Execution, cfg: VerifyConfig) -> tuple:
    """The reference the trials are judged against and its float64 copy: the ones the prefetch built and ran the
    trials on, if it did (their answers and these agree), else built here."""
    model, model64 = ex.prefetched.models() if ex.prefetched is not None else (None, None)
    if model is None:
        with ex.aside():  # constructed on the cpu with the hold let go: only its copy to the device is device work
            cpu = reference_cpu(plan, ex.job, cfg)
        model, model64 = reference_models(plan, ex.job, ex.device, cfg, cpu)
    return model, model64


def _streamed_trials_cheat(w: Work, cfg: VerifyConfig, plan, ex: Execution, ev: Evidence) -> bool:
    """Whether the trials whose records reached the verifier before the candidate's process died or hung show a
    cheat (their outputs were sealed as they arrived): a process that ends itself without a report after its trials
    must not turn a cheat (-1) into a crash (0.1) (docs/ANTI_CHEAT.md class 53)."""
    if plan is None or not any(k.startswith("trial") for k in ex.ledger.records):
        return False
    report = ChildReport(kind="candidate")
    use_streamed_records(report, ex.ledger, ev)  # every trial handed a seed whose record came, in order
    if not report.trials:
        return False
    model, model64 = _judge_models(plan, ex, cfg)
    check_trials(cfg, plan, ex, report, model, model64, ev)
    return bool(ev.codes)


def _process_outcome(w: Work, cfg: VerifyConfig, plan, ex: Execution, ev: Evidence) -> Verdict | None:
    """The verdict where the candidate's process already decides it: tampering or vendor code seen (whatever
    happened after), the device's warm-up failing before the candidate ran, a timeout, a crash without a report.
    None when it left a report to read."""
    v, run, job, job_dir = w.verdict, ex.run, ex.job, ex.job_dir
    check_fake_verdict(run.log, ev)
    check_channel(ex.ledger, ev)
    log_tail = "\n".join(run.log.strip().splitlines()[-15:])
    early = _read_flags(job_dir)
    broken = [b.verifier_error for b in ex.ledger.child_builds if b.verifier_error]
    if broken:  # the verifier's build code failed on an extension asked for at run time: never the candidate's
        return finish(w, "verifier_error", [f"The verifier's build of an extension your code asked for at run time "
                                            f"failed on its own side ({broken[0]}); this is not your error."])
    compute = check_child_built(ex.ledger, ev)  # the run-time builds' ATen compute: as the compile pool's builds'
    if compute:
        w.note_binary_torch(compute)
    check_sandbox_escape(job_dir, ev, ex.ledger.child_builds)
    if early or ev.codes - {cheats.C18}:  # tampering or vendor code seen, whatever happened after
        check_tampering(early, ev)
        v.stage_reached = run_stage(job, ex.ledger)
        v.cheats = ev.decide(torch=False)
        return finish(w, "cheat", ev.details)
    if (run.timed_out or run.rc != 0) and not (job_dir / "report.json").is_file() and _warm_up_failed(run.log):
        # the warm process could not initialise the device before the candidate's job reached it (the device
        # was full of other processes' memory): whatever happened next is not the candidate's outcome
        w.setup_failed = True
        return finish(w, "verifier_error", ["The execution process failed to initialise the device before your "
                                            "code ran:\n" + "\n".join(run.log.strip().splitlines()[:8])])
    if (run.timed_out or run.rc != 0 or not (job_dir / "report.json").is_file()) and \
            _streamed_trials_cheat(w, cfg, plan, ex, ev):
        v.stage_reached = run_stage(job, ex.ledger)
        v.cheats, v.correct = ev.decide(torch=False), False
        return finish(w, "cheat", ev.details)
    if run.timed_out:
        v.stage_reached = run_stage(job, ex.ledger)
        v.cheats = ev.decide(torch=False)
        limit = run.limit_s or cfg.run_timeout_s
        return finish(w, "timeout", [f"The run was killed after {limit:.0f} s of wall-clock time (the limit: "
                                      f"{cfg.run_timeout_s:.0f} s for your code, plus the time the verifier allows "
                                      "for copying out this task's outputs). " + progress(ex.ledger, job.n_trials) +
                                      (f" Last output:\n{log_tail}" if log_tail else "")])
    if run.rc != 0 or not (job_dir / "report.json").is_file():
        if not ev.codes and device_memory_line(last_line(run.log)) and \
                (shortage := _device_shortage(w, plan, "The process running your kernel")):
            return shortage
        rc = run.rc
        why = f"killed by signal {signal.Signals(-rc).name}" if rc and rc < 0 else f"exit status {rc}"
        hint = " (a segmentation fault: an invalid memory access)" if rc == -signal.SIGSEGV else ""
        hint = hint or (" (killed: probably out of memory)" if rc == -signal.SIGKILL else "")
        v.stage_reached = run_stage(job, ex.ledger)
        v.cheats = ev.decide(torch=False)
        return finish(w, "crash", [f"The process running your kernel died: {why}{hint}."
                                   + (f" Last output:\n{log_tail}" if log_tail else "")])
    return None


def _report_outcome(w: Work, plan, ex: Execution, ev: Evidence) -> ChildReport | Verdict:
    """The child's report with the records it streamed in place of its own (``use_streamed_records``), and the
    checks of what it saw at load; or the verdict where the report already decides (unreadable, the verifier's
    own set-up failing, import or construction failing, the run aborted by a tamper check)."""
    v, job, job_dir = w.verdict, ex.job, ex.job_dir
    try:
        report = ChildReport.read(job_dir)
    except (ContractError, ValueError, OSError) as e:  # written in the candidate's process: its problem
        v.cheats = ev.decide(torch=False)
        return finish(w, "crash", [f"The execution report was unreadable ({e}); did your program write files?"])
    for name, secs in report.phase_s.items():
        v.stage_seconds[f"child_{name}"] = float(secs)
    if len(ex.span) == 2 and len(report.mono_span) == 2:  # the slot's seconds before the child's main and after it
        v.stage_seconds["execute_child_start"] = round(max(0.0, report.mono_span[0] - ex.span[0]), 3)
        after = ex.span[1] - report.mono_span[1] - ex.clocked.close_s
        v.stage_seconds["execute_child_exit"] = round(max(0.0, after), 3)
    if len(report.trials) >= 2:  # the first trial pays first-call costs (module loads)
        v.stage_seconds["child_first_trial"] = round(report.trials[1].started_s - report.trials[0].started_s, 4)
    v.versions["sandbox"] = report.sandbox
    if report.timing_exclusive is not None:
        v.versions["timing"] = {"exclusive": bool(report.timing_exclusive), "lock_wait_s": report.lock_wait_s}
    if report.setup_error:
        if job.kind == "candidate" and not job.still_unread_by_candidate(job_dir):
            # the report is written in the candidate's process: a set-up failure claimed after its code ran (the
            # job file, removed right before the import, is gone) is a forged way out of its verdict, which would
            # end a verifier_error no trainer counts (docs/ANTI_CHEAT.md class 49)
            ev.add(cheats.C11, "Your process's report says it failed before your code ran, but your code had run "
                               "(its job file, removed right before your program is imported, was gone): the report "
                               "was changed from your process.")
            v.cheats = ev.decide(torch=False)
            return finish(w, "cheat", ev.details)
        w.setup_failed = True
        return finish(w, "verifier_error", [f"The execution process failed before your code ran:\n{report.setup_error}"])
    if report.reference_error and not report.patched and not ev.codes:
        w.reference_failed_there = True  # decided once the trials before it are checked (judge: _reference_failed)
    for text, label in ((report.import_error, "Importing your program failed"), (report.init_error, "ModelNew() failed")):
        if text and ex.ledger.trial_seeds:
            # a trial's seed is handed out only once ModelNew is built: the report (written in the candidate's
            # process) claims a failure that did not happen, in place of its trials' verdict (docs/ANTI_CHEAT.md
            # class 51)
            ev.add(cheats.C11, f"Your process's report says: {label.lower()}; but your program was built and asked "
                               "for its trials: the report was changed from your process.")
        elif text:
            v.cheats = ev.decide(torch=False)
            return finish(w, "crash", [f"{label}:\n{text}"] + reference_name_hint(text, plan.ref_mod))
    use_streamed_records(report, ex.ledger, ev)
    check_tampering(report.patched, ev)
    if report.aborted:
        v.stage_reached = run_stage(job, ex.ledger, report)
        v.cheats = ev.decide(torch=False)
        return finish(w, "cheat", ev.details)
    check_reference_held(report, ev)
    check_threads_at_load(report, ev)
    return report


def _reference_failed(w: Work, plan, ex: Execution, report: ChildReport, model, reference_timing,
                      ev: Evidence) -> Verdict:
    """The task's reference raised inside the candidate's process (its child runs it beside the candidate for the
    digests, verifier/child/worker.py) after every trial before it was right. Out of memory, or where the verifier
    cannot show the reference runs, it is the verifier's failure (``verifier_error``; out of memory run again after
    the set-up waits). Where the reference runs here on the very inputs it raised on, and ran in a process of its
    own (the task's reference timing, where no candidate code ran) or in this one on the earlier trials, the
    candidate's process changed what it depends on (native code can leave any global state: a dispatcher kernel
    registered, an allocator or a context flag swapped): C11, not a verifier_error no trainer counts, which a
    wrong or cheating candidate would otherwise buy by breaking the reference (docs/ANTI_CHEAT.md class 48)."""
    error = report.reference_error
    k = len(report.trials)  # the trial whose reference raised: its record was never sent
    last = error.strip().splitlines()[-1][:300] if error.strip() else ""
    if memory_error(last):
        w.setup_failed = True
        return finish(w, "verifier_error", ["The task's reference ran out of memory in the execution process (the "
                                            f"verifier's problem, not your kernel's):\n{error}"])
    # the device left broken by the candidate's kernels: an honest bug's crash, as when the fault surfaces in its own
    # forward (on cuda only: on cpu no kernel leaves a device fault behind, and such a line is written to get one)
    if w.verdict.backend == "cuda" and any(f in last for f in DEVICE_FAULTS):
        w.verdict.cheats = ev.decide(torch=False)
        return finish(w, "crash", [f"Trial {k + 1}: the device was left in an error state after your kernels ran; "
                                   f"the task's reference, run next in your process, raised it ({last}). Check your "
                                   f"kernels' memory accesses (compute-sanitizer)."])
    ran_alone = reference_timing is not None and reference_timing.clocked.get("eager_s") is not None
    ran_here_before = k > 0 and all(r.ref_digest for r in report.trials)
    runs_here = False
    if ran_alone or ran_here_before:
        try:
            inputs = plan.trial_inputs(ex.job, k, ex.device, ex.job_dir, ex.ledger)
            with torch.no_grad():
                as_list(model(*inputs))
            runs_here = True
        except Exception:  # noqa: BLE001 - it fails here too: the task's or the verifier's problem
            runs_here = False
    if not runs_here:
        return finish(w, "verifier_error", ["The task's reference failed in the execution process (the verifier's "
                                            f"problem, not your kernel's):\n{error}"])
    where = " and ".join(text for text, seen in (("in a process of its own", ran_alone),
                                           ("in yours on the trials before", ran_here_before)) if seen)
    ev.add(cheats.C11, f"Trial {k + 1}: the task's reference raised inside your process ({last}), though it runs in "
                       f"the verifier's on the same inputs and ran {where}: your program changed global state the "
                       "reference depends on.")
    w.verdict.cheats, w.verdict.correct = ev.decide(torch=False), False
    return finish(w, "cheat", ev.details)


# the device's memory a job of the task needs beside its planned bytes (``TaskPlan.job_bytes``): a CUDA context and
# the allocators' and libraries' workspaces of the execution process
CONTEXT_MARGIN_BYTES = 2 << 30


def device_held_by_others(w: Work, plan) -> str:
    """Why a device out-of-memory error in the candidate's process was the device's and not the candidate's ('' where
    it was the candidate's, or cannot be shown): on cuda, the device's free memory read here, in the verifier's own
    process, after the candidate's process ended, so with its memory back with the driver (nothing that process wrote
    decides it), is still less than the job's planned bytes and a context's margin: other processes held the device.
    On an H100 shared by ten test workers, and in one verifier's real batch on it, honest candidates' children ran out
    of device memory in the verifier's own poison block before a trial's forward (64 MiB asked, 65 MiB free) and were
    given a crash. A candidate whose own allocations filled the device finds it free once its process is gone: its
    crash stands."""
    if w.verdict.backend != "cuda" or plan is None:
        return ""
    try:
        free = admission.free_bytes("cuda")
        need = plan.job_bytes() + CONTEXT_MARGIN_BYTES
    except Exception:  # noqa: BLE001 - no reading: the candidate's own crash, as before
        return ""
    if free >= need:
        return ""
    return (f"{free / 2**30:.2f} GiB of the device was free after your process ended, where this task's job needs "
            f"{need / 2**30:.2f} GiB")


def _device_shortage(w: Work, plan, what: str) -> Verdict | None:
    """Whose a device out-of-memory error of the candidate's process was (a trial's, or the line its process died
    on), where no cheat was seen: the verifier's failure, run again by the engine (``Work.setup_failed``), while it
    may have been other processes' or other jobs' memory; None where it was the candidate's own crash.

    - Other processes held the device (``device_held_by_others``: read here after the candidate's process ended):
      the verifier's, whether or not the job ran alone (docs/ANTI_CHEAT.md class 54).
    - Other jobs of this verifier may have run beside it (``Work.alone`` unset): the candidate's own allocations (a
      workspace its inputs' size asks for, as an im2col convolution's) need not fit beside theirs, where they fit the
      device; the memory gate admits jobs by their task's planned bytes (``TaskPlan.job_bytes``: inputs, outputs,
      weights, the reference's intermediates), never a candidate's own workspace. On one H100's real batch (54a3136)
      a convolution asked 17 GiB on the extra shape with 16 GiB free beside seven other jobs, and its crash was the
      verifier's concurrency. The engine runs the job again with the gate to itself (class 115).
    - It ran alone and the device was free after it: the candidate's crash (None)."""
    held = device_held_by_others(w, plan)
    if not held and w.alone:
        return None
    w.setup_failed = True
    if held:
        return finish(w, "verifier_error", [f"{what} ran out of device memory while other processes held it ({held}): "
                                            "the verifier's failure, not your kernel's."])
    w.alone = True
    return finish(w, "verifier_error", [f"{what} ran out of device memory beside other jobs: to be run again alone, "
                                        "the verifier's failure if it cannot be, not your kernel's."])


# a CUDA error that outlives the call that raised it (the context is broken for every later call): what a kernel's
# invalid access leaves behind, raised by whatever runs next on the device
DEVICE_FAULTS = ("illegal memory access", "misaligned address", "unspecified launch failure", "illegal instruction",
                 "device-side assert", "an illegal", "invalid program counter", "CUDA error:")


def _harness_failed(w: Work, cfg: VerifyConfig, report: ChildReport, ev: Evidence, ex: Execution) -> Verdict:
    """The timing harness failed on its own side: no timing, the verifier's failure, a ``verifier_error``; out of
    device memory (one H200's real batch at 7cfab47: an allocation of 256 MiB with 0.26 GiB of the device free, other
    processes holding the rest) it is run again after the set-up waits. But what the trials, the static scan and the
    built binary showed still decides a cheat under the legality policy first: a candidate that makes the harness
    fail (its process filling the device's memory while it is timed) does not turn its PyTorch compute into a
    verifier_error, which no trainer counts."""
    error = ex.ledger.harness_error or ex.clocked.error
    decided = _legality_outcome(w, cfg, report, ev, ex.knockout)
    if decided.status != "pass":
        return decided
    w.setup_failed = device_memory_line(error)
    return finish(w, "verifier_error", [f"The verifier's timing harness failed on its own side ({error}); this is "
                                        "not your kernel's fault."])


def _timing_outcome(w: Work, plan, ex: Execution, report: ChildReport, ref_timing, model, model64,
                    forbidden_per_trial: list, cfg: VerifyConfig, ev: Evidence) -> Verdict | None:
    """The harness's clock and its checks of every timed output (verifier/execute/harness.py): the speedups, or
    the verdict where timing decides (the timed calls behaving differently: a cheat; the harness failing on its own
    side is ``_harness_failed``'s). None when the legality policies decide next."""
    v, clocked = w.verdict, ex.clocked
    # whether the harness clocked the candidate: its own evidence, checked whatever the child's report says (a timing
    # failure the report claims, written in the candidate's process, once skipped the checks of every timed output:
    # docs/ANTI_CHEAT.md class 50); a timing the child says failed earns no speedup
    clocked_any = any(b.label == "candidate" for b in clocked.brackets)
    timed = clocked_any and not report.timing_error
    missed: list[str] = []  # timed outputs out of tolerance by an honest kernel's margin (``check_clocked_outputs``)
    if clocked_any:
        if report.timed is not None:
            forbidden_per_trial.append(check_trial_runtime(report.timed, "Timed runs", ev))
            check_bracket_samples(report.timed, clocked, ev)
            check_compute_only_when_timed(forbidden_per_trial, ev)
            if ev.fallback_ops and not v.fallback_ops:
                v.fallback_ops = sorted(ev.fallback_ops)
                ev.details.insert(0, "Runtime check of the timed runs: forward ran PyTorch compute ops: "
                                  + ", ".join(v.fallback_ops) + ".")
        elif not report.timing_error:
            ev.add(cheats.C11, "The monitors' record of the timed calls is missing.")
        missed = check_clocked_outputs(clocked, plan, model, model64, cfg, ev, give_way=ex.give_way)
        check_timed_inputs(clocked, ev)
    if missed and not ev.codes:  # one more draw the kernel gets wrong: as a trial's wrong output, not a cheat
        v.correct = False
        n = ex.job.n_trials
        return finish(w, "wrong", missed + ev.details, n / (n + 1))
    if timed:
        record_speedups(v, report, clocked, ref_timing, ev)
        if clocked.unchecked and v.speedup_eager is not None:
            # an input the channel could not carry: the child drew its own, so no timed output could be checked
            # against it and the clock may have timed anything; the speedup is reported, never rewarded
            v.speedup_lo = min(v.speedup_lo if v.speedup_lo is not None else v.speedup_eager, 1.0)
            why = clocked.unchecked_why or "an input of this task cannot be handed to your process by the verifier"
            ev.add(None, f"Timing: {why}, so your timed calls' outputs could not be checked; the speedup is reported "
                         "but earns no reward.")
    if clocked_any and ev.codes:
        v.cheats, v.correct = ev.decide(), False
        return finish(w, "cheat", ev.details)
    if not timed and cfg.timing_trials <= 0 and not report.timing_error and not clocked.problems:
        ev.add(None, "Not timed: this run has timing off (timing_trials=0), so no speedup was measured.")
    elif not timed:
        why = report.timing_error or "; ".join(clocked.problems[:2]) or "no timed call was clocked"
        ev.add(None, "Timing failed: " + why)
    return None


@cheats.probe(cheats.C01, cheats.C02, cheats.C19, where="judge")
def _legality_outcome(w: Work, cfg: VerifyConfig, report: ChildReport, ev: Evidence, knockout=None) -> Verdict:
    """A correct candidate that passed every other check: what the strict and the partial legality policies
    say (both recorded, each the catalogue's checks over what was seen: ``cheats.decide``), and the verdict under
    ``cfg.legality``. Where forward ran PyTorch compute beside own
    kernels that ran on every trial, ``knockout(keep_scalars=...)`` (verifier/judge/knockout.py; on cpu's data-movement run Python integers and booleans kept) runs
    the knockout trial that decides the partial policy; elsewhere ``own_work_ok``'s run and share rules do.

    PyTorch compute the static scan found (``w.torch_findings``), or the built extension imports
    (``w.binary_torch``: ``at::matmul`` in the C++, which a thread or a process of its own could run unseen by the
    monitors), on a path that never ran (no monitor saw PyTorch
    compute on any trial, the extra shape or the timed calls: a fallback for shapes the task cannot produce) does
    not decide the partial policy. The knockout is asked there too: no monitor saw PyTorch do the work, so either
    the candidate's own kernels did it (they contribute: partial passes) or compute no monitor sees did (host
    compute by a route the static scan does not know: they contribute nothing, C02). The strict policy rejects
    the path all the same, as C19_UNRUN_TORCH_PATH, apart from C01 (PyTorch compute that ran)."""
    v = w.verdict
    ran = bool(ev.torch_codes)  # PyTorch compute the runtime monitors saw
    found = bool(w.torch_findings or w.binary_torch)  # and what the scans outside the process found
    unrun = found and not ran
    # cpu: forward made tensor data with PyTorch's copies beside its own calls, and no monitor saw compute: whose data
    # the output is, the knockout says (its own calls' tensors and floats knocked out, their integers kept)
    moved = (v.backend == "cpu" and not ran and not unrun
             and any(MOVES_DATA.intersection(t.dispatched_ops) for t in report.trials))
    knocked = knockout(keep_scalars=moved) \
        if (ran or unrun or moved) and knockout is not None and own_kernels_ran(report) else None
    if knocked is not None:
        v.versions["knockout"] = knocked.to_dict()
        if knocked.verifier_failure and cfg.legality == "partial":
            # the run that decides this policy failed on the verifier's side (every attempt): the share rule's pass
            # would be the verifier's failure deciding for the candidate, as a rejection would be deciding against it
            return finish(w, "verifier_error", [
                f"The knockout run that decides the partial legality policy failed on the verifier's side in "
                f"{knocked.attempts} run(s): {knocked.detail}. Not judged: verify this candidate again."])
        if not knocked.conclusive:
            w.notes.append(f"Partial legality: the knockout run (your kernels' launches or calls skipped) was inconclusive: "
                           f"{knocked.detail}; the share of device time decided instead.")
    if moved and knocked is not None and knocked.conclusive and knocked.outcome == "no_contribution":
        ev.add(cheats.C02, "Your own functions produce no part of the output's data: with their tensors knocked out "
                           f"it is still correct ({knocked.detail}); the answer is PyTorch's copies (.contiguous(), "
                           "cat, clone), which may move data for your kernels but are not the task's work.")
    partial_ok, why_not = own_work_ok(report, cfg, v, knocked)
    strict = cheats.decide(ev.seen("strict", found, partial_ok))
    partial = cheats.decide(ev.seen("partial", found, partial_ok))
    v.pass_strict, v.pass_partial = not strict, not partial
    details = [f"Static check, {f}." for f in w.torch_findings] + ev.details
    if w.binary_torch:
        details.insert(len(w.torch_findings), "Binary check: your extension calls PyTorch compute ops from C++ (" +
                       ", ".join(w.binary_torch[:8]) + "): PyTorch compute in forward, whichever thread or process "
                       "runs it.")
    if unrun:
        details.append("That PyTorch compute never ran: no monitor saw PyTorch compute on any trial, the extra shape "
                       "or the timed calls. The strict policy rejects a PyTorch path in forward all the same "
                       f"({cheats.C19}); the partial policy does not count it.")
    if cfg.legality == "strict" and strict:
        v.cheats, v.correct = strict, False
        return finish(w, "cheat", details + ["(Under the partial legality policy, which allows PyTorch compute beside "
                                             "your own kernels, this candidate would " +
                                             ("pass." if partial_ok else f"fail: {why_not}.") + ")"])
    if cfg.legality == "partial" and partial:
        v.cheats, v.correct = partial, False
        return finish(w, "cheat", details + [f"Partial legality: {why_not}."])
    if ran:
        details.append("PyTorch compute in forward is allowed under the partial legality policy used here; the strict "
                       "policy (the corpora's) rejects it.")
    advice = "It is slower than eager PyTorch: fuse work, coalesce memory accesses, and use more parallelism." \
        if v.speedup_eager is not None and v.speedup_eager < 1.0 else "Try to make it faster still."
    v.status = "pass"
    v.reward = reward_for(v)
    v.feedback = feedback.compose("pass", details + w.notes, advice)
    v.versions = {**v.versions, "torch": torch.__version__, "python": sys.version.split()[0]}
    return v
