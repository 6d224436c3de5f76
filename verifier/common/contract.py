"""The typed contract between the verifier process and its execution children.

A ``Job`` goes to a child as ``job.json``; the child answers with a ``ChildReport`` as ``report.json``
plus tensors in separate ``*.pt`` files (loaded with ``weights_only=True``). Both directions are plain
JSON of these dataclasses: ``from_dict`` rejects unknown keys and wrong types, so a field renamed on one
side fails loudly instead of falling back to a default of its own. Defaults live in ``VerifyConfig``
only: a ``Job`` field that is a setting takes its default from there (``verifier.runs.new_job`` copies the
config; the child never invents a value).

What the contract does NOT guarantee: that a child's report is true. A candidate runs in the child and
can write anything there. The verifier decides correctness from output tensors against reference outputs
it computed itself, and treats the rest of the report as evidence (see verifier/README.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import typing
from dataclasses import dataclass, field
from pathlib import Path

from verifier.common.config import VerifyConfig
from verifier.common.sandbox import host_secrets, redact_env

JOB_FILE = "job.json"
REPORT_FILE = "report.json"
FLAGS_FILE = "flags.json"  # written by the child as soon as it sees tampering: read even after a timeout
SOCKET_FILE = "ctl.sock"  # the job's Unix socket: verifier/execute/channel.py (the verifier's side), verifier/child/channel.py
# the copy of the kept torch.compile cache a compiled reference part builds with (verifier/execute/compile_cache.py)
COMPILE_CACHE = "compile-cache"


class ContractError(ValueError):
    """A job or report that does not match its dataclass (unknown key, missing key, wrong type)."""


def _check(cls, d: dict) -> dict:
    if not isinstance(d, dict):
        raise ContractError(f"{cls.__name__}: expected an object, got {type(d).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ContractError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}")
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = required - set(d)
    if missing:
        raise ContractError(f"{cls.__name__}: missing field(s) {sorted(missing)}")
    out = {}
    for k, v in d.items():
        out[k] = _coerce(cls.__name__, k, hints[k], v)
    return out


def _coerce(owner: str, key: str, hint, v):
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:
        if v is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(owner, key, inner[0], v)
    if dataclasses.is_dataclass(hint):
        return hint.from_dict(v)
    if origin is list:
        if not isinstance(v, list):
            raise ContractError(f"{owner}.{key}: expected a list, got {type(v).__name__}")
        return [_coerce(owner, key, args[0], x) for x in v] if args else v
    if origin is dict or hint is dict:
        if not isinstance(v, dict):
            raise ContractError(f"{owner}.{key}: expected an object, got {type(v).__name__}")
        return v
    if hint is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ContractError(f"{owner}.{key}: expected a number, got {type(v).__name__}")
        return float(v)
    if hint in (int, str, bool):
        if not isinstance(v, hint) or (hint is int and isinstance(v, bool)):
            raise ContractError(f"{owner}.{key}: expected {hint.__name__}, got {type(v).__name__}")
        return v
    return v


class _Record:
    @classmethod
    def from_dict(cls, d: dict):
        return cls(**_check(cls, d))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Job(_Record):
    """One unit of work for an execution child.

    ``kind`` "candidate": correctness trials, runtime checks and timing of the candidate (its reference is
    loaded too, for the in-process C06/C11 checks). ``kind`` "reference": timing of the eager reference and the null
    bracket (``time_eager``), or of ``torch.compile`` of it (``time_torch_compile``), in a process where no candidate
    code ever runs."""

    kind: str  # candidate | reference
    backend: str
    build_root: str
    reference_code: str
    init_seed: int
    candidate_code: str = ""
    n_trials: int = 0  # correctness trials; each one's seed comes over the channel when the child reaches it
    n_timing: int = 0  # timed iterations; their seeds come over the channel when the trials are over
    # the verifier's own record of the seeds it handed out (verifier/execute/channel.py): never written for the child
    trial_seeds: list[int] = field(default_factory=list)
    other_shape: str = ""  # "" (no extra-shape trial) or the mode of verifier.common.inputs.other_shape_inputs
    input_files: bool = False  # trial inputs shipped as trial_<i>.pt (get_inputs not reproducible from a seed)
    timing_seeds: list[int] = field(default_factory=list)
    warmup: int = VerifyConfig.warmup
    timed_checks: int = VerifyConfig.timed_checks
    gap_probes: int = VerifyConfig.gap_probes
    warm_device_ms: float = VerifyConfig.warm_device_ms
    hide_launch_us: float = VerifyConfig.hide_launch_us
    time_torch_compile: bool = VerifyConfig.time_torch_compile
    # a reference job times the eager model and the null bracket; without them only torch.compile's model (the task's
    # timing in two parts: verifier/runs.py ``eager_timing``, ``compiled_timing``)
    time_eager: bool = True
    memory_limit_gb: float = VerifyConfig.memory_limit_gb
    allow_child_compile: bool = VerifyConfig.allow_child_compile
    timing_lock: str = ""  # path of the device lock ("" = none)
    lock_wait_s: float = 30.0
    eval_mode: bool = VerifyConfig.eval_mode
    n_brackets: int = VerifyConfig.timed_brackets  # clocked brackets per model (the harness may stop it sooner)
    timing_budget_s: float = VerifyConfig.timing_budget_s
    cpu_sampler: str = ""  # cpu: the compiled sampler of forward's CPU time (verifier/child/sampler.py), or ""

    def other_shape_at(self, i: int) -> str:
        """The extra shape's mode where trial ``i`` is its trial (the last one, where the job has one), else ""."""
        return self.other_shape if self.other_shape and i == self.n_trials - 1 else ""

    def write(self, job_dir: Path) -> None:
        """The job as the child reads it: without the seeds (they are handed out one step at a time)."""
        (job_dir / JOB_FILE).write_text(self._text())

    def _text(self) -> str:
        d = self.to_dict()
        d["trial_seeds"], d["timing_seeds"] = [], []
        return json.dumps(d)

    def still_unread_by_candidate(self, job_dir: Path) -> bool:
        """Whether the job file is still in ``job_dir`` as written: the child removes it right before it imports the
        candidate (verifier/child/worker.py), and it holds the construction seed, which no later code could write
        back, so a file as written says the candidate's code never ran in that job."""
        try:
            return (job_dir / JOB_FILE).read_text() == self._text()
        except (OSError, UnicodeDecodeError):
            return False

    @classmethod
    def read(cls, job_dir: Path) -> "Job":
        return cls.from_dict(json.loads((job_dir / JOB_FILE).read_text()))


