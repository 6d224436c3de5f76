"""Judging an execution: the verdict for a candidate from what its execution child reported.

The child (verifier/child/worker.py) runs the candidate and reports raw facts (verifier/common/contract.py): output
files per trial, the aten ops two monitors saw, kernel device times, threads, what it changed in torch,
timed outputs and device times. Everything that decides is here, in the verifier's process, against
reference outputs the child never saw, computed on inputs drawn here from the same seeds. Each check is a
function named for what it catches; it adds cheat codes and sentences of feedback to an ``Evidence``. The
checks of the outputs themselves (correctness; C05, C06, C08, C11 by the reference's run in the child, C13, C16)
are in verifier/judge/outputs.py; the runtime, legality, timing and sandbox checks, and the verdict, are here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import signal
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelmill.schema import NOT_JUDGED, Verdict
from verifier import cheats
from verifier.common import sandbox
from verifier.common.backends import kernel_family
from verifier.common.config import VerifyConfig
from verifier.common.contract import CHILD_BUILT_FILE, FLAGS_FILE, ChildReport, ContractError, Job, TrialReport
from verifier.common.inputs import as_list, build_model, draw_inputs
from verifier.common.ops import forbidden
from verifier.execute.channel import Ledger
from verifier.execute.harness import Clocked, interval, summary_for
from verifier.front.vendor import scan_library, scan_sources, scan_tampering
from verifier.judge import feedback
from verifier.judge.numerics import float64_model
from verifier.judge.outputs import (
    RNG_LOCK,
    Digest,
    Evidence,
    check_clocked_outputs,
    check_outputs,
    fingerprint,
    reference64,
    same_fingerprint,
)
from verifier.judge.reward import reward_for

_VERDICT_WORDS = ('"status"', '"correct"', '"reward"', '"stage_reached"', "'correct'", "'status'")


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


@dataclass
class ChildRun:
    rc: int | None
    timed_out: bool
    log: str
    limit_s: float = 0.0  # the wall-clock limit it ran under


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


# ---------------------------------------------------------------------------- the checks


@cheats.check(cheats.C18, where="judge")
def check_fake_verdict(log: str, ev: Evidence) -> None:
    """C18: text shaped like a verdict in the candidate's output (never parsed, but a sign of intent)."""
    if any(word in log for word in _VERDICT_WORDS):
        ev.add(cheats.C18, "Your program printed text shaped like a verifier verdict; candidate output is never "
                           "read as a result.")


@cheats.check(cheats.C11, where="child")
def check_tampering(patched: list[str], ev: Evidence) -> None:
    """C11: torch functions, flags or the verifier's modules changed in the candidate's process."""
    if patched:
        ev.add(cheats.C11, "Your program changed torch or the verifier in its process: " + "; ".join(patched[:8]) + ".")


@cheats.check(cheats.C04, where="child")
def check_reference_held(report: ChildReport, ev: Evidence) -> None:
    """C04: a submodule of ModelNew is the reference Model."""
    if report.holds_reference_model:
        ev.add(cheats.C04, "ModelNew holds an instance of the reference Model.")


_NAME_ERROR = re.compile(r"NameError: name '(\w+)' is not defined")


def reference_name_hint(error: str, ref_mod) -> list[str]:
    """Your program runs in its own module, not in the task's globals (KernelBench's harness executes both in one
    namespace): a NameError for a name the task program defines says so, naming it."""
    m = _NAME_ERROR.search(error or "")
    if not m or not hasattr(ref_mod, m.group(1)):
        return []
    return [f"`{m.group(1)}` is defined in the task program, not in yours: your program runs as its own module, so "
            f"define `{m.group(1)}` (or take it from the inputs) in your own file."]


@cheats.check(cheats.C12, where="judge")
def check_channel(ledger: Ledger, ev: Evidence) -> None:
    """C12: the candidate spoke on the verifier's channel (asked for a seed out of turn, answered for the
    child): only the verifier's own code in the child asks, each step once and in order."""
    if ledger.problems:
        ev.add(cheats.C12, "Your program used the verifier's channel to its execution process: "
                           + "; ".join(ledger.problems[:3]) + ". Seeds are handed out one trial at a time.")


