"""What verification cost: candidates per GPU-hour and seconds per candidate by stage, from the verdicts' own
``stage_seconds`` (verifier/engine.py and verifier/judge/verdict.py write them). Shown by ``kernelmill metrics RUN``,
the run report (curation/report.py) and the dataset card (curation/corpus.py); bench/bench_verifier.py prints the
same table for its batches.

How each number is computed (:func:`verification_cost`):
- **programs**: distinct programs verified. The verify entry (verifier/entry.py) verifies identical code of one task
  and backend once and copies that verdict, ``stage_seconds`` included, to every copy; so verdict rows are grouped by
  (task, backend, program) where the candidates table gives the program (its ``code``, else its ``response``:
  :func:`program_keys`) and each group counts once. Without candidates every row counts as its own program.
- **GPU-hours**, basis ``wall``: the verification's wall hours x GPUs, where the caller measured the wall (the
  benchmark does; a run's verify stage records no wall clock). Basis ``execution`` (a run): the sum over distinct
  programs of ``stage_seconds["execute"]`` (one candidate's execution job, from its admission to its judged verdict,
  including the task's reference timing where this candidate paid it; the job holds the GPU throughout), divided by
  the execution slots sharing one GPU (``slots_per_gpu``: ``[verify] exec_workers``). It leaves out the time a GPU
  waited for builds, so it is the rate of a GPU kept fed: at or above the wall figure of the same work.
- **candidates per GPU-hour**: programs / GPU-hours; None where nothing held a GPU (nothing was executed). On the cpu
  backend the "GPU" is the execution slot on the host; the unit says so.
- **stages**: for each ``stage_seconds`` key, the programs that have it, the median, the total and the total per
  program (over every program, so stages add up). ``compile_cpu`` is CPU-seconds (user + system time of the build
  processes and the compilers); every other key is wall seconds of that stage: the verifier measures no CPU time of
  extraction, execution or judging, and a wall second there is not a CPU-second.

Not done: a run's own wall clock (no stage records it), CPU-seconds of the execution stage.
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

from kernelmill.schema import Candidate, Verdict

# a trial's pieces and the timing phase's, summed over the job (verifier/child/worker.py, PhaseClock.part)
TRIAL_PARTS = tuple(f"child_trial_{p}" for p in ("yield", "seed", "inputs", "reference", "poison", "profiler_start",
                                                 "forward", "profiler_stop", "read_profile", "output", "threads",
                                                 "output_file", "record", "misc"))
TIMING_PARTS = tuple(f"child_timing_{p}" for p in ("warm_device", "profiler_start", "brackets", "profiler_stop",
                                                   "probes", "read_profile", "record"))
# the judge's parts (verifier/judge/verdict.py _JudgeClock)
JUDGE_PARTS = ("judge_models", "judge_trials", "judge_timed_checks", "judge_legality")

# Every stage key once, in the order a candidate meets them (verifier/README.md): (key, label, whether the
# benchmark's table shows it (the list: compile, its CPU, execute and its parts), whether it is one of the
# pieces of ``execute_child``'s wall (what is left of that wall outside them is its own row in SECONDS)).
STAGES = (
    ("extract", "extract (code block, parse)", False, False),
    ("static", "static legality scan", False, False),
    ("compile", "compile (build processes, wall)", True, False),
    ("compile_cpu", "compile CPU (build processes + compilers)", True, False),
    ("compile_lock_wait", "  of the wall: the import checks waiting for the device locks (timing windows)", True,
     False),
    ("execute", "execute (admission to judged verdict)", True, False),
    ("execute_admission", "  waiting for memory admission", True, False),
    ("execute_prepare", "  preparing the task (plan + eager reference timing; paid once per task, later candidates "
                        "wait on it)", True, False),
    ("execute_plan", "    of it: the task's plan in the judging process (made there, or taken as the engine's process "
                     "made it)", True, False),
    ("execute_child_turn", "  waiting for a child's turn (slots beyond the children at a time judge beside them)",
     True, False),
    ("execute_child", "  the execution child", True, False),
    ("execute_child_start", "    before the child's own clock: the job handed to its warm process (fork, warm-up)",
     True, True),
    ("child_shared_lock_wait", "    waiting for the shared device lock", True, True),
    ("child_load_reference", "    the reference built in the child", True, True),
    ("child_load_profiler", "    the profiler started", True, True),
    ("child_load_guard", "    the tamper guard's snapshot of torch's state", False, True),
    ("child_load_candidate_import", "    the candidate imported (its extensions loaded)", True, True),
    ("child_load", "    ModelNew constructed", True, True),
    ("child_trials", "    correctness trials", True, True),
    *((k, f"      trial: {k[len('child_trial_'):].replace('_', ' ')}", True, False) for k in TRIAL_PARTS),
    ("child_first_trial", "    the first trial (first-call costs)", False, False),
    ("child_warmup", "    warm-up calls (cuda: before the timing lock)", True, True),
    ("child_timing_lock_wait", "    waiting for the timing lock", True, True),
    ("child_timing", "    timing", True, True),
    *((k, f"      timing: {k[len('child_timing_'):].replace('_', ' ')}", True, False) for k in TIMING_PARTS),
    ("harness_draw", "      the harness's brackets: private inputs drawn (before each clock)", True, False),
    ("harness_draw_lock_wait", "      the harness's brackets: waiting for the process's RNG lock before a draw (the "
     "layout's, each call's)", True, False),
    ("harness_clock", "      the harness's brackets: sent to their end (its waits, the device's run)", True, False),
    ("harness_queue", "        of it: waiting for the child to queue its calls (cuda)", True, False),
    ("harness_after", "      the harness's brackets: outputs checked or held for later", True, False),
    ("child_own_kernel_check", "    the own-kernel check", False, False),
    ("execute_child_exit", "    after the child's report: its exit, the fork server's sweep of its sandbox", True,
     True),
    ("execute_held_checks", "    after the child: the harness's held checks of the timed outputs (cuda)", True, True),
    ("execute_prefetch_wait", "    after the child: waiting for the reference prefetch's last answers (cuda)", True,
     True),
    ("execute_judge", "  judging (the reference on every trial's inputs, its lock waits, a knockout)", True, False),
    ("judge_models", "    the reference and its float64 copy built", True, False),
    ("judge_trials", "    the trials' outputs checked", True, False),
    ("judge_timed_checks", "    the timed outputs' full checks, the speedups", True, False),
    ("judge_legality", "    the legality policies (a knockout run where one decides)", True, False),
    ("verdict_compiled_wait", "after the slot: the verdict waiting for its task's torch.compile timing (the slot "
                              "took its next candidate)", True, False),
    ("total", "total (front to verdict)", True, False),
)
STAGE_ORDER = tuple(k for k, *_ in STAGES)  # other keys follow these, sorted
HEADLINE_KEYS = tuple(k for k, _, headline, _ in STAGES if headline)
LABELS = {k: label for k, label, *_ in STAGES}
CHILD_PHASES = tuple(k for k, *_, phase in STAGES if phase)
CPU_KEYS = ("compile_cpu",)


@dataclass(frozen=True)
class StageSeconds:
    """One ``stage_seconds`` key over the distinct programs of a set of verdicts."""

    key: str
    kind: str  # "cpu" (CPU-seconds) or "wall" (wall seconds of the stage)
    programs: int  # programs whose verdict has this key
    median_s: float  # over those programs
    total_s: float
    per_program_s: float  # total / every program of the set (0 for programs without the key)


@dataclass(frozen=True)
class VerificationCost:
    """The cost of verifying a set of verdicts (module docstring: how each field is computed)."""

    verdicts: int  # rows
    programs: int  # distinct programs verified (copies of one program counted once)
    executed: int  # programs that reached execution (stage_seconds has "execute")
    backends: tuple[str, ...]
    basis: str  # "wall" (measured wall x GPUs) or "execution" (summed execute seconds / slots per GPU)
    gpus: int
    slots_per_gpu: int
    wall_s: float | None  # the measured wall, basis "wall" only
    gpu_hours: float
    per_gpu_hour: float | None  # programs / gpu_hours; None without GPU time
    stages: tuple[StageSeconds, ...]

    @property
    def unit(self) -> str:
        return "GPU-hour" if "cuda" in self.backends else "device-hour (cpu backend: one execution slot)"

    def stage(self, key: str) -> StageSeconds | None:
        return next((s for s in self.stages if s.key == key), None)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["backends"], d["stages"], d["unit"] = list(self.backends), [asdict(s) for s in self.stages], self.unit
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "VerificationCost":
        """The inverse of :meth:`as_dict` (a build's stats.json keeps it). ValueError naming a missing key."""
        names = [f for f in cls.__dataclass_fields__]
        missing = [k for k in names if k not in d]
        if missing:
            raise ValueError(f"verification cost record: missing key(s) {', '.join(missing)}")
        kw = {k: d[k] for k in names}
        kw["backends"] = tuple(d["backends"])
        kw["stages"] = tuple(StageSeconds(**s) for s in d["stages"])
        return cls(**kw)


def program_keys(candidates: Iterable[Candidate]) -> dict[str, str]:
    """candidate_id -> a key of the program the verify entry judged for it (a hash of its code, else its response)."""
    return {c.candidate_id: hashlib.sha256((c.code or c.response or "").encode()).hexdigest() for c in candidates}


def _seconds(v: Verdict) -> dict[str, float]:
    return {k: float(x) for k, x in (v.stage_seconds or {}).items()
            if isinstance(x, (int, float)) and not isinstance(x, bool)}


def distinct_programs(verdicts: Iterable[Verdict], programs: Mapping[str, str] | None = None) -> list[Verdict]:
    """One verdict per distinct (task, backend, program): the first of each group, in input order. A verdict
    whose candidate the mapping lacks is its own program."""
    seen: set = set()
    out = []
    for v in verdicts:
        key = (v.task_id, v.backend, programs[v.candidate_id]) if programs and v.candidate_id in programs \
            else ("row", v.candidate_id, id(v))
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def verification_cost(verdicts: Iterable[Verdict], *, programs: Mapping[str, str] | None = None,
                      wall_s: float | None = None, gpus: int = 1, slots_per_gpu: int = 1) -> VerificationCost:
    """The cost of ``verdicts`` (module docstring). ``programs``: candidate_id -> program key
    (:func:`program_keys` of the run's candidates); ``wall_s``: the verification's measured wall seconds (basis
    ``wall``), else the basis is ``execution`` over ``slots_per_gpu``. Raises ValueError for gpus or slots < 1 or
    a negative wall."""
    if gpus < 1 or slots_per_gpu < 1:
        raise ValueError(f"verification_cost: gpus and slots_per_gpu must be >= 1, got {gpus} and {slots_per_gpu}")
    if wall_s is not None and wall_s < 0:
        raise ValueError(f"verification_cost: wall_s must be >= 0, got {wall_s}")
    rows = list(verdicts)
    uniq = distinct_programs(rows, programs)
    secs = [_seconds(v) for v in uniq]
    executed = sum("execute" in s for s in secs)
    if wall_s is not None:
        basis, gpu_hours = "wall", wall_s * gpus / 3600.0
    else:
        basis, gpu_hours = "execution", sum(s.get("execute", 0.0) for s in secs) / slots_per_gpu / 3600.0
    keys = {k for s in secs for k in s}
    ordered = [k for k in STAGE_ORDER if k in keys] + sorted(keys - set(STAGE_ORDER))
    stages = []
    for k in ordered:
        vals = [s[k] for s in secs if k in s]
        total = sum(vals)
        stages.append(StageSeconds(key=k, kind="cpu" if k in CPU_KEYS else "wall", programs=len(vals),
                                   median_s=statistics.median(vals), total_s=total,
                                   per_program_s=total / len(uniq)))
    return VerificationCost(
        verdicts=len(rows), programs=len(uniq), executed=executed,
        backends=tuple(sorted({v.backend for v in rows if v.backend})), basis=basis, gpus=gpus,
        slots_per_gpu=slots_per_gpu, wall_s=wall_s, gpu_hours=gpu_hours,
        per_gpu_hour=(len(uniq) / gpu_hours) if gpu_hours > 0 else None, stages=tuple(stages))


def run_cost(root, *, slots_per_gpu: int = 1, gpus: int = 1) -> VerificationCost | None:
    """The cost of the verdicts stored under ``root`` (a run or corpus directory; identical programs found through
    its candidates table), basis ``execution``; None where it has no verdicts table."""
    from kernelmill import store

    if not store.table_dir(root, "verdicts").is_dir():
        return None
    verdicts = store.read_records(root, "verdicts")
    cands = store.read_records(root, "candidates") if store.table_dir(root, "candidates").is_dir() else []
    return verification_cost(verdicts, programs=program_keys(cands), gpus=gpus, slots_per_gpu=slots_per_gpu)


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "n/a" if x is None else format(x, fmt)


def headline(cost: VerificationCost) -> str:
    """One sentence: candidates per GPU-hour and how it was computed."""
    if cost.per_gpu_hour is None:
        return (f"Verification cost: no candidates per {cost.unit}: none of the {cost.programs} distinct programs "
                f"({cost.verdicts} verdicts) recorded time on a device (none reached execution).")
    how = (f"{cost.programs} distinct programs over {cost.wall_s:.0f} s of wall x {cost.gpus} GPU(s)"
           if cost.basis == "wall" else
           f"{cost.programs} distinct programs ({cost.verdicts} verdicts) over {cost.gpu_hours * 3600:.0f} s of "
           f"execution (the summed execute seconds of {cost.executed} executed programs / {cost.slots_per_gpu} "
           f"execution slot(s) per GPU; time a GPU waited for builds not counted)")
    return f"Verification cost: {_num(cost.per_gpu_hour, '.0f')} candidates per {cost.unit}: {how}."


def cost_table(cost: VerificationCost, keys: Iterable[str] | None = None) -> list[str]:
    """Markdown rows: seconds per candidate by stage (median over the programs that have the stage, total, total
    per program), CPU-seconds marked as such; ``keys`` picks and orders the stages (default: all)."""
    wanted = list(keys) if keys is not None else [s.key for s in cost.stages]
    lines = ["| stage | seconds | programs | median s | total s | s per program |",
             "| --- | --- | --- | --- | --- | --- |"]
    for k in wanted:
        s = cost.stage(k)
        if s is None:
            continue
        lines.append(f"| {LABELS.get(k, k)} (`{k}`) | {'CPU' if s.kind == 'cpu' else 'wall'} | {s.programs} | "
                     f"{s.median_s:.3f} | {s.total_s:.1f} | {s.per_program_s:.3f} |")
    return lines


def cost_section(cost: VerificationCost | None, title: str = "## Verification cost") -> list[str]:
    """Markdown lines for a report or card: the headline, the stage table and what the numbers mean."""
    if cost is None or cost.verdicts == 0:
        return [title, "", "No verdicts: nothing was verified here."]
    return [title, "", headline(cost), "", *cost_table(cost), "",
            "`compile_cpu` is CPU-seconds (build processes and compilers); every other stage is wall seconds "
            "(the verifier measures no CPU time of execution). A program verified once for several identical "
            "candidates counts once. How each number is computed: verifier/serve/cost.py."]


# ----------------------------------------------------------------------------- per-verdict stage tables (benchmarks)
# bench/bench_verifier.py prints these: means over a batch's verdicts, not the per-program medians above

def mean_or_nan(xs) -> float:
    """The mean of ``xs``; nan when it is empty."""
    xs = list(xs)
    return statistics.mean(xs) if xs else float("nan")


EXEC_KEYS = ("execute_prepare", "child_load", "child_trials", "child_first_trial", "child_timing_lock_wait",
             "child_timing", "child_own_kernel_check", "execute_child", "execute")
# where a candidate's seconds go: (label, stage_seconds key or a function of the stage seconds)
SECONDS = [
    ("compile: build process, per candidate (CPU-bound, pool of cores)", "compile"),
    ("prepare: task plan (reference, float64 check; once per task) + reference timing (once per task)",
     "execute_prepare"),
    ("child: wait for the shared device lock", "child_shared_lock_wait"),
    ("child: reference module + reference model built", "child_load_reference"),
    ("child: profiler start", "child_load_profiler"),
    ("child: torch state snapshot (tamper guard)", "child_load_guard"),
    ("child: candidate module imported (extension loaded)", "child_load_candidate_import"),
    ("child: ModelNew built", "child_load"),
    ("child: correctness trials", "child_trials"),
    ("child: wait for the timing lock", "child_timing_lock_wait"),
    ("child: timing", "child_timing"),
    ("execution process: start + end not in its own phases",
     lambda st: st.get("execute_child", 0) - sum(st.get(k, 0) for k in CHILD_PHASES)),
    ("judge: outputs compared, float64 reference on the trial inputs", lambda st: st.get("execute", 0)
     - st.get("execute_prepare", 0) - st.get("execute_child", 0) - st.get("execute_child_turn", 0)),
    ("total per candidate (wall, one worker)", "total"),
]


def exec_breakdown(verdicts: Iterable[Verdict]) -> str:
    """``"execute_prepare 0.12, child_load 0.40, ..."``: the mean seconds of each execution phase (EXEC_KEYS)."""
    vs = list(verdicts)
    return ", ".join(f"{k} {mean_or_nan(v.stage_seconds.get(k, 0.0) for v in vs):.2f}" for k in EXEC_KEYS)


def seconds_table(verdicts: Iterable[Verdict]) -> list[tuple[str, str]]:
    """(label, "mean (max max)") per row of SECONDS; a stage past compile counts only verdicts that executed."""
    vs, rows = list(verdicts), []
    for label, key in SECONDS:
        vals = [key(v.stage_seconds) if callable(key) else float(v.stage_seconds.get(key, 0.0) or 0.0) for v in vs
                if v.stage_seconds.get("execute") is not None or key == "compile"]
        rows.append((f"s per candidate: {label}", f"{mean_or_nan(vals):.2f} (max {max(vals, default=0):.2f})"))
    return rows


def write_verdicts(verdicts: Iterable[Verdict], path) -> None:
    """One JSON line per verdict (candidate_id, status, cheats, correct, speedup): two verifiers' verdicts on the
    same batch compared with a diff."""
    import json
    with open(path, "w") as f:
        for v in verdicts:
            f.write(json.dumps({"candidate_id": v.candidate_id, "status": v.status, "cheats": v.cheats,
                                "correct": v.correct, "speedup": round(v.speedup_eager or 0, 2)}) + "\n")
