"""The probes the judge runs on an executed candidate, each a function named for what it catches and registered
under the codes it sights (``@cheats.probe``, verifier/cheats.py). Each reads one kind of evidence (the child's
streamed records, its report, the job directory, the channel's ledger) and adds the codes it sighted and sentences of
feedback to an ``Evidence`` (verifier/judge/outputs.py); the catalogue's one check per code decides from it which
codes a verdict lists (``cheats.decide``). The order they run in, and what a verdict stops at, is the judge's
(verifier/judge/verdict.py); the probes of the outputs themselves are in verifier/judge/outputs.py.

Imports: torch, verifier.common, verifier.execute's channel (the Ledger), verifier.front.binary (the scans of
extensions the child built) and verifier.judge.outputs.
"""

from __future__ import annotations

from pathlib import Path

from kernelmill.schema import Verdict
from verifier import cheats
from verifier.common import sandbox
from verifier.common.backends import kernel_family
from verifier.common.config import VerifyConfig
from verifier.common.contract import ChildReport, ContractError, TrialReport, file_seal
from verifier.common.ops import forbidden
from verifier.execute.channel import Ledger
from verifier.judge import cpu_time
from verifier.judge.outputs import Evidence

_VERDICT_WORDS = ('"status"', '"correct"', '"reward"', '"stage_reached"', "'correct'", "'status'")


@cheats.probe(cheats.C18, where="judge")
def check_fake_verdict(log: str, ev: Evidence) -> None:
    """C18: text shaped like a verdict in the candidate's output (never parsed, but a sign of intent)."""
    if any(word in log for word in _VERDICT_WORDS):
        ev.add(cheats.C18, "Your program printed text shaped like a verifier verdict; candidate output is never "
                           "read as a result.")


@cheats.probe(cheats.C11, where="child")
def check_tampering(patched: list[str], ev: Evidence) -> None:
    """C11: torch functions, flags or the verifier's modules changed in the candidate's process."""
    if patched:
        ev.add(cheats.C11, "Your program changed torch or the verifier in its process: " + "; ".join(patched[:8]) + ".")


@cheats.probe(cheats.C04, where="child")
def check_reference_held(report: ChildReport, ev: Evidence) -> None:
    """C04: a submodule of ModelNew is the reference Model."""
    if report.holds_reference_model:
        ev.add(cheats.C04, "ModelNew holds an instance of the reference Model.")




@cheats.probe(cheats.C12, where="judge")
def check_channel(ledger: Ledger, ev: Evidence) -> None:
    """C12: the candidate spoke on the verifier's channel (asked for a seed out of turn, answered for the
    child): only the verifier's own code in the child asks, each step once and in order."""
    if ledger.problems:
        ev.add(cheats.C12, "Your program used the verifier's channel to its execution process: "
                           + "; ".join(ledger.problems[:3]) + ". Seeds are handed out one trial at a time.")


@cheats.probe(cheats.C09, where="child")
def check_threads_at_load(report: ChildReport, ev: Evidence) -> None:
    """C09: threads the candidate's import or constructor started that were still at work afterwards (never idle
    for ``monitors.QUIET_S``; parked ones, an OpenMP pool's, are not counted). Work on them is watched by no
    thread-local monitor, and forward does not need them."""
    if report.threads_at_load > 0:
        ev.add(cheats.C09, f"Importing your program or constructing ModelNew left {report.threads_at_load} "
                           "thread(s) at work after it: work on a thread of your own outside forward is not allowed.")


@cheats.probe(cheats.C11, where="judge")
def use_streamed_records(report: ChildReport, ledger: Ledger, ev: Evidence) -> None:
    """The monitors' records as the child streamed them, call by call (verifier/execute/channel.py), replace the ones in
    its final report: a record edited, emptied or dropped after it was sent changes nothing. A record the report
    has and the stream does not is C11 (the stream was cut to hide it)."""
    trials = []
    # as many trials as the report lists or the verifier handed seeds out for, whichever is more: a report whose list
    # was emptied or cut (the report is written in the candidate's process) still has every streamed record judged
    for i in range(max(len(report.trials), len(ledger.trial_seeds))):
        got = ledger.records.get(f"trial{i}")
        if got is None:
            if i < len(report.trials):
                ev.add(cheats.C11, f"The record of trial {i + 1} never reached the verifier while the trial ran.")
            break  # (a trial handed out whose record never came did not finish: the report says how, or the run's end)
        try:
            trials.append(TrialReport.from_dict(got))
        except (ContractError, ValueError, TypeError):
            ev.add(cheats.C11, f"The record of trial {i + 1} sent to the verifier was malformed.")
            break
    report.trials = trials
    got = ledger.records.get("timed")  # streamed, it is judged whether or not the report still holds it
    if got is not None or report.timed is not None:
        try:
            report.timed = TrialReport.from_dict(got) if got is not None else None
        except (ContractError, ValueError, TypeError):
            report.timed = None
        if report.timed is None and not report.timing_error:
            ev.add(cheats.C11, "The monitors' record of the timed calls never reached the verifier.")