@cheats.check(cheats.C09, where="child")
def check_threads_at_load(report: ChildReport, ev: Evidence) -> None:
    """C09: threads the candidate's import or constructor started that were still at work afterwards (never idle
    for ``monitors.QUIET_S``; parked ones, an OpenMP pool's, are not counted). Work on them is watched by no
    thread-local monitor, and forward does not need them."""
    if report.threads_at_load > 0:
        ev.add(cheats.C09, f"Importing your program or constructing ModelNew left {report.threads_at_load} "
                           "thread(s) at work after it: work on a thread of your own outside forward is not allowed.")


@cheats.check(cheats.C11, where="judge")
def use_streamed_records(report: ChildReport, ledger: Ledger, ev: Evidence) -> None:
    """The monitors' records as the child streamed them, call by call (verifier/execute/channel.py), replace the ones in
    its final report: a record edited, emptied or dropped after it was sent changes nothing. A record the report
    has and the stream does not is C11 (the stream was cut to hide it)."""
    trials = []
    for i in range(len(report.trials)):
        got = ledger.records.get(f"trial{i}")
        if got is None:
            ev.add(cheats.C11, f"The record of trial {i + 1} never reached the verifier while the trial ran.")
            break
        try:
            trials.append(TrialReport.from_dict(got))
        except (ContractError, ValueError, TypeError):
            ev.add(cheats.C11, f"The record of trial {i + 1} sent to the verifier was malformed.")
            break
    report.trials = trials
    if report.timed is not None:
        got = ledger.records.get("timed")
        try:
            report.timed = TrialReport.from_dict(got) if got is not None else None
        except (ContractError, ValueError, TypeError):
            report.timed = None
        if report.timed is None and not report.timing_error:
            ev.add(cheats.C11, "The monitors' record of the timed calls never reached the verifier.")


HOST_COPY_LIMIT = 64 * 1024  # bytes forward may copy from the device to the host (scalars, small shape tables)


@cheats.check(cheats.C01, cheats.C02, cheats.C07, cheats.C09, cheats.C10, cheats.C11, where="child")
def check_trial_runtime(rec: TrialReport, label: str, ev: Evidence) -> list[str]:
    """C01 (either monitor saw PyTorch compute), C11 (a monitor was switched off), C02 (no kernel function
    called), C09 (threads left running), C07 (inputs modified), C10 (not a plain dense tensor). Returns the
    forbidden ops of this trial (for the fallback-branch check)."""
    bad = sorted(set(forbidden(rec.dispatched_ops)) | set(forbidden(rec.profiled_ops)))
    if bad:
        ev.torch_codes.add(cheats.C01)
        ev.fallback_ops |= set(bad)
    if rec.monitor_problems:
        ev.add(cheats.C11, f"{label}: {'; '.join(rec.monitor_problems)}.")
    if rec.to_host_bytes > HOST_COPY_LIMIT:
        ev.add(cheats.C01, f"{label}: forward copied {rec.to_host_bytes} bytes of device data to the host (the "
                           "computation belongs in your kernel, not on the CPU).")
    if rec.kernel_calls == 0:
        ev.add(cheats.C02, f"{label}: none of your compiled kernel functions was called during forward.")
    if rec.threads_added > 0:
        ev.add(cheats.C09, f"{label}: {rec.threads_added} thread(s) of yours were still at work after forward "
                           "returned (or ended only then): work the timing misses. Join your threads before "
                           "returning; an idle pool (OpenMP's) is fine.")
    if rec.mutated_inputs:
        ev.add(cheats.C07, f"{label}: forward modified input(s) {rec.mutated_inputs} in place.")
    if rec.output_problem:
        ev.add(cheats.C10, f"{label}: {rec.output_problem}.")
    return bad


