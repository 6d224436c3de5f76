"""The verifier's Python API: verify one candidate, or a batch with compiling and executing overlapped.

A candidate travels: extract -> static legality -> compile (CompilePool, keyed build dirs) ->
execution child (verifier/worker.py: trials, runtime checks, timing) -> judge (here: outputs against
reference outputs computed in THIS process, which the child never sees) -> reward and feedback.

Guarantees: every call returns one Verdict per candidate, whatever the candidate does (crash, hang,
memory blow-up, garbage output); ``stage_reached`` is the last stage it got through and ``status`` why
it stopped. Only problems of the verifier itself (a reference that does not run, no compiler) raise.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from kernelmill.errors import InputError
from kernelmill.schema import Candidate, Task, Verdict
from verifier import cheats, feedback
from verifier.build import CompilePool, first_errors
from verifier.devlock import DeviceLock
from verifier.processes import _job_root, _run_child
from verifier.extract import check_candidate_shape, extract_code
from verifier.reward import reward_for
from verifier.static import scan

LOW_PRECISION = (torch.float16, torch.bfloat16)
_VERDICT_WORDS = ('"status"', '"correct"', '"reward"', '"stage_reached"', "'correct'", "'status'")


@dataclass
class VerifyConfig:
    trials: int = 5
    timing_trials: int = 20
    warmup: int = 3
    compile_timeout_s: float = 300.0
    run_timeout_s: float = 120.0
    memory_limit_gb: float = 16.0
    compile_workers: int = 0
    exec_workers: int = 1
    atol_fp32: float = 1e-4
    rtol_fp32: float = 1e-4
    atol_low: float = 1e-2
    rtol_low: float = 1e-2
    time_torch_compile: bool = True
    other_shape: bool = True
    timed_checks: int = 5
    allow_child_compile: bool = True
    build_dir: str = ""
    keep_jobs: bool = False
    warm_device_ms: float = 50.0  # cuda: device kept busy this long before each model's timing (clocks up)
    gap_probes: int = 10  # cuda: interleaved candidate/reference calls measuring work left after the timed region
    hide_launch_us: float = 50.0  # cuda: a device-side wait queued before each timed call (0: off), see backends
    warm_processes: int = -1  # cuda: single-use processes started ahead (-1: as many as exec_workers; 0: none)

    @classmethod
    def from_dict(cls, d: dict | None) -> "VerifyConfig":
        """A config from the [verify] section; unknown keys are ignored, missing keys keep defaults."""
        names = {f.name: f for f in dataclasses.fields(cls)}
        kw = {}
        for k, v in (d or {}).items():
            if k in names:
                kw[k] = type(getattr(cls(), k))(v)
        cfg = cls(**kw)
        if cfg.trials < 5:
            raise InputError("verify.trials", f"must be at least 5, got {cfg.trials}")
        return cfg

    def build_root(self) -> Path:
        if self.build_dir:
            return Path(self.build_dir).expanduser()
        home = Path(os.environ.get("KERNELMILL_HOME", Path.home() / ".cache" / "kernelmill"))
        return home / f"verify-builds-{torch.__version__}"


def resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if backend not in ("cpu", "cuda"):
        raise InputError("--backend", f"unknown backend {backend!r}; use cpu, cuda or auto (musa is planned)")
    if backend == "cuda" and not torch.cuda.is_available():
        raise InputError("--backend cuda", "no CUDA device is visible to torch on this machine")
    return backend


def load_reference(reference_code: str, name: str = "task"):
    """The task program as a module; InputError when it is not a runnable KernelBench program."""
    mod = types.ModuleType("km_reference_parent")
    try:
        exec(compile(reference_code, f"<{name}>", "exec", dont_inherit=True), mod.__dict__)
    except Exception as e:  # noqa: BLE001
        raise InputError(name, f"the task program does not run: {type(e).__name__}: {e}") from None
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, attr):
            raise InputError(name, f"the task program defines no {attr}")
    return mod


# ---------------------------------------------------------------------------- stages 1-3


@dataclass
class _Work:
    verdict: Verdict
    code: str = ""
    reference_code: str = ""
    specs: list = dataclasses.field(default_factory=list)
    started: float = 0.0
    notes: list = dataclasses.field(default_factory=list)


def _finish(w: _Work, status: str, details: list[str] | None = None, passed_share: float = 0.0) -> Verdict:
    v = w.verdict
    v.status = status if not v.cheats else "cheat"
    v.reward = reward_for(v, passed_share)
    v.feedback = feedback.compose(v.status, feedback.describe_cheats(v.cheats) + (details or []) + w.notes)
    v.versions = {**v.versions, "torch": torch.__version__, "python": sys.version.split()[0]}
    return v


def _front(reference_code: str, candidate_text: str, backend: str, task_id: str, candidate_id: str) -> _Work:
    """Extract and static stages; the returned work's verdict has a status when it stopped here."""
    t0 = time.perf_counter()
    v = Verdict(candidate_id=candidate_id, task_id=task_id, backend=backend)
    w = _Work(verdict=v, reference_code=reference_code, started=t0)
    code = extract_code(candidate_text)
    problems = check_candidate_shape(code, backend)
    v.stage_seconds["extract"] = round(time.perf_counter() - t0, 4)
    if problems:
        if any("never launched" in p for p in problems):
            v.cheats = [cheats.C02]  # a kernel defined but never launched is row 2, not a format slip
        _finish(w, "extract_error", problems)
        return w
    w.code = code
    v.stage_reached = "extract"
    t1 = time.perf_counter()
    report = scan(code, backend)
    v.stage_seconds["static"] = round(time.perf_counter() - t1, 4)
    if report.findings:
        v.cheats = report.cheat_codes
        v.fallback_ops = report.fallback_ops
        _finish(w, "cheat", [f"Static check, {f}." for f in report.findings])
        return w
    unresolved = [s for s in report.extensions if not s.resolved]
    if unresolved and not ALLOW_UNRESOLVED[0]:
        _finish(w, "illegal", [f"line {s.line}: {s.problem}" for s in unresolved])
        return w
    v.stage_reached = "static"
    w.specs = [s.args for s in report.extensions if s.resolved]
    return w