# bytes of tensor data one forward call may hand to host code (scalars, small shape tables): device data copied to
# the host, and values read one at a time into Python (``.item()``, ``float(t)``, iterating a tensor); the monitor
# keeps the most of any one call (verifier/child/monitors.py DispatchRecorder)
HOST_COPY_LIMIT = 64 * 1024


# CPU time of processes the candidate's process started and waited for, within one record (a trial, or every timed
# call), above which forward's work ran in processes of its own (verifier/child/cpu_sampler.c ``km_child_us``)
CHILD_PROCESS_CPU_US = 1000


@cheats.probe(cheats.C01, cheats.C02, cheats.C07, cheats.C09, cheats.C10, cheats.C11, cheats.C17, where="child")
def check_trial_runtime(rec: TrialReport, label: str, ev: Evidence) -> list[str]:
    """C01 (either monitor saw PyTorch compute), C11 (a monitor was switched off), C02 (no kernel function
    called), C09 (threads left running), C07 (inputs modified), C10 (not a plain dense tensor), C17 (work in processes
    of its own: forked, waited for, their CPU time counted by the sampler). Returns the forbidden ops of this trial
    (for the fallback-branch check)."""
    bad = sorted(set(forbidden(rec.dispatched_ops)) | set(forbidden(rec.profiled_ops)))
    if bad:
        ev.torch_codes.add(cheats.C01)
        ev.fallback_ops |= set(bad)
    if rec.monitor_problems:
        ev.add(cheats.C11, f"{label}: {'; '.join(rec.monitor_problems)}.")
    if rec.to_host_bytes > HOST_COPY_LIMIT:
        ev.add(cheats.C01, f"{label}: one forward call handed {rec.to_host_bytes} bytes of tensor data to host code "
                           "(copies to the host, or values read one at a time into Python with .item(), float(t) or "
                           "by iterating a tensor): the computation belongs in your kernel, not in host code.")
    # where forward's CPU time went (cpu), read only where the monitors saw no PyTorch compute (theirs explains the
    # samples and is judged above); PyTorch's kernels reached below the dispatcher are PyTorch compute as the monitors'
    # is, so the partial policy judges them as it judges those (its knockout), and the strict one rejects them
    foreign, total, top = cpu_time.foreign_time(rec.cpu_samples) if rec.cpu_samples and not bad else (0, 0, [])
    if total >= cpu_time.MIN_SAMPLES and foreign > cpu_time.MAX_FOREIGN_SHARE * total:
        ev.add_torch(cheats.C01, f"{label}: {foreign} of {total} CPU-time samples of forward ran in PyTorch's or a "
                                 f"vendor library's compute kernels ({', '.join(top)}), reached by no op the monitors "
                                 "saw: the computation belongs in your kernel.")
    elif total:
        _foreign_over_records(label, foreign, total, top, ev)
    child_us = int((rec.cpu_samples or {}).get("children_us", 0) or 0)
    if child_us > CHILD_PROCESS_CPU_US:
        ev.add(cheats.C17, f"{label}: processes your code started (fork, vfork, clone) spent {child_us / 1000:.1f} ms "
                           "of CPU time: work outside your process's threads, where no monitor of forward looks. Compute "
                           "in your own kernels, on your process's threads.")
    # a forward that replays a CUDA graph of its own kernels calls no function of its extension, and the profile shows
    # those kernels run inside forward (docs/ANTI_CHEAT.md class 113): launched, not C02
    if rec.kernel_calls == 0 and not rec.own_kernel_us > 0:
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