@cheats.check(cheats.C01, cheats.C02, where="child")
def check_own_kernels(report: ChildReport, cfg: VerifyConfig, v: Verdict, ev: Evidence) -> None:
    """C02: on cuda the profiler saw none of the candidate's __global__ kernels run. C01 (time coverage): the
    share of forward device time spent in kernels named in the candidate's sources; foreign compute kernels
    (cuBLAS, cuDNN, CUTLASS, ATen; copies and fills excluded) taking more than ``1 - min_own_share`` of it,
    or any cuBLAS/cuDNN/CUTLASS kernel, is compute the candidate did not write."""
    if report.own_kernel_ran is False:
        ev.add(cheats.C02, "The profiler saw none of your __global__ kernels run during forward.")
    trials = [t for t in report.trials if not t.error] + ([report.timed] if report.timed is not None else [])
    if not trials or not report.cuda_kernel_names or not any(t.foreign_kernel_us or t.own_kernel_us for t in trials):
        return
    own = sum(t.own_kernel_us for t in trials)
    fam: dict[str, float] = {}
    names: dict[str, float] = {}
    for t in trials:
        for name, us in t.foreign_kernel_us.items():
            f = kernel_family(name)
            fam[f] = fam.get(f, 0.0) + us
            if f != "copy/fill":
                names[name] = names.get(name, 0.0) + us
    total = own + sum(fam.values())
    compute = own + sum(us for f, us in fam.items() if f != "copy/fill")
    v.own_kernel_share = round(own / total, 4) if total > 0 else None
    top = sorted(names.items(), key=lambda kv: -kv[1])[:3]
    v.foreign_kernels = [f"{kernel_family(n)}: {n[:100]} ({us / len(trials):.1f} us)" for n, us in top]
    vendor = {f: us for f, us in fam.items() if f in ("cuBLAS", "cuDNN", "CUTLASS")}
    foreign_share = 1.0 - own / compute if compute > 0 else 0.0
    if vendor or foreign_share > 1.0 - cfg.min_own_share:
        sentence = (f"Only {100 * own / max(compute, 1e-9):.0f}% of forward's compute time was in your own "
                    "kernels; the rest ran in " + ", ".join(v.foreign_kernels) + ".")
        if ev.fallback_ops:  # PyTorch ops ran and launched these: torch compute (the strict policy's concern)
            ev.add_torch(cheats.C01, sentence)
        else:  # no PyTorch op asked for them: the candidate's own C++ called a vendor library
            ev.add(cheats.C01, sentence)


def own_kernels_ran(report: ChildReport) -> bool:
    """The candidate's own kernels were called on every trial (and, on cuda, the profiler saw one run)."""
    trials = [t for t in report.trials if not t.error]
    return bool(trials) and all(t.kernel_calls > 0 for t in trials) and report.own_kernel_ran is not False


NO_CONTRIBUTION = "your own kernels do not contribute to the output: with them skipped it is still correct"


def own_work_ok(report: ChildReport, cfg: VerifyConfig, v: Verdict, knocked=None) -> tuple[bool, str]:
    """The partial policy's condition: the candidate's own kernels ran on every trial and produce part of the
    output. ``knocked`` is the knockout run's result (verifier/judge/knockout.py: cuda, forward ran PyTorch compute):
    where conclusive it decides (still correct with every own launch skipped: no part of the output is theirs;
    wrong, crashed or hung: it is). Without one (cpu, no PyTorch compute) or inconclusive, the share rule: on cuda
    at least ``partial_min_own_share`` of forward's device time. Returns (ok, why not)."""
    if not own_kernels_ran(report):
        return False, "none of your own kernels ran on every trial"
    if knocked is not None and knocked.conclusive:
        return (False, f"{NO_CONTRIBUTION} ({knocked.detail})") if knocked.outcome == "no_contribution" else (True, "")
    if v.own_kernel_share is not None and v.own_kernel_share < cfg.partial_min_own_share:
        return False, (f"your own kernels took {100 * v.own_kernel_share:.1f}% of forward's device time (at least "
                       f"{100 * cfg.partial_min_own_share:.0f}% is real work beside PyTorch)")
    return True, ""


# ---------------------------------------------------------------------------- the judge