ALLOW_UNRESOLVED = [True]


def _compile_done(w: _Work, results: list) -> bool:
    """Record compile results; False (and the verdict finished) when any spec failed."""
    v = w.verdict
    v.stage_seconds["compile"] = round(sum(r.seconds for r in results if not r.cached), 3)
    v.stage_seconds["compile_cached"] = all(r.cached for r in results) if results else True
    bad = [r for r in results if not r.ok]
    if bad:
        v.compile_log = bad[0].log[-20000:]
        _finish(w, "compile_error", ["First compiler errors:\n" + first_errors(bad[0].log)])
        return False
    v.compiled = True
    v.stage_reached = "compile"
    return True


# ---------------------------------------------------------------------------- stages 4-6


def _other_shape_inputs(inputs: list, model, ref_out) -> list | None:
    """The inputs with the first dimension changed (S -> S + S//2 + 1) where the reference accepts it."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor) and x.dim() >= 1]
    if not tensors:
        return None
    s = tensors[0].shape[0]
    s2 = s + s // 2 + 1
    for mode in ("all_matching", "first_only"):
        new = []
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == s and \
                    (mode == "all_matching" or x is tensors[0]):
                shape = (s2, *x.shape[1:])
                new.append(torch.randn(shape, dtype=x.dtype) if x.is_floating_point() else
                           torch.randint(0, 8, shape, dtype=x.dtype))
            else:
                new.append(x)
        try:
            with torch.no_grad():
                out = model(*new)
            if isinstance(out, torch.Tensor) and isinstance(ref_out, torch.Tensor) and out.shape != ref_out.shape:
                return new
        except Exception:  # noqa: BLE001
            continue
    return None


def _tolerance(dtype: torch.dtype, cfg: VerifyConfig, ref_mod) -> tuple[float, float]:
    if hasattr(ref_mod, "ATOL") or hasattr(ref_mod, "RTOL"):
        return float(getattr(ref_mod, "ATOL", cfg.atol_fp32)), float(getattr(ref_mod, "RTOL", cfg.rtol_fp32))
    if dtype in LOW_PRECISION:
        return cfg.atol_low, cfg.rtol_low
    return cfg.atol_fp32, cfg.rtol_fp32


def _as_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _poisoned(t: torch.Tensor, byte: int) -> int:
    """How many elements of t hold the poison pattern in every byte."""
    if t.numel() == 0 or not t.is_contiguous():
        return 0
    b = t.reshape(-1).view(torch.uint8).reshape(t.numel(), t.element_size())  # reshape: 0-d outputs too
    return int((b == byte).all(dim=1).sum())


# torch's global generators are shared by the execution threads of verify_batch: a seed and the draws it
# must determine happen under this lock, or a concurrent candidate's draws land in between (that made the
# timed-output check compare against the wrong inputs and flag honest kernels C16)
_RNG_LOCK = threading.RLock()


def _lock_wait_s(cfg: "VerifyConfig") -> float:
    """Longest wait for the device lock (verifier/devlock.py): a share of the run timeout, so that a
    neighbour holding the device can delay a candidate's timing but never push it into a timeout."""
    return min(30.0, 0.2 * cfg.run_timeout_s)