def _foreign_over_records(label: str, foreign: int, total: int, top: list, ev: Evidence) -> None:
    """The samples in PyTorch's or a vendor's compute of the job's records so far, together: C01 once they reach
    ``cpu_time.foreign_count_limit`` of all their samples, a count far below any share (padding with the candidate's
    own work dilutes a share, not a count; docs/ANTI_CHEAT.md class 112). Said once."""
    ev.foreign_samples += foreign
    ev.sampled += total
    for name in top:
        ev.foreign_where[name] = ev.foreign_where.get(name, 0) + 1
    if foreign and not ev.foreign_said and ev.foreign_samples >= cpu_time.foreign_count_limit(ev.sampled):
        ev.foreign_said = True
        names = ", ".join(sorted(ev.foreign_where, key=lambda k: -ev.foreign_where[k])[:3])
        ev.add_torch(cheats.C01, f"{label} and the records before it: {ev.foreign_samples} of {ev.sampled} CPU-time "
                                 f"samples of forward (about {ev.foreign_samples * 0.5:.1f} ms) ran in PyTorch's or a "
                                 f"vendor library's compute kernels ({names}), reached by no op the monitors saw, beside "
                                 "your own work: the computation belongs in your kernel.")


@cheats.probe(cheats.C01, where="child")
def check_bracket_samples(timed: TrialReport, clocked, ev: Evidence) -> None:
    """cpu: each clocked bracket judged on its own samples (``TrialReport.cpu_brackets``). The reported time is the
    least bracket's, so one bracket sets it alone, and the timed calls' samples together are outweighed by the slow
    brackets: PyTorch's kernels run in one bracket of four (told apart by the gaps between calls) set a time the
    candidate's own loops never reach, at a share of every timed call's samples far below half. So a bracket whose
    samples are more than half PyTorch's or a vendor's compute is C01 (as a record's are). Brackets with fewer than
    ``cpu_time.MIN_SAMPLES`` samples to judge each (2.5 ms of CPU time: too short, or their threads blind to the
    sampler) are judged together (a fast kernel's brackets of 256 calls are all short), and where even together they
    have too few they are marked ``unseen`` and do not set the time (``Clocked._picked``; an honest bracket lasts
    about the harness's target of 20 ms, or all of a fast kernel's are short alike). Read only where the monitors saw no PyTorch compute in the timed calls (theirs explains
    the samples) and where the child sent per-bracket samples (the sampler ran)."""
    if not timed.cpu_brackets or not clocked.host_clock:
        return
    if set(forbidden(timed.dispatched_ops)) | set(forbidden(timed.profiled_ops)):
        return
    by_seq = {int(b.get("seq", -1)): b for b in timed.cpu_brackets if isinstance(b, dict)}
    rows = [b for b in clocked.brackets if b.label == "candidate"]
    short: list = []
    for n, b in enumerate(rows, 1):
        got = by_seq.get(b.seq) or {}
        foreign, total, top = cpu_time.foreign_time(got)
        if total < cpu_time.MIN_SAMPLES:  # too little seen to judge (the C and OpenMP runtimes' samples not counted)
            short.append((b, got))
            continue
        if foreign > cpu_time.MAX_FOREIGN_SHARE * total:
            ev.add_torch(cheats.C01, f"Timed bracket {n} of {len(rows)} ({b.calls} call(s)): {foreign} of {total} "
                                     "CPU-time samples of forward ran in PyTorch's or a vendor library's compute "
                                     f"kernels ({', '.join(top)}), reached by no op the monitors saw: the computation "
                                     "belongs in your kernel.")
            return
    if not short or len(short) == len(rows):
        return
    # the brackets too short to judge alone, judged together (a fast kernel's brackets of 256 calls last about a
    # millisecond each): their own work may set the time; PyTorch's compute is C01; too little even together, unseen
    at: dict = {}
    for _, got in short:
        for k, w in (got.get("at") or {}).items():
            at[k] = at.get(k, 0) + int(w)
    foreign, total, top = cpu_time.foreign_time({"total": sum(int(g.get("total", 0) or 0) for _, g in short),
                                                 "at": at})
    if total >= cpu_time.MIN_SAMPLES and foreign > cpu_time.MAX_FOREIGN_SHARE * total:
        ev.add_torch(cheats.C01, f"{len(short)} short timed brackets of {len(rows)}: {foreign} of {total} CPU-time "
                                 "samples of forward ran in PyTorch's or a vendor library's compute kernels "
                                 f"({', '.join(top)}), reached by no op the monitors saw: the computation belongs in "
                                 "your kernel.")
        return
    if total >= cpu_time.MIN_SAMPLES:
        return
    for b, _ in short:
        b.unseen = True
    ev.add(None, f"{len(short)} of {len(rows)} timed brackets were too short for the CPU-time sampler to see their "
                 f"work (fewer than {cpu_time.MIN_SAMPLES} samples together); they do not set the reported time.")