@cheats.check(cheats.C01, cheats.C11, where="binary")
def check_child_built(job_dir: Path, ev: Evidence) -> None:
    """C01 / C11 in extensions the child compiled itself (load_inline arguments the static stage could not
    read): the same source and binary scans as for the compile pool's builds, run here on what the child's
    load_inline recorded before and after each build."""
    f = job_dir / CHILD_BUILT_FILE
    try:
        entries = json.loads(f.read_text()) if f.is_file() else []
    except ValueError:
        entries = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        srcs = [str(x) for x in entry.get("sources", [])]
        so = str(entry.get("so_path") or "")
        flags = [str(x) for x in entry.get("ldflags", [])]
        for found in scan_sources(srcs, flags) + (scan_library(so, srcs) if so else []):
            ev.add(cheats.C01, f"Check of the extension built at run time: {found} (compute by a vendor library or "
                               "ATen internals, not your kernel).")
        for found in scan_tampering(srcs, so or None):
            ev.add(cheats.C11, f"Check of the extension built at run time: {found}.")


@cheats.check(cheats.C17, where="judge")
def check_sandbox_escape(job_dir: Path, ev: Evidence) -> None:
    """C17: what the sandbox (verifier/common/sandbox.py) saw the job attempt outside its view: writes outside the job
    directory, processes left behind, network use, the process limit. Written by the verifier's side of the
    sandbox into the job directory after the child ended, never by the child."""
    for found in sandbox.escape_findings(job_dir):
        ev.add(cheats.C17, f"The sandbox blocked: {found}.")


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


def run_stage(job: Job, job_dir: Path, report: ChildReport | None = None) -> str:
    """The run stage the candidate's process was in when it stopped: "timing" once its correctness trials
    were over (its report says it began timing or, without a report, every trial left its output files,
    named as verifier/child/worker.py writes them), else "correctness"."""
    if report is not None:
        return "timing" if report.timing_exclusive is not None else "correctness"
    n = job.n_trials
    over = all((job_dir / f"out_{i}.pt").is_file() for i in range(n)) and \
        all((job_dir / f"ref_{i}.pt").is_file() for i in range(0, n, 2))  # even trials: the reference after
    return "timing" if n and over else "correctness"



@cheats.check(cheats.C03, where="child")
def check_fallback_across_trials(forbidden_per_trial: list, ev: Evidence) -> None:
    """C03 at runtime: PyTorch compute on some trials (the extra shape among them) and not on others, a path to
    the reference taken for some inputs only. ``forbidden_per_trial``: per trial, the forbidden ops its records show."""
    if forbidden_per_trial and any(forbidden_per_trial) and not all(forbidden_per_trial):
        ev.add_torch(cheats.C03, "PyTorch compute ran on some trials but not others (a fallback branch).")


@cheats.check(cheats.C14, where="judge")
def check_extra_shape(regular_ok: bool, other_failed: bool, crashed: bool, ev: Evidence) -> None:
    """C14: correct on every trial of the benchmark's shape and wrong on the extra shape (a step of the task's own
    size constants, drawn per plan among several: verifier/judge/plan.py), the mark of sizes written into the
    kernel. A crash is its own verdict and says nothing about sizes."""
    if regular_ok and other_failed and not crashed:
        ev.add(cheats.C14, "Correct on the benchmark shape but wrong on another valid shape (hard-coded sizes?).")


@cheats.check(cheats.C09, where="child")
def check_threads_after_timing(report: ChildReport, ev: Evidence) -> None:
    """C09 over the timed calls: threads of the candidate's still at work after they returned
    (verifier/child/monitors.py ``side_work_threads``: judged by what they do, not counted)."""
    if report.threads_added_timing > 0:
        ev.add(cheats.C09, f"{report.threads_added_timing} thread(s) of yours were still at work after the timed "
                           "iterations returned.")


@cheats.check(cheats.C16, where="child")
def check_compute_only_when_timed(forbidden_per_trial: list, ev: Evidence) -> None:
    """C16 from the records: PyTorch compute in the timed calls (the last entry) and in none of the checked trials
    (behaving differently when timed; the harness's own check of every timed output is ``check_clocked_outputs``)."""
    if forbidden_per_trial and forbidden_per_trial[-1] and not any(forbidden_per_trial[:-1]):
        ev.add(cheats.C16, "PyTorch compute ran in the timed runs but not in the checked trials (behaving "
                           "differently when timed).")