def _execute(w: _Work, backend: str, cfg: VerifyConfig, build_root: Path) -> Verdict:
    """Correctness, runtime legality and timing of a compiled candidate; judged here."""
    v = w.verdict
    device = "cuda" if backend == "cuda" else "cpu"
    ref_mod = load_reference(w.reference_code, v.task_id or "task")
    rng = secrets.SystemRandom()
    init_seed = rng.randrange(1, 2**31)
    trial_seeds = [rng.randrange(1, 2**31) for _ in range(cfg.trials)]
    timing_seeds = [rng.randrange(1, 2**31) for _ in range(cfg.timing_trials)]
    init = ref_mod.get_init_inputs()
    job_dir = Path(tempfile.mkdtemp(prefix="km-job-", dir=_job_root()))
    t0 = time.perf_counter()
    trials = []  # (inputs on cpu, reference outputs on cpu, is_other_shape)
    # the reference runs here share the device with other candidates' trials, never with a timing phase
    with DeviceLock(str(build_root / ".timing.lock")) as lock:
        lock.acquire(False, _lock_wait_s(cfg))
        with _RNG_LOCK:  # the global generator: another execution thread must not draw between seed and use
            torch.manual_seed(init_seed)
            model = ref_mod.Model(*init).to(device).eval()
        with torch.no_grad():
            for seed in trial_seeds:
                with _RNG_LOCK:
                    torch.manual_seed(seed)
                    inputs = ref_mod.get_inputs()
                ref = model(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs])
                trials.append((inputs, [r.detach().cpu() for r in _as_list(ref)], False))
            if cfg.other_shape and trials:
                with _RNG_LOCK:
                    torch.manual_seed(rng.randrange(1, 2**31))
                    cpu_model = model if device == "cpu" else None
                    probe = cpu_model or ref_mod.Model(*init).eval()
                if device != "cpu":
                    probe.load_state_dict({k: t.cpu() for k, t in model.state_dict().items()})
                other = _other_shape_inputs(trials[0][0], probe, _as_list(trials[0][1])[0])
                if other is not None:
                    ref = model(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in other])
                    trials.append((other, [r.detach().cpu() for r in _as_list(ref)], True))
    job = {"backend": backend, "build_root": str(build_root), "candidate_code": w.code,
           "reference_code": w.reference_code, "init_seed": init_seed, "n_trials": len(trials),
           "timing_trials": cfg.timing_trials, "timing_seeds": timing_seeds, "warmup": cfg.warmup,
           "hide_launch_us": cfg.hide_launch_us, "gap_probes": cfg.gap_probes, "warm_device_ms": cfg.warm_device_ms,
           "time_torch_compile": cfg.time_torch_compile, "memory_limit_gb": cfg.memory_limit_gb,
           "allow_child_compile": cfg.allow_child_compile, "timing_lock": str(build_root / ".timing.lock"),
           "lock_wait_s": _lock_wait_s(cfg)}
    import json

    (job_dir / "job.json").write_text(json.dumps(job))
    for i, (inputs, _, _) in enumerate(trials):
        torch.save({"inputs": inputs}, job_dir / f"trial_{i}.pt")
    t_child = time.perf_counter()
    v.stage_seconds["execute_prepare"] = round(t_child - t0, 3)
    rc, timed_out, log = _run_child(job_dir, backend, cfg.run_timeout_s + (cfg.compile_timeout_s
                                                                          if cfg.allow_child_compile and
                                                                          not w.specs else 0),
                                    warm=cfg.exec_workers if cfg.warm_processes < 0 else cfg.warm_processes)
    v.stage_seconds["execute_child"] = round(time.perf_counter() - t_child, 3)
    v.stage_seconds["execute"] = round(time.perf_counter() - t0, 3)
    try:
        with DeviceLock(str(build_root / ".timing.lock")) as lock:
            lock.acquire(False, _lock_wait_s(cfg))  # the judge re-runs the reference on picked timed inputs
            return _judge(w, cfg, ref_mod, model, device, trials, timing_seeds, job_dir, rc, timed_out, log)
    finally:
        if not cfg.keep_jobs:
            shutil.rmtree(job_dir, ignore_errors=True)