@cheats.probe(cheats.C01, cheats.C02, where="child")
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
    # a CUDA graph forward replayed ran compute kernels of PyTorch's or a vendor's: no op was dispatched for them (a
    # replay dispatches nothing), whatever their share (docs/ANTI_CHEAT.md class 113: PyTorch's ReLU captured at
    # construction and replayed beside the candidate's own kernel, 58% of forward's compute, passed under 50%)
    replayed = sorted({n for t in trials if t.graph_launches for n in t.foreign_kernel_us if n in names},
                      key=lambda n: -names[n])[:3]
    if replayed:
        ev.add_torch(cheats.C01, "Forward launched a CUDA graph that ran kernels that are not yours: " +
                     ", ".join(f"{kernel_family(n)}: {n[:100]}" for n in replayed) +
                     ". A graph replays what was captured into it; capture your own kernels only.")
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
    """The candidate's own kernels were called on every trial, or seen to run in it (cuda: a graph's replay), and, on
    cuda, the profiler saw one run."""
    trials = [t for t in report.trials if not t.error]
    return bool(trials) and all(t.kernel_calls > 0 or t.own_kernel_us > 0 for t in trials) and \
        report.own_kernel_ran is not False


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


@cheats.probe(cheats.C11, where="judge")
def check_sealed(label: str, why: str, ev: Evidence) -> None:
    """C11: a file of the job directory that the verdict reads (a trial's output, a shipped input file) is not what
    the verifier sealed when it was handed over (verifier/execute/channel.py ``Ledger.seal``): the job directory is
    the candidate's to write, so a changed file is evidence forged after the fact (an output replaced by an answer
    computed later or elsewhere, an input rewritten to fit the output)."""
    ev.add(cheats.C11, f"{label}: {why}: the files the verifier reads from your job directory are its evidence, "
                       "not yours to change.")


@cheats.probe(cheats.C01, cheats.C11, where="binary")
def check_child_built(ledger: Ledger, ev: Evidence) -> list[str]:
    """C01 / C11 in the extensions the candidate's process asked for at run time (load_inline arguments the static
    stage could not read): the verifier built each one and scanned the binary it built before the child could load
    it (verifier/build/runtime.py); the findings are in the ledger, kept on the verifier's side. A binary that is no
    longer what was built when the job ended (removed or replaced where no sandbox made the build root read-only)
    is C11: what the process loaded may not be what was scanned. (What their build sandbox blocked is
    ``check_sandbox_escape``'s.) Returns the ATen compute ops those binaries import
    (PyTorch compute in forward, for the legality policy, as for the compile pool's builds)."""
    compute: list[str] = []
    for b in ledger.child_builds:
        for found in b.vendor:
            ev.add(cheats.C01, f"Check of the extension built at run time: {found} (compute by a vendor library or "
                               "ATen internals, not your kernel).")
        for found in b.tamper:
            ev.add(cheats.C11, f"Check of the extension built at run time: {found}.")
        if b.ok and file_seal(Path(b.so_path)) != b.sha256:
            ev.add(cheats.C11, "The extension the verifier built for you at run time was removed or replaced before "
                               "the job ended: the binary your process loaded is not the one that was checked.")
        compute += b.compute
    return sorted(set(compute))


@cheats.probe(cheats.C17, where="judge")
def check_sandbox_escape(job_dir: Path, ev: Evidence, builds: list | tuple = ()) -> None:
    """C17: what the sandbox (verifier/common/sandbox.py) saw the job attempt outside its view: writes outside the job
    directory, processes left behind, network use, the process limit. Written by the verifier's side of the
    sandbox into the job directory after the child ended, never by the child. ``builds``: the extensions the job asked
    for at run time (``Ledger.child_builds``), whose build sandbox saw their module's own code when the build imported
    it (verifier/build/runtime.py)."""
    for found in sandbox.escape_findings(job_dir):
        ev.add(cheats.C17, f"The sandbox blocked: {found}.")
    for b in builds:
        for found in b.escapes:
            ev.add(cheats.C17, f"The sandbox blocked, while building the extension asked for at run time: {found}.")