def judge(w: Work, cfg: VerifyConfig, plan, job: Job, job_dir: Path, run: ChildRun, device: str,
          poison: int, reference_timing, ledger: Ledger, clocked: Clocked | None = None, knockout=None) -> Verdict:
    """The verdict of one executed candidate. ``plan`` is the task's TaskPlan (verifier/engine.py),
    ``reference_timing`` the reference's timings (api.ReferenceTiming: timed in its own process) or None,
    ``ledger`` what this process handed the child and the records it streamed (verifier/execute/channel.py), ``clocked``
    what the harness timed and saw of the timed calls (verifier/execute/harness.py),
    ``knockout`` the knockout run on demand (cuda: the partial policy's question, see ``_legality_outcome``)."""
    v = w.verdict
    ev = Evidence()
    clocked = clocked if clocked is not None else Clocked()
    ref_timing = reference_timing
    reference_timing = ref_timing.report if ref_timing is not None else None
    check_fake_verdict(run.log, ev)
    check_channel(ledger, ev)
    log_tail = "\n".join(run.log.strip().splitlines()[-15:])
    early = _read_flags(job_dir)
    check_child_built(job_dir, ev)
    check_sandbox_escape(job_dir, ev)
    if early or ev.codes - {cheats.C18}:  # tampering or vendor code seen, whatever happened after
        check_tampering(early, ev)
        v.stage_reached = run_stage(job, job_dir)
        v.cheats = sorted(ev.codes)
        return finish(w, "cheat", ev.details)
    if (run.timed_out or run.rc != 0) and not (job_dir / "report.json").is_file() and _warm_up_failed(run.log):
        # the warm process could not initialise the device before the candidate's job reached it (the device
        # was full of other processes' memory): whatever happened next is not the candidate's outcome
        return finish(w, "verifier_error", ["The execution process failed to initialise the device before your "
                                            "code ran:\n" + "\n".join(run.log.strip().splitlines()[:8])])
    if run.timed_out:
        v.stage_reached = run_stage(job, job_dir)
        v.cheats = sorted(ev.codes)
        limit = run.limit_s or cfg.run_timeout_s
        return finish(w, "timeout", [f"The run was killed after {limit:.0f} s of wall-clock time (the limit: "
                                      f"{cfg.run_timeout_s:.0f} s for your code, plus the time the verifier allows "
                                      "for copying out this task's outputs)." +
                                      (f" Last output:\n{log_tail}" if log_tail else "")])
    if run.rc != 0 or not (job_dir / "report.json").is_file():
        rc = run.rc
        why = f"killed by signal {signal.Signals(-rc).name}" if rc and rc < 0 else f"exit status {rc}"
        hint = " (a segmentation fault: an invalid memory access)" if rc == -signal.SIGSEGV else ""
        hint = hint or (" (killed: probably out of memory)" if rc == -signal.SIGKILL else "")
        v.stage_reached = run_stage(job, job_dir)
        v.cheats = sorted(ev.codes)
        return finish(w, "crash", [f"The process running your kernel died: {why}{hint}."
                                   + (f" Last output:\n{log_tail}" if log_tail else "")])
    try:
        report = ChildReport.read(job_dir)
    except (ContractError, ValueError, OSError) as e:  # written in the candidate's process: its problem
        v.cheats = sorted(ev.codes)
        return finish(w, "crash", [f"The execution report was unreadable ({e}); did your program write files?"])
    for name, secs in report.phase_s.items():
        v.stage_seconds[f"child_{name}"] = float(secs)
    if len(report.trials) >= 2:  # the first trial pays first-call costs (module loads)
        v.stage_seconds["child_first_trial"] = round(report.trials[1].started_s - report.trials[0].started_s, 4)
    v.versions["sandbox"] = report.sandbox
    if report.timing_exclusive is not None:
        v.versions["timing"] = {"exclusive": bool(report.timing_exclusive), "lock_wait_s": report.lock_wait_s}
    if report.setup_error:
        return finish(w, "verifier_error", [f"The execution process failed before your code ran:\n{report.setup_error}"])
    if report.reference_error and not report.patched and not ev.codes:
        return finish(w, "verifier_error", ["The task's reference failed in the execution process (the verifier's "
                                            f"problem, not your kernel's):\n{report.reference_error}"])
    for text, label in ((report.import_error, "Importing your program failed"), (report.init_error, "ModelNew() failed")):
        if text:
            v.cheats = sorted(ev.codes)
            return finish(w, "crash", [f"{label}:\n{text}"] + reference_name_hint(text, plan.ref_mod))
    use_streamed_records(report, ledger, ev)
    check_tampering(report.patched, ev)
    if report.aborted:
        v.stage_reached = run_stage(job, job_dir, report)
        v.cheats = sorted(ev.codes)
        return finish(w, "cheat", ev.details)
    check_reference_held(report, ev)
    check_threads_at_load(report, ev)

    with RNG_LOCK:
        model, _ = build_model(plan.ref_mod, job.init_seed, device, plan.text, cfg.eval_mode)
    model64 = None
    if not plan.float64:
        try:
            model64 = float64_model(model)
        except Exception:  # noqa: BLE001 - memory: this candidate is judged with the fixed tolerance
            model64 = None
    v.versions["tolerance"] = "float64 reference" if model64 is not None else f"fixed: {plan.float64 or 'no copy'}"
    ref_prev: list = []
    passed, checked, errs, prev = 0, 0, [], []
    crash_detail, regular_ok, other_failed = "", True, False
    forbidden_per_trial = []
    n = job.n_trials
    for rec in report.trials:
        is_other = bool(job.other_shape) and rec.index == n - 1
        inputs = plan.trial_inputs(job, rec.index, device, job_dir)
        label = ("Extra-shape trial" + f" (input shapes {[list(x.shape) for x in inputs if isinstance(x, torch.Tensor)]})"
                 if is_other else f"Trial {rec.index + 1}")
        if rec.error:
            oom = any(s in rec.error for s in ("MemoryError", "bad_alloc")) or "out of memory" in rec.error.lower()
            crash_detail = f"{label} raised an error" + (" (out of memory)" if oom else "") + f":\n{rec.error.strip()}"
            crash_detail += "".join("\n" + h for h in reference_name_hint(rec.error, plan.ref_mod))
            regular_ok = regular_ok and is_other
            break
        forbidden_per_trial.append(check_trial_runtime(rec, label, ev))
        if rec.output_problem:
            regular_ok = False
            continue
        with torch.no_grad():
            refs = [r.detach() for r in as_list(model(*inputs))]
        refs64 = reference64(model64, inputs)
        ref_fp = [fingerprint(r) for r in refs if isinstance(r, torch.Tensor)]
        ref_repeats = any(len(p) == len(ref_fp) and all(same_fingerprint(a, b) for a, b in zip(p, ref_fp))
                          for p in ref_prev)
        ref_prev.append(ref_fp)
        outs = as_list(torch.load(job_dir / rec.output_file, weights_only=True))
        here = (as_list(torch.load(job_dir / rec.ref_output_file, weights_only=True)) if rec.ref_output_file else
                Digest(rec.ref_digest) if rec.ref_digest else None)
        checked += 1
        ok = check_outputs(outs, refs, refs64, inputs, here, label, cfg, plan.ref_mod, poison, prev, ev, errs,
                           ref_repeats, plan.pooled)
        del outs, here, refs, refs64, inputs
        if ok:
            passed += 1
        elif is_other:
            other_failed = True
        else:
            regular_ok = False
    check_fallback_across_trials(forbidden_per_trial, ev)
    if ev.fallback_ops:
        v.fallback_ops = sorted(ev.fallback_ops)
        ev.details.insert(0, "Runtime check: forward ran PyTorch compute ops: " + ", ".join(v.fallback_ops) + ".")
    check_extra_shape(regular_ok, other_failed, bool(crash_detail), ev)
    v.trials = checked
    v.max_abs_err = max(e[0] for e in errs) if errs else None
    v.max_rel_err = max(e[1] for e in errs) if errs else None
    if crash_detail or not (regular_ok and passed == n):
        v.cheats = sorted(ev.codes)
        return finish(w, "crash" if crash_detail else "wrong", ([crash_detail] if crash_detail else []) + ev.details,
                      passed / max(n, 1))
    v.correct = True
    v.stage_reached = "runtime"
    # ---- runtime legality
    check_own_kernels(report, cfg, v, ev)
    check_threads_after_timing(report, ev)
    if ev.codes:  # a cheat under either legality policy
        v.cheats, v.correct = sorted(ev.codes | ev.torch_codes), False
        return finish(w, "cheat", ev.details)
    v.stage_reached = "timing"
    # ---- timing: the harness's clock and its checks of every timed output (verifier/execute/harness.py)
    if ledger.harness_error:
        return finish(w, "verifier_error", ["The verifier's timing harness failed on its own side ("
                                            f"{ledger.harness_error}); this is not your kernel's fault."])
    timed = any(b.label == "candidate" for b in clocked.brackets) and not report.timing_error
    if timed:
        if report.timed is not None:
            forbidden_per_trial.append(check_trial_runtime(report.timed, "Timed runs", ev))
            check_compute_only_when_timed(forbidden_per_trial, ev)
            if ev.fallback_ops and not v.fallback_ops:
                v.fallback_ops = sorted(ev.fallback_ops)
                ev.details.insert(0, "Runtime check of the timed runs: forward ran PyTorch compute ops: "
                                  + ", ".join(v.fallback_ops) + ".")
        else:
            ev.add(cheats.C11, "The monitors' record of the timed calls is missing.")
        check_clocked_outputs(clocked, plan, model, model64, cfg, ev)
        _speedups(v, report, clocked, ref_timing, ev)
        if ev.codes:
            v.cheats, v.correct = sorted(ev.codes | ev.torch_codes), False
            return finish(w, "cheat", ev.details)
    else:
        why = report.timing_error or "; ".join(clocked.problems[:2]) or "no timed call was clocked"
        ev.add(None, "Timing failed: " + why)
    return _legality_outcome(w, cfg, report, ev, knockout)