def _judge(w, cfg, ref_mod, model, device, trials, timing_seeds, job_dir, rc, timed_out, log) -> Verdict:
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
        return _finish(w, "timeout", [f"The run was killed after {cfg.run_timeout_s:.0f} s of wall-clock time "
                                      f"(the limit). Last output:\n{log_tail}" if log_tail else
                                      f"The run was killed after {cfg.run_timeout_s:.0f} s of wall-clock time."])
    res_file = job_dir / "result.pt"
    if rc != 0 or not res_file.is_file():
        why = f"killed by signal {signal.Signals(-rc).name}" if rc and rc < 0 else f"exit status {rc}"
        hint = " (a segmentation fault: an invalid memory access)" if rc == -signal.SIGSEGV else ""
        hint = hint or (" (killed: probably out of memory)" if rc == -signal.SIGKILL else "")
        v.cheats = sorted(found)
        return _finish(w, "crash", [f"The process running your kernel died: {why}{hint}."
                                    + (f" Last output:\n{log_tail}" if log_tail else "")])
    res = torch.load(res_file, weights_only=True)
    for name, secs in (res.get("phase_s") or {}).items():
        v.stage_seconds[f"child_{name}"] = float(secs)
    sandbox = res.get("sandbox", {})
    v.versions["sandbox"] = sandbox
    if "timing_exclusive" in res:  # whether the device was this candidate's alone while it was timed
        v.versions["timing"] = {"exclusive": bool(res["timing_exclusive"]), "lock_wait_s": res.get("lock_wait_s")}
    for key, label in (("import_error", "Importing your program failed"), ("init_error", "ModelNew() failed")):
        if res.get(key):
            v.cheats = sorted(found)
            return _finish(w, "crash", [f"{label}:\n{res[key]}"])
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
                                    for a, b in zip(_as_list(here), refs)):
            found.add(cheats.C11)
            details.append(f"{label}: the reference computed differently inside your process (global state tampered).")
        outs = _as_list(rec["output"])
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
            n_poison = _poisoned(o, poison) if o.is_floating_point() else 0
            if n_poison and _poisoned(r, poison) < n_poison:
                # An output nothing wrote is a bet on stale memory (the reference's freed result); a few
                # unwritten elements are an honest indexing bug, judged wrong with the same diagnosis.
                if n_poison == o.numel():
                    found.add(cheats.C06)
                details.append(f"{label}: {n_poison} of {o.numel()} output elements were never written (they "
                               "still hold the poison pattern of uninitialised memory).")
            if o.is_floating_point() and not bool(torch.isfinite(o).all()) and bool(torch.isfinite(r).all()):
                details.append(f"{label}: output contains NaN or inf where the reference is finite.")
            atol, rtol = _tolerance(r.dtype, cfg, ref_mod)
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
        return _finish(w, "crash", [crash_detail] + details, passed / max(len(trials), 1))
    if not (regular_ok and passed == len(trials)):
        v.cheats = sorted(found | ({cheats.C11} if patched else set()))
        return _finish(w, "wrong", details, passed / max(len(trials), 1))
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
        return _finish(w, "cheat", details)
    v.stage_reached = "runtime"
    # ---- timing, with the timed outputs judged too
    timing = res.get("timing")
    if not timing:
        details.append("Timing failed: " + (res.get("timing_error") or "no timing data") + "")
        return _finish(w, "pass", details)
    outs = res.get("timed_outputs", [])
    picks = sorted(secrets.SystemRandom().sample(range(len(outs)), min(cfg.timed_checks, len(outs))))
    with torch.no_grad():
        for j in picks:
            with _RNG_LOCK, torch.device(device):  # the child drew these with the same seed, alone in its process
                torch.manual_seed(timing_seeds[j])
                inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
            refs = [r.detach().cpu() for r in _as_list(model(*inputs))]
            got = _as_list(outs[j])
            atol, rtol = _tolerance(refs[0].dtype, cfg, ref_mod)
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
        return _finish(w, "cheat", details)
    hidden = _hidden_work_us(timing)
    if hidden is not None and hidden > max(HIDDEN_WORK_MIN_US, 0.25 * statistics.median(timing["candidate_us"])):
        v.cheats = sorted({cheats.C09})
        v.correct = False
        details.append(f"The device stayed busy {hidden:.0f} us longer after your forward returned than it does "
                       "after the reference's: work was left running outside the timed stream (a side stream "
                       "or a background thread). Launch every kernel on the current stream.")
        return _finish(w, "cheat", details)
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


def _hidden_work_us(timing: dict) -> float | None:
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


# ---------------------------------------------------------------------------- public API


