"""The judge's pass over a candidate's correctness trials (``check_trials``, called by verifier/judge/verdict.py
``judge`` once the process's outcome and its report are known): each trial's streamed records and its output file,
read as the verifier sealed it, against the reference run in the verifier's process on the same inputs (computed
ahead by verifier/judge/prefetch.py where it could be)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from verifier import cheats
from verifier.common.config import VerifyConfig
from verifier.common.contract import ChildReport
from verifier.common.inputs import as_list
from verifier.common.ties import reference_outputs
from verifier.execute.channel import Unsealed
from verifier.judge.checks import check_fallback_across_trials, check_sealed, check_trial_runtime
from verifier.judge.execution import Execution, device_memory_line, last_line, memory_error
from verifier.judge.outputs import (Digest, Evidence, check_outputs, fingerprint, load_sealed, reference64_judged,
                                    same_fingerprint)

_NAME_ERROR = re.compile(r"NameError: name '(\w+)' is not defined")


def reference_name_hint(error: str, ref_mod) -> list[str]:
    """Your program runs in its own module, not in the task's globals (KernelBench's harness executes both in one
    namespace): a NameError for a name the task program defines says so, naming it."""
    m = _NAME_ERROR.search(error or "")
    if not m or not hasattr(ref_mod, m.group(1)):
        return []
    return [f"`{m.group(1)}` is defined in the task program, not in yours: your program runs as its own module, so "
            f"define `{m.group(1)}` (or take it from the inputs) in your own file."]


@dataclass
class Trials:
    """What the judge's pass over the correctness trials found (``check_trials``)."""

    passed: int = 0
    checked: int = 0
    errs: list = dataclasses.field(default_factory=list)  # (max abs, max rel) per checked trial
    crash_detail: str = ""
    device_oom: int = 0  # the trial (from 1) whose own error was the device out of memory, else 0
    regular_ok: bool = True  # every trial of the benchmark's shape correct
    other_failed: bool = False  # the extra shape's trial wrong
    # ... by an honest kernel's near miss only (verifier/judge/outputs.py ``near_miss``): wrong, no sign of sizes written
    # into the kernel (C14)
    other_near: bool = False
    other_raised: bool = False  # the extra shape's trial raised an error of the program's (not memory running out)
    forbidden_per_trial: list = dataclasses.field(default_factory=list)


def load_outputs(ledger, job_dir: Path, name: str) -> tuple[list, str]:
    """A trial's outputs as the child saved them (tensors only: the child records any other output as an output
    problem and writes no file), or why the file is not that: an exception of the verifier's own judging code on a
    file the candidate's process wrote would have been a verifier_error, a verdict no trainer counts. Read as the
    verifier sealed them (``outputs.load_sealed``)."""
    try:
        outs = as_list(load_sealed(ledger, job_dir, name))
    except MemoryError:  # a file as written, too large for this process to read back: the verifier's own memory,
        raise            # not evidence of a forged file (an honest wrong output can be far larger than the task's)
    except Exception as e:  # noqa: BLE001 - any other way a written file fails to load is the writer's
        return [], f"does not load ({type(e).__name__}: {str(e)[:160]})"
    if not all(isinstance(o, torch.Tensor) and type(o) is torch.Tensor for o in outs):
        return [], f"holds something other than plain tensors ({sorted({type(o).__name__ for o in outs})})"
    return outs, ""


def check_trials(cfg: VerifyConfig, plan, ex: Execution, report: ChildReport, model, model64,
                  ev: Evidence) -> Trials:
    """Each correctness trial's records (``check_trial_runtime``) and outputs (``check_outputs``) against the
    reference run here on the same inputs, in order, up to the first trial that raised; then the fallback check
    across trials."""
    job, job_dir, t = ex.job, ex.job_dir, Trials()
    ref_prev: list = []
    prev: list = []
    for rec in report.trials:
        ex.give_way()
        is_other = bool(job.other_shape_at(rec.index))
        ready = ex.prefetched.take(rec.index) if ex.prefetched is not None else None
        try:
            inputs = ready.inputs if ready is not None else plan.trial_inputs(job, rec.index, ex.device, job_dir,
                                                                              ex.ledger)
        except Unsealed as e:
            check_sealed(f"Trial {rec.index + 1}", str(e), ev)
            t.regular_ok = False
            break
        label = ("Extra-shape trial" + f" (input shapes {[list(x.shape) for x in inputs if isinstance(x, torch.Tensor)]})"
                 if is_other else f"Trial {rec.index + 1}")
        if rec.error:
            line = last_line(rec.error)  # what it raised, read as the crash outcome reads a child's last line
            t.device_oom = rec.index + 1 if device_memory_line(line) else 0
            t.crash_detail = (f"{label} raised an error" + (" (out of memory)" if memory_error(line) else "")
                              + f":\n{rec.error.strip()}")
            t.crash_detail += "".join("\n" + h for h in reference_name_hint(rec.error, plan.ref_mod))
            t.regular_ok = t.regular_ok and is_other
            t.other_raised = is_other and not memory_error(line)
            break
        t.forbidden_per_trial.append(check_trial_runtime(rec, label, ev))
        if rec.output_problem:
            t.regular_ok = False
            continue
        if ready is not None:
            refs, refs64 = ready.refs, ready.refs64
            pooled = ready.pooled if ready.pooled is not None else plan.pooled
        else:
            with torch.no_grad():
                refs = reference_outputs(model, inputs, plan.selects)
            ex.give_way()  # (three pieces of device work a trial: a timer waits for one, not for the trial's)
            refs64, pooled = reference64_judged(model64, inputs, plan.selects, plan.pooled, is_other)
            ex.give_way()
        ref_fp = [fingerprint(r) for r in refs if isinstance(r, torch.Tensor)]
        ref_repeats = any(len(p) == len(ref_fp) and all(same_fingerprint(a, b) for a, b in zip(p, ref_fp))
                          for p in ref_prev)
        ref_prev.append(ref_fp)
        name = f"out_{rec.index}.pt"
        with ex.aside():  # host work: the file's seal checked (a digest of its bytes) and the file read
            why = ex.ledger.unsealed(job_dir, name) if rec.output_file == name else f"{rec.output_file!r} is not {name}"
            outs, unreadable = ([], "") if why else load_outputs(ex.ledger, job_dir, name)
            ex.ledger.release(name)
        if why:
            check_sealed(label, why, ev)
            t.regular_ok = False
            continue
        if unreadable:  # sealed as it arrived, but not what the child's own code writes: written from its process
            ev.add(cheats.C11, f"{label}: the output file your process handed the verifier {unreadable}: the files "
                               "the verifier reads are its evidence, not yours to write (docs/ANTI_CHEAT.md class 52).")
            t.regular_ok = False
            continue
        here = Digest(rec.ref_digest) if rec.ref_digest else None
        t.checked += 1
        near: list = []
        ok = check_outputs(outs, refs, refs64, inputs, here, label, cfg, plan.ref_mod, ex.poison, prev, ev, t.errs,
                           ref_repeats, pooled, near)
        del outs, here, refs, refs64, inputs
        if ok:
            t.passed += 1
        elif is_other:
            t.other_failed = True
            t.other_near = bool(near) and all(near)
        else:
            t.regular_ok = False
    check_fallback_across_trials(t.forbidden_per_trial, ev)
    return t