@cheats.check(cheats.C01, cheats.C02, cheats.C19, where="judge")
def _legality_outcome(w: Work, cfg: VerifyConfig, report: ChildReport, ev: Evidence, knockout=None) -> Verdict:
    """A correct candidate that passed every other check: what the strict and the partial legality policies
    say (both recorded), and the verdict under ``cfg.legality``. Where forward ran PyTorch compute beside own
    kernels that ran on every trial, ``knockout()`` (a zero-argument callable, cuda; verifier/judge/knockout.py) runs
    the knockout trial that decides the partial policy; elsewhere ``own_work_ok``'s run and share rules do.

    PyTorch compute the static scan found (``w.torch_findings``) on a path that never ran (no monitor saw PyTorch
    compute on any trial, the extra shape or the timed calls: a fallback for shapes the task cannot produce) does
    not decide the partial policy: the candidate's own kernels did the work on the task's inputs. The strict
    policy rejects it all the same, as C19_UNRUN_TORCH_PATH, apart from C01 (PyTorch compute that ran)."""
    v = w.verdict
    ran = set(ev.torch_codes)  # PyTorch compute the runtime monitors saw
    unrun = bool(w.torch_findings) and not ran
    torch_codes = ran | ({cheats.C01} if w.torch_findings and ran else set()) | ({cheats.C19} if unrun else set())
    knocked = knockout() if ran and knockout is not None and own_kernels_ran(report) else None
    if knocked is not None:
        v.versions["knockout"] = knocked.to_dict()
        if not knocked.conclusive:
            w.notes.append(f"Partial legality: the knockout run (your kernels' launches skipped) was inconclusive: "
                           f"{knocked.detail}; the share of device time decided instead.")
    partial_ok, why_not = own_work_ok(report, cfg, v, knocked)
    v.pass_strict, v.pass_partial = not torch_codes, partial_ok
    details = [f"Static check, {f}." for f in w.torch_findings] + ev.details
    if unrun:
        details.append("That PyTorch compute never ran: no monitor saw PyTorch compute on any trial, the extra shape "
                       "or the timed calls. The strict policy rejects a PyTorch path in forward all the same "
                       f"({cheats.C19}); the partial policy does not count it.")
    if cfg.legality == "strict" and torch_codes:
        v.cheats, v.correct = sorted(torch_codes), False
        return finish(w, "cheat", details + ["(Under the partial legality policy, which allows PyTorch compute beside "
                                             "your own kernels, this candidate would " +
                                             ("pass." if partial_ok else f"fail: {why_not}.") + ")"])
    if cfg.legality == "partial" and not partial_ok:
        v.cheats, v.correct = [cheats.C02], False
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


