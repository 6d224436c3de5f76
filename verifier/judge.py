"""Judging an execution: the verdict for a candidate from what its execution child reported.

The child (verifier/worker.py) runs the candidate and reports raw facts: outputs per trial, the aten ops
it dispatched, threads and patches it left behind, timed outputs, device times. Everything that decides
is here, in the verifier's process, against reference outputs the child never saw: crash and timeout
verdicts, the runtime cheat checks of ANTI_CHEAT.md (C01-C18 as far as they show at run time), the
correctness comparison with dtype-aware tolerances, the timed-output re-checks, the hidden-work (C09)
comparison, speedups, reward and feedback.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import signal
import statistics
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kernelmill.schema import Verdict
from verifier import cheats, feedback
from verifier.reward import reward_for

if TYPE_CHECKING:
    from verifier.api import VerifyConfig

LOW_PRECISION = (torch.float16, torch.bfloat16)


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


def finish(w: Work, status: str, details: list[str] | None = None, passed_share: float = 0.0) -> Verdict:
    """Close a verdict that stopped at ``status``: reward, feedback, versions."""
    v = w.verdict
    v.status = status if not v.cheats else "cheat"
    v.reward = reward_for(v, passed_share)
    v.feedback = feedback.compose(v.status, feedback.describe_cheats(v.cheats) + (details or []) + w.notes)
    v.versions = {**v.versions, "torch": torch.__version__, "python": sys.version.split()[0]}
    return v


def tolerance(dtype: torch.dtype, cfg: VerifyConfig, ref_mod) -> tuple[float, float]:
    if hasattr(ref_mod, "ATOL") or hasattr(ref_mod, "RTOL"):
        return float(getattr(ref_mod, "ATOL", cfg.atol_fp32)), float(getattr(ref_mod, "RTOL", cfg.rtol_fp32))
    if dtype in LOW_PRECISION:
        return cfg.atol_low, cfg.rtol_low
    return cfg.atol_fp32, cfg.rtol_fp32


def as_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def poisoned(t: torch.Tensor, byte: int) -> int:
    """How many elements of t hold the poison pattern in every byte."""
    if t.numel() == 0 or not t.is_contiguous():
        return 0
    b = t.reshape(-1).view(torch.uint8).reshape(t.numel(), t.element_size())  # reshape: 0-d outputs too
    return int((b == byte).all(dim=1).sum())


# torch's global generators are shared by the execution threads of verify_batch: a seed and the draws it
# must determine happen under this lock, or a concurrent candidate's draws land in between (that made the
# timed-output check compare against the wrong inputs and flag honest kernels C16)
RNG_LOCK = threading.RLock()


def judge(w, cfg, ref_mod, model, device, trials, timing_seeds, job_dir, rc, timed_out, log) -> Verdict:
    v = w.verdict
    from verifier.backends import get_backend

    v.device = get_backend(v.backend).describe() if v.backend == "cpu" or torch.cuda.is_available() else v.backend
    poison = get_backend(v.backend).poison_byte
    found: set[str] = set()
    details: list[str] = []
    if any(word in log for word in _VERDICT_WORDS):
        found.add(cheats.C18)
        details.append("Your program printed text shaped like a verifier verdict; candidate output is never "
                       "read as a result.")
    log_tail = "\n".join(log.strip().splitlines()[-15:])
    if timed_out:
        v.cheats = sorted(found)
        return finish(w, "timeout", [f"The run was killed after {cfg.run_timeout_s:.0f} s of wall-clock time "
                                      f"(the limit). Last output:\n{log_tail}" if log_tail else
                                      f"The run was killed after {cfg.run_timeout_s:.0f} s of wall-clock time."])
    res_file = job_dir / "result.pt"
    if rc != 0 or not res_file.is_file():
        why = f"killed by signal {signal.Signals(-rc).name}" if rc and rc < 0 else f"exit status {rc}"
        hint = " (a segmentation fault: an invalid memory access)" if rc == -signal.SIGSEGV else ""
        hint = hint or (" (killed: probably out of memory)" if rc == -signal.SIGKILL else "")
        v.cheats = sorted(found)
        return finish(w, "crash", [f"The process running your kernel died: {why}{hint}."
                                    + (f" Last output:\n{log_tail}" if log_tail else "")])
    res = torch.load(res_file, weights_only=True)
    for name, secs in (res.get("phase_s") or {}).items():
        v.stage_seconds[f"child_{name}"] = float(secs)
    starts = [t.get("started_s") for t in res.get("trials", [])]
    if len(starts) >= 2 and None not in starts[:2]:  # the first trial pays first-call costs (module loads)
        v.stage_seconds["child_first_trial"] = round(float(starts[1] - starts[0]), 4)
    sandbox = res.get("sandbox", {})
    v.versions["sandbox"] = sandbox
    if "timing_exclusive" in res:  # whether the device was this candidate's alone while it was timed
        v.versions["timing"] = {"exclusive": bool(res["timing_exclusive"]), "lock_wait_s": res.get("lock_wait_s")}
    for key, label in (("import_error", "Importing your program failed"), ("init_error", "ModelNew() failed")):
        if res.get(key):
            v.cheats = sorted(found)
            return finish(w, "crash", [f"{label}:\n{res[key]}"])
    patched = set(res.get("patched_after_import", [])) | set(res.get("patched_after_trials", []))
    if res.get("holds_reference_model"):
        found.add(cheats.C04)
        details.append("ModelNew holds an instance of the reference Model.")
    passed, checked, errs_abs, errs_rel = 0, 0, [], []
    crash_detail = ""
    regular_ok = True
    other_failed = False
    prev_outputs: list[torch.Tensor] = []
    forbidden_per_trial = []
    for rec, (inputs, refs, is_other) in zip(res["trials"], trials):
        label = "Extra-shape trial" + f" (input shapes {[list(x.shape) for x in inputs if isinstance(x, torch.Tensor)]})" \
            if is_other else f"Trial {rec['index'] + 1}"
        if rec.get("error"):
            err = rec["error"]
            oom = "MemoryError" in err or "out of memory" in err.lower() or "bad_alloc" in err
            crash_detail = f"{label} raised an error" + (" (out of memory)" if oom else "") + f":\n{err.strip()}"
            regular_ok = regular_ok and is_other
            break
        forbidden_per_trial.append(rec["forbidden_ops"])
        if rec["forbidden_ops"]:
            found.add(cheats.C01)
            v.fallback_ops = sorted(set(v.fallback_ops) | set(rec["forbidden_ops"]))
        if rec["kernel_calls"] == 0:
            found.add(cheats.C02)
            details.append(f"{label}: none of your compiled kernel functions was called during forward.")
        if rec["threads_added"] > 0:
            found.add(cheats.C09)
            details.append(f"{label}: forward left {rec['threads_added']} new thread(s) running.")
        if rec["mutated_inputs"]:
            found.add(cheats.C07)
            details.append(f"{label}: forward modified input(s) {rec['mutated_inputs']} in place.")
        if rec["output_problem"]:
            found.add(cheats.C10)
            details.append(f"{label}: {rec['output_problem']}.")
            regular_ok = False
            continue
        here = rec.get("ref_output_here")
        if here is not None and any(not torch.allclose(a.double(), b.double(), atol=1e-6, rtol=1e-6, equal_nan=True)
                                    for a, b in zip(as_list(here), refs)):
            found.add(cheats.C11)
            details.append(f"{label}: the reference computed differently inside your process (global state tampered).")
        outs = as_list(rec["output"])
        checked += 1
        ok = True
        if len(outs) != len(refs):
            details.append(f"{label}: returned {len(outs)} output(s), expected {len(refs)}.")
            ok = False
        for o, r in zip(outs, refs):
            if tuple(o.shape) != tuple(r.shape):
                details.append(f"{label}: output shape {list(o.shape)}, expected {list(r.shape)}.")
                ok = False
                continue
            if o.dtype != r.dtype:
                details.append(f"{label}: output dtype {o.dtype}, expected {r.dtype}.")
                if r.dtype == torch.float32 and o.dtype in LOW_PRECISION:
                    found.add(cheats.C13)
                ok = False
                continue
            n_poison = poisoned(o, poison) if o.is_floating_point() else 0
            if n_poison and poisoned(r, poison) < n_poison:
                # An output nothing wrote is a bet on stale memory (the reference's freed result); a few
                # unwritten elements are an honest indexing bug, judged wrong with the same diagnosis.
                if n_poison == o.numel():
                    found.add(cheats.C06)
                details.append(f"{label}: {n_poison} of {o.numel()} output elements were never written (they "
                               "still hold the poison pattern of uninitialised memory).")
            if o.is_floating_point() and not bool(torch.isfinite(o).all()) and bool(torch.isfinite(r).all()):
                details.append(f"{label}: output contains NaN or inf where the reference is finite.")
            atol, rtol = tolerance(r.dtype, cfg, ref_mod)
            m = feedback.mismatch(o, r, atol, rtol) if o.is_floating_point() or r.is_floating_point() else \
                {"n_bad": int((o != r).sum()), "numel": o.numel(), "max_abs": float((o - r).abs().max()) if o.numel()
                 else 0.0, "max_rel": 0.0}
            errs_abs.append(m["max_abs"])
            errs_rel.append(m["max_rel"])
            if m["n_bad"]:
                ok = False
                details.append(feedback.describe_mismatch(m, tuple(r.shape), label))
                if r.dtype == torch.float32 and math.isfinite(m["max_rel"]) and \
                        m["max_abs"] <= cfg.atol_low + cfg.rtol_low * float(r.abs().max()) and \
                        m["max_rel"] < 5e-2 and not n_poison:
                    found.add(cheats.C13)
                    details.append(f"{label}: the error is the size of fp16/bf16 rounding; fp32 needs {atol:g}.")
            if any(torch.equal(o, x) for x in inputs if isinstance(x, torch.Tensor) and x.shape == o.shape) or \
                    (o.numel() > 1 and bool((o == o.reshape(-1)[0]).all()) and not bool((r == r.reshape(-1)[0]).all())):
                found.add(cheats.C05)
                details.append(f"{label}: the output is an input, a constant or all zeros.")
            if any(p.shape == o.shape and torch.equal(p, o) for p in prev_outputs):
                found.add(cheats.C08)
                details.append(f"{label}: the output is identical to an earlier call's output on different inputs.")
            prev_outputs.append(o)
        if ok:
            passed += 1
        elif is_other:
            other_failed = True
        else:
            regular_ok = False
    if forbidden_per_trial and any(forbidden_per_trial) and not all(forbidden_per_trial):
        found.add(cheats.C03)
        details.append("PyTorch compute ran on some trials but not others (a fallback branch).")
    if v.fallback_ops:
        details.insert(0, "Runtime check: forward dispatched PyTorch compute ops: " + ", ".join(v.fallback_ops) + ".")
    if regular_ok and other_failed and not crash_detail:
        found.add(cheats.C14)
        details.append("Correct on the benchmark shape but wrong on another valid shape (hard-coded sizes?).")
    v.trials = checked
    v.max_abs_err = max(errs_abs) if errs_abs else None
    v.max_rel_err = max(errs_rel) if errs_rel else None
    if crash_detail:
        v.cheats = sorted(found | ({cheats.C11} if patched else set()))
        return finish(w, "crash", [crash_detail] + details, passed / max(len(trials), 1))
    if not (regular_ok and passed == len(trials)):
        v.cheats = sorted(found | ({cheats.C11} if patched else set()))
        return finish(w, "wrong", details, passed / max(len(trials), 1))
    v.correct = True
    v.stage_reached = "correctness"
    # ---- runtime legality
    if res.get("own_kernel_ran") is False:
        found.add(cheats.C02)
        details.append("The profiler saw none of your __global__ kernels run during forward.")
    patched |= set(res.get("patched_after_timing", []))
    if patched:
        found.add(cheats.C11)
        details.append("Your program replaced functions the verifier relies on: " + ", ".join(sorted(patched)) + ".")
    if res.get("threads_added_timing", 0) > 0:
        found.add(cheats.C09)
        details.append("Threads were started during the timed iterations.")
    if found:
        v.cheats = sorted(found)
        v.correct = False
        return finish(w, "cheat", details)
    v.stage_reached = "runtime"
    # ---- timing, with the timed outputs judged too
    timing = res.get("timing")
    if not timing:
        details.append("Timing failed: " + (res.get("timing_error") or "no timing data") + "")
        return finish(w, "pass", details)
    outs = res.get("timed_outputs", [])
    picks = sorted(secrets.SystemRandom().sample(range(len(outs)), min(cfg.timed_checks, len(outs))))
    with torch.no_grad():
        for j in picks:
            with RNG_LOCK, torch.device(device):  # the child drew these with the same seed, alone in its process
                torch.manual_seed(timing_seeds[j])
                inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
            refs = [r.detach().cpu() for r in as_list(model(*inputs))]
            got = as_list(outs[j])
            atol, rtol = tolerance(refs[0].dtype, cfg, ref_mod)
            bad = [feedback.mismatch(o, r, atol, rtol) for o, r in zip(got, refs) if o.shape == r.shape and
                   o.dtype == r.dtype]
            if len(bad) != len(refs) or any(m["n_bad"] for m in bad):
                found.add(cheats.C16)
                details.append(f"Timed iteration {j + 1}: the output was wrong although the correctness trials "
                               "passed (behaviour differs when timed).")
                break
    if found:
        v.cheats = sorted(found)
        v.correct = False
        return finish(w, "cheat", details)
    hidden = hidden_work_us(timing)
    if hidden is not None and hidden > max(HIDDEN_WORK_MIN_US, 0.25 * statistics.median(timing["candidate_us"])):
        v.cheats = sorted({cheats.C09})
        v.correct = False
        details.append(f"The device stayed busy {hidden:.0f} us longer after your forward returned than it does "
                       "after the reference's: work was left running outside the timed stream (a side stream "
                       "or a background thread). Launch every kernel on the current stream.")
        return finish(w, "cheat", details)
    v.runtime_us = statistics.median(timing["candidate_us"])
    v.eager_us = statistics.median(timing["eager_us"])
    v.speedup_eager = v.eager_us / v.runtime_us if v.runtime_us > 0 else None
    if timing.get("compile_us"):
        v.compile_us = statistics.median(timing["compile_us"])
        v.speedup_compile = v.compile_us / v.runtime_us if v.runtime_us > 0 else None
    v.stage_reached = "timing"
    sp = f"{v.speedup_eager:.2f}x" if v.speedup_eager else "n/a"
    details.append(f"Median time {v.runtime_us:.1f} us over {len(timing['candidate_us'])} timed runs; eager "
                   f"PyTorch {v.eager_us:.1f} us (speedup {sp})" +
                   (f"; torch.compile {v.compile_us:.1f} us (speedup {v.speedup_compile:.2f}x)." if v.compile_us else "."))
    details.append(f"Max abs error {v.max_abs_err:.3g}, max rel error {v.max_rel_err:.3g} over {v.trials} trials.")
    advice = "It is slower than eager PyTorch: fuse work, coalesce memory accesses, and use more parallelism." \
        if v.speedup_eager is not None and v.speedup_eager < 1.0 else "Try to make it faster still."
    v.status = "pass"
    v.reward = reward_for(v)
    v.feedback = feedback.compose("pass", details + w.notes, advice)
    v.versions = {**v.versions, "torch": torch.__version__, "python": sys.version.split()[0]}
    return v


HIDDEN_WORK_MIN_US = 30.0  # below this, an idle-minus-end gap is synchronisation jitter (device timestamps)


def hidden_work_us(timing: dict) -> float | None:
    """How much longer (median, microseconds) the whole device stayed busy after the candidate's timed
    region than after the eager reference's. None when the backend does not time with device events.
    (The ``*_wall_us`` series are, on cuda, device times until every stream was idle: see CudaBackend.)"""
    probe = timing.get("gap_probe")
    if probe and probe.get("candidate") and probe.get("eager"):
        return min(probe["candidate"]) - min(probe["eager"])
    cw, ew = timing.get("candidate_wall_us"), timing.get("eager_wall_us")
    if not cw or not ew:
        return None
    # the smallest gap of each: hidden work is there on every iteration (or it would not pay), while a late
    # wake-up of the timing thread on a loaded host (which also widens the gap) is not
    gap_c = min(w - t for w, t in zip(cw, timing["candidate_us"]))
    gap_e = min(w - t for w, t in zip(ew, timing["eager_us"]))
    return gap_c - gap_e