def _check_toolchain(backend: str) -> None:
    if shutil.which(os.environ.get("CXX", "c++")) is None and shutil.which("g++") is None:
        raise InputError("compiler", "no C++ compiler (c++/g++) on PATH: the verifier cannot build any candidate")
    if backend == "cuda":
        from torch.utils.cpp_extension import CUDA_HOME

        if not CUDA_HOME:
            raise InputError("nvcc", "CUDA_HOME is not set and nvcc was not found: cuda candidates cannot be built")


def verify_candidate(reference_code: str, candidate_text: str, *, backend: str = "cpu",
                     config: VerifyConfig | None = None, task_id: str = "", candidate_id: str = "") -> Verdict:
    """Verify one candidate against a task program; always returns a Verdict for the candidate.

    Raises InputError only for problems of the verifier's own inputs (a task program that does not run,
    an unknown backend, no compiler)."""
    cfg = config or VerifyConfig()
    backend = resolve_backend(backend)
    load_reference(reference_code, task_id or "task")
    _check_toolchain(backend)
    w = _front(reference_code, candidate_text, backend, task_id, candidate_id)
    if w.verdict.status:
        return _stamp(w)
    with CompilePool(cfg.build_root(), workers=1, timeout_s=cfg.compile_timeout_s) as pool:
        results = [pool.submit(s).result() for s in w.specs]
    if not _compile_done(w, results):
        return _stamp(w)
    _execute(w, backend, cfg, cfg.build_root())
    return _stamp(w)


def _stamp(w: _Work) -> Verdict:
    w.verdict.stage_seconds["total"] = round(time.perf_counter() - w.started, 3)
    return w.verdict


def verify_batch(items: Sequence[tuple[Task, Candidate]], *, config: VerifyConfig | None = None,
                 compile_workers: int | None = None, on_verdict: Callable[[int, Verdict], None] | None = None,
                 ) -> list[Verdict]:
    """Verify many candidates: extraction and static checks up front, all extensions submitted to one
    compile pool at once, and each candidate executed as soon as its builds are done (up to
    ``config.exec_workers`` execution children at a time; their timing phases serialise on a lock).

    Returns verdicts in the order of ``items``; ``on_verdict(i, verdict)`` is called as each finishes
    (from a worker thread, one call at a time)."""
    cfg = config or VerifyConfig()
    n = len(items)
    verdicts: list[Verdict | None] = [None] * n
    if not n:
        return []
    backends = {resolve_backend(c.backend or "cpu") for _, c in items}
    for b in backends:
        _check_toolchain(b)
    workers = compile_workers if compile_workers is not None else (cfg.compile_workers or os.cpu_count() or 1)
    done_lock = threading.Lock()

    def deliver(i: int, w: _Work) -> None:
        v = _stamp(w)
        with done_lock:
            verdicts[i] = v
            if on_verdict:
                on_verdict(i, v)

    ready: queue.Queue = queue.Queue()
    works: list[_Work] = []
    pending = [0]
    with CompilePool(cfg.build_root(), workers=max(1, workers), timeout_s=cfg.compile_timeout_s) as pool:
        for i, (task, cand) in enumerate(items):
            backend = resolve_backend(cand.backend or "cpu")
            w = _front(task.reference_code, cand.code or cand.response, backend, task.task_id, cand.candidate_id)
            works.append(w)
            if w.verdict.status:
                deliver(i, w)
                continue
            futs = [pool.submit(s) for s in w.specs]
            pending[0] += 1
            if not futs:
                ready.put((i, []))
                continue

            def when_built(_f, i=i, futs=futs):
                if all(f.done() for f in futs):
                    with done_lock:
                        if getattr(works[i], "_queued", False):
                            return
                        works[i]._queued = True  # type: ignore[attr-defined]
                    ready.put((i, futs))

            for f in futs:
                f.add_done_callback(when_built)

        def exec_loop() -> None:
            while True:
                item = ready.get()
                if item is None:
                    return
                i, futs = item
                w = works[i]
                try:
                    if _compile_done(w, [f.result() for f in futs]):
                        _execute(w, w.verdict.backend, cfg, cfg.build_root())
                except InputError as e:
                    _finish(w, "crash", [f"The verifier could not run this task: {e}"])
                except Exception as e:  # noqa: BLE001 - one candidate never stops the batch
                    _finish(w, "crash", [f"Verifier error on this candidate: {type(e).__name__}: {e}"])
                deliver(i, w)

        threads = [threading.Thread(target=exec_loop, name=f"km-exec-{k}", daemon=True)
                   for k in range(max(1, cfg.exec_workers))]
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