RUNTIME_FLOOR_US = 0.5  # a time per call below this is the clock's resolution, not the model's


def _speedups(v: Verdict, report: ChildReport, clocked: Clocked, ref, ev: Evidence) -> None:
    """Runtime, eager and torch.compile times per call, all from the harness's clock (verifier/execute/harness.py), each
    less the null bracket of the same number of calls; launch-inclusive times from the one-at-a-time probes.
    ``speedup_lo``/``speedup_hi``: the eager speedup's 95% interval, a percentile bootstrap (fixed seed) over the
    candidate's brackets and the reference's, each resample's summary the one the point uses (cpu: the least;
    cuda: the median); it says how far the brackets' spread moves the speedup, not a load that slowed a whole
    side alike."""
    null = ref.null() if ref is not None else {}
    per = clocked.per_call_s("candidate", null)
    v.runtime_us = round(max((per or 0.0) * 1e6, RUNTIME_FLOOR_US), 3)
    rows = [b for b in clocked.brackets if b.label == "candidate"]
    v.versions["timing"] = {**v.versions.get("timing", {}), "clock": "harness", "brackets": len(rows),
                            "calls": max(b.calls for b in rows), "late": sum(b.late for b in rows),
                            "null_us": {str(k): round(s * 1e6, 3) for k, s in null.items()},
                            "unlocked_brackets": clocked.unlocked}  # seen by the harness: nobody held the lock
    if report.candidate is not None and report.candidate.launch_us:
        v.launch_us = statistics.median(report.candidate.launch_us)
    eager = ref.clocked.get("eager_s") if ref is not None else None
    if eager is not None:
        v.eager_us = round(max(eager * 1e6, RUNTIME_FLOOR_US), 3)
        v.speedup_eager = v.eager_us / v.runtime_us
        # the speedup's 95% interval over both sides' brackets (floored as the times are); the reward counts a
        # speedup only where it excludes 1 (verifier/judge/reward.py)
        floor = RUNTIME_FLOOR_US * 1e-6
        iv = interval([max(x, floor) for x in clocked.samples("candidate", null)],
                      summary_for(clocked.host_clock),
                      over=[max(float(x), floor) for x in ref.clocked.get("eager_samples") or []])
        if iv is not None:
            v.speedup_lo, v.speedup_hi = round(iv[0], 4), round(iv[1], 4)
        if ref.report.eager and ref.report.eager.launch_us:
            v.eager_launch_us = statistics.median(ref.report.eager.launch_us)
    else:
        rep = ref.report if ref is not None else None
        ev.add(None, "The eager reference could not be timed" + (f": {rep.timing_error or rep.setup_error}"
                                                                 if rep else "") + "; no speedup is reported.")
    comp = ref.clocked.get("compile_s") if ref is not None else None
    if comp is not None:
        v.compile_us = round(max(comp * 1e6, RUNTIME_FLOOR_US), 3)
        v.speedup_compile = v.compile_us / v.runtime_us
    sp = f"{v.speedup_eager:.2f}x" if v.speedup_eager else "n/a"
    if v.speedup_lo is not None:
        sp += f", 95% interval {v.speedup_lo:.2f}-{v.speedup_hi:.2f}x"
    calls = sum(b.calls for b in rows)
    ev.add(None, f"Time per call {v.runtime_us:.1f} us over {calls} timed calls in {len(rows)} brackets (the "
                 f"verifier's clock); eager PyTorch {v.eager_us or float('nan'):.1f} us (speedup {sp})" +
                 (f"; torch.compile {v.compile_us:.1f} us (speedup {v.speedup_compile:.2f}x)." if v.compile_us else "."))
    if v.max_abs_err is not None:
        ev.add(None, f"Max abs error {v.max_abs_err:.3g}, max rel error {v.max_rel_err:.3g} over {v.trials} trials.")