@dataclass
class TrialReport(_Record):
    """What the child saw on one correctness trial (the output itself is in ``output_file``)."""

    index: int
    started_s: float = 0.0
    error: str = ""
    threads_added: int = 0  # the candidate's threads at work after forward returned (monitors.side_work_threads)
    kernel_calls: int = 0
    dispatched_ops: list[str] = field(default_factory=list)  # aten ops seen by the dispatch-mode monitor
    to_host_bytes: int = 0  # tensor data one forward call copied to the host or read into Python, the most of any call
    profiled_ops: list[str] = field(default_factory=list)  # aten ops seen by the profiler (C++ observer)
    monitor_problems: list[str] = field(default_factory=list)  # a monitor found switched off or replaced
    mutated_inputs: list[int] = field(default_factory=list)
    output_problem: str = ""
    output_file: str = ""
    # the reference computed inside the child, before the candidate (odd trials) or after it (even ones; never on
    # the extra shape): inputs.digest of its outputs only (C11 evidence: global state tampered with)
    ref_digest: list = field(default_factory=list)
    own_kernel_us: float = 0.0  # cuda: device time in kernels named in the candidate's sources
    foreign_kernel_us: dict = field(default_factory=dict)  # cuda: other kernels, name -> device us
    graph_launches: int = 0  # cuda: CUDA graphs forward launched (the profiler's cudaGraphLaunch calls inside it)
    # cpu: where forward's CPU time went (verifier/child/sampler.py ``Sampler.take``): {"total": n, "at": {...}}
    cpu_samples: dict = field(default_factory=dict)
    # cpu, the timed calls: each clocked bracket's samples, ``{"seq": the harness's bracket number, **samples}``
    # (the judge reads the brackets that set the reported time: verifier/judge/checks.py ``check_bracket_samples``)
    cpu_brackets: list = field(default_factory=list)


@dataclass
class ModelTiming(_Record):
    """What a child's one-at-a-time probes of one model saw (microseconds): first signals only. The model's time
    per call is the harness's (verifier/execute/harness.py), never a figure of this report."""

    launch_us: list[float] = field(default_factory=list)  # host call start to device idle, one call at a time
    idle_gap_us: list[float] = field(default_factory=list)  # device idle minus end event (cuda; C09 evidence)


