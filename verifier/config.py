"""The verifier's settings (the ``[verify]`` section of the config) and backend resolution.

Defaults live here only; ``Job`` (verifier/contract.py) copies what an execution child needs from it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelmill.errors import InputError


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
    # fp32 outputs: the tolerance measured from a float64 run of the reference (verifier/numerics.py);
    # atol_fp32 / rtol_fp32 are the fallback where the float64 reference cannot run
    float64_reference: bool = True
    tol_factor: float = 64.0  # x the fp32 reference's own error against float64
    tol_scale: float = 8e-5  # x the largest |output| (long sequential accumulations)
    tol_floor: float = 1e-6
    # strict: forward computes in the candidate's own kernels only (MusaCoder's rule, the corpora's);
    # partial: torch compute allowed beside them (KernelBench's rule), one own kernel must run and do work.
    # Every verdict records what both say (Verdict.pass_strict / pass_partial).
    legality: str = "strict"
    partial_min_own_share: float = 0.001  # cuda, partial: least share of forward device time in own kernels
    time_torch_compile: bool = True
    other_shape: bool = True
    timed_checks: int = 5
    allow_child_compile: bool = True
    build_dir: str = ""
    keep_jobs: bool = False
    warm_device_ms: float = 50.0  # cuda: device kept busy this long before each model's timing (clocks up)
    gap_probes: int = 10  # calls timed one at a time: launch-inclusive time and the C09 idle gap
    hide_launch_us: float = 50.0  # cuda: least device-side wait queued before each timed call (0: off)
    warm_processes: int = -1  # cuda: jobs run in children forked ahead by warm fork servers (0: a fresh process each)
    device_lock: bool = True  # timing phases get the device alone (verifier/devlock.py); False only to measure it
    min_own_share: float = 0.5  # cuda: least share of forward device time in the candidate's own kernels (C01)
    # KernelBench's semantics: modules run as constructed (training mode: BatchNorm on batch statistics,
    # ``self.training`` True), as its harness runs them; True runs the reference and ModelNew in eval mode
    eval_mode: bool = False
    wall_repeats: int = 2  # brackets timed by the verifier's own clock per model (verifier/channel.py)
    timing_budget_s: float = 10.0  # timed iterations fitted to the call time so that they take about this long
    full_build_fallback: bool = True  # a CUDA source failing its bare build is rebuilt unchanged (False: final; build.py)

    @classmethod
    def from_dict(cls, d: dict | None, source: str = "[verify]") -> "VerifyConfig":
        """A config from the [verify] section; an unknown key or a value of the wrong kind is an InputError
        naming the key and ``source``; missing keys keep the defaults above."""
        names = {f.name: f for f in dataclasses.fields(cls)}
        defaults = cls()
        kw = {}
        for k, v in (d or {}).items():
            if k not in names:
                raise InputError(source, f"unknown key verify.{k} (known: {', '.join(sorted(names))})")
            want = type(getattr(defaults, k))
            try:
                kw[k] = want(v) if not (want is bool and isinstance(v, str)) else v.lower() in ("1", "true", "yes")
            except (TypeError, ValueError):
                raise InputError(source, f"verify.{k} must be {want.__name__}, got {v!r}") from None
        cfg = cls(**kw)
        if cfg.legality not in ("strict", "partial"):
            raise InputError(source, f"verify.legality must be strict or partial, got {cfg.legality!r}")
        if cfg.trials < 5:
            raise InputError(source, f"verify.trials must be at least 5, got {cfg.trials}")
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
