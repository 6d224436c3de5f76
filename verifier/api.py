"""The verifier's Python API: verify one candidate, or a batch with compiling and executing overlapped.

A candidate travels: extract -> static legality -> compile (CompilePool, keyed build dirs) ->
execution child (verifier/worker.py: trials, runtime checks, timing) -> judge (verifier/judge.py: outputs
against reference outputs computed in THIS process, which the child never sees) -> reward and feedback.

Guarantees: every call returns one Verdict per candidate, whatever the candidate does (crash, hang,
memory blow-up, garbage output); ``stage_reached`` is the last stage it got through and ``status`` why
it stopped. Only problems of the verifier itself (a reference that does not run, no compiler) raise.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import secrets
import shutil
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
from verifier import cheats
from verifier.build import CompilePool, first_errors
from verifier.devlock import device_lock
from verifier.processes import _job_root, _run_child
from verifier.extract import check_candidate_shape, extract_code
from verifier.judge import RNG_LOCK, Work, as_list, finish, judge
from verifier.static import scan



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
    device_lock: bool = True  # timing phases get the device alone (verifier/devlock.py); False only to measure it

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






def _front(reference_code: str, candidate_text: str, backend: str, task_id: str, candidate_id: str) -> Work:
    """Extract and static stages; the returned work's verdict has a status when it stopped here."""
    t0 = time.perf_counter()
    v = Verdict(candidate_id=candidate_id, task_id=task_id, backend=backend)
    w = Work(verdict=v, reference_code=reference_code, started=t0)
    code = extract_code(candidate_text)
    problems = check_candidate_shape(code, backend)
    v.stage_seconds["extract"] = round(time.perf_counter() - t0, 4)
    if problems:
        if any("never launched" in p for p in problems):
            v.cheats = [cheats.C02]  # a kernel defined but never launched is row 2, not a format slip
        finish(w, "extract_error", problems)
        return w
    w.code = code
    v.stage_reached = "extract"
    t1 = time.perf_counter()
    report = scan(code, backend)
    v.stage_seconds["static"] = round(time.perf_counter() - t1, 4)
    if report.findings:
        v.cheats = report.cheat_codes
        v.fallback_ops = report.fallback_ops
        finish(w, "cheat", [f"Static check, {f}." for f in report.findings])
        return w
    unresolved = [s for s in report.extensions if not s.resolved]
    if unresolved and not ALLOW_UNRESOLVED[0]:
        finish(w, "illegal", [f"line {s.line}: {s.problem}" for s in unresolved])
        return w
    v.stage_reached = "static"
    w.specs = [s.args for s in report.extensions if s.resolved]
    return w


ALLOW_UNRESOLVED = [True]


def _compile_done(w: Work, results: list) -> bool:
    """Record compile results; False (and the verdict finished) when any spec failed."""
    v = w.verdict
    v.stage_seconds["compile"] = round(sum(r.seconds for r in results if not r.cached), 3)
    v.stage_seconds["compile_cached"] = all(r.cached for r in results) if results else True
    bad = [r for r in results if not r.ok]
    if bad:
        v.compile_log = bad[0].log[-20000:]
        finish(w, "compile_error", ["First compiler errors:\n" + first_errors(bad[0].log)])
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










def _lock_path(cfg: "VerifyConfig", build_root: Path) -> str | None:
    return str(build_root / ".timing.lock") if cfg.device_lock else None


def _shared_lock(cfg: "VerifyConfig", build_root: Path, backend: str):
    """The device lock for the verifier's own device work, taken shared on cuda only: there another
    process's kernels time-slice into a timed region; on cpu (bench/results/timing_noise_cpu.md) keeping
    other work off the cores during timing did not lower the noise and cost 15-25% of the batch time."""
    return device_lock(_lock_path(cfg, build_root) if backend == "cuda" else None)


def _lock_wait_s(cfg: "VerifyConfig") -> float:
    """Longest wait for the device lock (verifier/devlock.py): a share of the run timeout, so that a
    neighbour holding the device can delay a candidate's timing but never push it into a timeout."""
    return min(30.0, 0.2 * cfg.run_timeout_s)


def _execute(w: Work, backend: str, cfg: VerifyConfig, build_root: Path) -> Verdict:
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
    # cuda: the reference runs here share the device with other candidates' trials, never with a timing phase
    with _shared_lock(cfg, build_root, backend) as lock:
        lock.acquire(False, _lock_wait_s(cfg))
        with RNG_LOCK:  # the global generator: another execution thread must not draw between seed and use
            torch.manual_seed(init_seed)
            model = ref_mod.Model(*init).to(device).eval()
        with torch.no_grad():
            for seed in trial_seeds:
                with RNG_LOCK:
                    torch.manual_seed(seed)
                    inputs = ref_mod.get_inputs()
                ref = model(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs])
                trials.append((inputs, [r.detach().cpu() for r in as_list(ref)], False))
            if cfg.other_shape and trials:
                with RNG_LOCK:
                    torch.manual_seed(rng.randrange(1, 2**31))
                    cpu_model = model if device == "cpu" else None
                    probe = cpu_model or ref_mod.Model(*init).eval()
                if device != "cpu":
                    probe.load_state_dict({k: t.cpu() for k, t in model.state_dict().items()})
                other = _other_shape_inputs(trials[0][0], probe, as_list(trials[0][1])[0])
                if other is not None:
                    ref = model(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in other])
                    trials.append((other, [r.detach().cpu() for r in as_list(ref)], True))
    job = {"backend": backend, "build_root": str(build_root), "candidate_code": w.code,
           "reference_code": w.reference_code, "init_seed": init_seed, "n_trials": len(trials),
           "timing_trials": cfg.timing_trials, "timing_seeds": timing_seeds, "warmup": cfg.warmup,
           "hide_launch_us": cfg.hide_launch_us, "gap_probes": cfg.gap_probes, "warm_device_ms": cfg.warm_device_ms,
           "time_torch_compile": cfg.time_torch_compile, "memory_limit_gb": cfg.memory_limit_gb,
           "allow_child_compile": cfg.allow_child_compile, "timing_lock": _lock_path(cfg, build_root),
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
        with _shared_lock(cfg, build_root, backend) as lock:
            lock.acquire(False, _lock_wait_s(cfg))  # the judge re-runs the reference on picked timed inputs
            return judge(w, cfg, ref_mod, model, device, trials, timing_seeds, job_dir, rc, timed_out, log)
    finally:
        if not cfg.keep_jobs:
            shutil.rmtree(job_dir, ignore_errors=True)








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


def _stamp(w: Work) -> Verdict:
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

    def deliver(i: int, w: Work) -> None:
        v = _stamp(w)
        with done_lock:
            verdicts[i] = v
            if on_verdict:
                on_verdict(i, v)

    ready: queue.Queue = queue.Queue()
    works: list[Work] = []
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
                    finish(w, "crash", [f"The verifier could not run this task: {e}"])
                except Exception as e:  # noqa: BLE001 - one candidate never stops the batch
                    finish(w, "crash", [f"Verifier error on this candidate: {type(e).__name__}: {e}"])
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