@dataclass
class ChildReport(_Record):
    kind: str
    sandbox: dict = field(default_factory=dict)
    phase_s: dict = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    setup_error: str = ""  # failed before any candidate code ran: the verifier's problem, not the candidate's
    import_error: str = ""
    init_error: str = ""
    patched: list[str] = field(default_factory=list)  # torch/verifier state the candidate changed, with phase
    aborted: str = ""  # why the child stopped early (tampering seen)
    copied_parameters: bool = False
    holds_reference_model: bool = False
    reference_error: str = ""  # the reference failed in the child: the verifier's problem, not the candidate's
    threads_at_load: int = 0  # threads the candidate's import or ModelNew() started, at work after it
    trials: list[TrialReport] = field(default_factory=list)
    timed: typing.Optional[TrialReport] = None  # what the monitors saw over every timed call
    cuda_kernel_names: list[str] = field(default_factory=list)
    own_kernel_ran: typing.Optional[bool] = None
    candidate: typing.Optional[ModelTiming] = None
    eager: typing.Optional[ModelTiming] = None
    compiled: typing.Optional[ModelTiming] = None
    compile_error: str = ""
    timing_error: str = ""
    threads_added_timing: int = 0  # the candidate's threads at work after the timed calls returned
    reference_gap_us: list[float] = field(default_factory=list)  # the reference's idle gaps, probed between the candidate's
    timing_exclusive: typing.Optional[bool] = None
    lock_wait_s: float = 0.0
    device: str = ""
    # the child's main began and ended (CLOCK_MONOTONIC, one clock for the host's processes): the parent's seconds
    # before and after it (stage_seconds execute_child_start / _exit; diagnostics, never a verdict's number)
    mono_span: list[float] = field(default_factory=list)

    def write(self, job_dir: Path) -> None:
        tmp = job_dir / (REPORT_FILE + ".tmp")
        tmp.write_text(json.dumps(self.to_dict()))
        tmp.replace(job_dir / REPORT_FILE)

    @classmethod
    def read(cls, job_dir: Path) -> "ChildReport":
        """The child's report, with values of the host's environment withheld from every text in it (the
        child's error strings quote what the candidate raised; verifier/common/sandbox.py)."""
        return cls.from_dict(_redacted(json.loads((job_dir / REPORT_FILE).read_text()), host_secrets()))


@dataclass
class ChildBuild(_Record):
    """An extension the candidate's process asked for at run time: a ``load_inline`` call whose arguments the static
    stage could not read (a source made at run time). The child sends the spec over the job's channel and waits;
    the verifier builds it in its own build root, which the sandboxed child cannot write, and scans the binary it
    built before the child may load it (verifier/build/runtime.py). The scans' findings are the verifier's own,
    kept in the job's ledger: nothing the candidate does after the build (removing or replacing the binary,
    rewriting a list of its builds) changes them. ``sha256`` seals the binary as built (the judge checks it was not
    replaced before the job ended, where no sandbox made the build root read-only)."""

    n: int = 0  # the child's n-th request
    key: str = ""  # the build key (verifier/common/spec.py spec_key)
    sources: list = field(default_factory=list)  # C++ and CUDA sources as sent
    ldflags: list = field(default_factory=list)
    ok: bool = False
    so_path: str = ""
    sha256: str = ""
    error: str = ""  # the compiler's first errors (the candidate's), or why the request was refused
    verifier_error: str = ""  # the verifier's own build failure: never the candidate's
    vendor: list = field(default_factory=list)  # C01 findings (vendor libraries, ATen below the dispatcher)
    tamper: list = field(default_factory=list)  # C11 findings
    compute: list = field(default_factory=list)  # ATen compute ops the binary imports ("aten::mm")
    escapes: list = field(default_factory=list)  # what the build sandbox blocked (C17): the module's initialisers


def file_seal(path: Path) -> str:
    """The sha256 of a regular file's bytes, read without following a link ('' for a link, a directory, nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 22):
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def _redacted(value, secrets: list[str]):
    if isinstance(value, str):
        return redact_env(value, secrets)
    if isinstance(value, list):
        return [_redacted(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: _redacted(v, secrets) for k, v in value.items()}
    return value