@cheats.probe(cheats.C07, where="harness")
def check_timed_inputs(clocked, ev: Evidence) -> None:
    """C07 on the timed calls, read outside the candidate's process: the harness compared the inputs it wrote into
    its pool with the pool once each bracket's calls were done (verifier/execute/harness.py ``Clocked.mutated``), so
    a call that writes into its inputs only when timed, or whose own monitors were silenced, is seen."""
    if clocked.mutated:
        ev.add(cheats.C07, f"Timed runs: forward modified its inputs in place ({clocked.mutated[0]}, as the verifier "
                           "read them once the calls were done); write results into new tensors.")


@cheats.probe(cheats.C03, where="child")
def check_fallback_across_trials(forbidden_per_trial: list, ev: Evidence) -> None:
    """C03 at runtime: PyTorch compute on some trials (the extra shape among them) and not on others, a path to
    the reference taken for some inputs only. ``forbidden_per_trial``: per trial, the forbidden ops its records show."""
    if forbidden_per_trial and any(forbidden_per_trial) and not all(forbidden_per_trial):
        ev.add_torch(cheats.C03, "PyTorch compute ran on some trials but not others (a fallback branch).")


@cheats.probe(cheats.C14, where="judge")
def check_extra_shape(regular_ok: bool, other_failed: bool, crashed: bool, ev: Evidence,
                      other_raised: bool = False, other_near: bool = False) -> None:
    """C14: correct on every trial of the benchmark's shape and wrong on the extra shape (a step of the task's own
    size constants, drawn per plan among several: verifier/judge/plan.py), the mark of sizes written into the
    kernel; or raising an error on the extra shape alone (``other_raised``: an ``assert`` or ``TORCH_CHECK`` of the
    benchmark's sizes in front of such a kernel turned its -1 into a crash's reward, docs/ANTI_CHEAT.md class 58).
    Another crash (a trial of the benchmark's shape raising, memory running out, the process dying) is its own
    verdict and says nothing about sizes, nor does a near miss on the extra shape (``other_near``: the error an honest
    kernel near its tolerance makes on a larger draw, its sums longer; docs/ANTI_CHEAT.md class 116): wrong, not C14."""
    if regular_ok and other_raised:
        ev.add(cheats.C14, "Correct on the benchmark shape but raised an error on another valid shape (a kernel "
                           "for the benchmark's sizes only?): read sizes from the inputs and handle any valid shape.")
    elif regular_ok and other_failed and not crashed and other_near:
        ev.add(None, "Correct on the benchmark shape and just out of tolerance on another valid shape: your "
                     "kernel's error is near the tolerance (its sums grow with the sizes), not a sign of sizes written "
                     "into it.")
    elif regular_ok and other_failed and not crashed:
        ev.add(cheats.C14, "Correct on the benchmark shape but wrong on another valid shape (hard-coded sizes?).")


@cheats.probe(cheats.C09, where="child")
def check_threads_after_timing(report: ChildReport, ev: Evidence) -> None:
    """C09 over the timed calls: threads of the candidate's still at work after they returned
    (verifier/child/monitors.py ``side_work_threads``: judged by what they do, not counted)."""
    if report.threads_added_timing > 0:
        ev.add(cheats.C09, f"{report.threads_added_timing} thread(s) of yours were still at work after the timed "
                           "iterations returned.")


@cheats.probe(cheats.C16, where="child")
def check_compute_only_when_timed(forbidden_per_trial: list, ev: Evidence) -> None:
    """C16 from the records: PyTorch compute in the timed calls (the last entry) and in none of the checked trials
    (behaving differently when timed; the harness's own check of every timed output is ``check_clocked_outputs``)."""
    if forbidden_per_trial and forbidden_per_trial[-1] and not any(forbidden_per_trial[:-1]):
        ev.add(cheats.C16, "PyTorch compute ran in the timed runs but not in the checked trials (behaving "
                           "differently when timed).")
