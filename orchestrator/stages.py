"""The pipeline's stages: one list, in the order a task travels.

    STAGES          load, mine, nnsmith, annotate, generate, verify, repair, curate
    Stage           name, the settings section it owns, the tables it reads and writes, ``run``,
                    what its CLI subcommand adds, and whether it holds the GPU or may use Ray

A stage is ``run(run_dir, settings, progress) -> dict`` (counts of what it did): a plain function
over a run directory and the typed settings (kernelmill/settings.py). Everything that runs a stage
takes it from ``STAGES``: ``kernelmill run [--stages]`` (orchestrator/pipeline.py), the CLI
subcommands (orchestrator/cli.py), the Prefect flows and deployments (flows/, prefect.yaml) and Ray
dispatch (the verify stage's ``flows.ray_address``). Reading the stage functions below in order
follows one task from its source file to its Parquet row.

Every stage reads and writes through kernelmill.store (atomic, keyed by content hashes) and skips
work whose rows are already stored, so a run killed anywhere and started again ends with nothing
lost and nothing duplicated. Gathered tasks are kept unannotated under ``<run_dir>/raw/tasks`` (a
store root of its own: annotating a task does not change its id), and the slow gatherers (mine,
nnsmith) mark, after their tasks are stored, the settings they ran with, so a resumed run does not
gather again. Not guaranteed: two processes writing one run directory at the same time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from curation.corpus import build_corpora
from graphs.kernelbench import load_kernelbench_dir
from graphs.nnsmith_tasks import generate_nnsmith_tasks
from kernelmill import store
from kernelmill.config import repo_path, resolve_backend
from kernelmill.errors import InputError
from kernelmill.settings import Settings
from synth.annotate.annotator import order_curriculum
from synth.annotate.store import annotate_into
from synth.generate.generators import dialogue_id_for, is_declined, make_candidate, make_generator
from synth.generate.prompts import build_prompt
from synth.generate.repair import run_dialogues
from synth.mine.miner import mine_tasks, write_report

ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)
RAW = "raw"  # <run_dir>/raw: a store root for gathered, not yet annotated tasks


def no_progress(stage: str, done: int, total: int) -> None:
    pass


@dataclass(frozen=True)
class Arg:
    """One argument of a stage's CLI subcommand: argparse ``flags`` that set ``key`` (a field of
    the stage's section, ``section.key`` for another section, or ``run_dir``)."""
    flags: tuple[str, ...]
    key: str
    help: str
    type: Callable = str
    nargs: str | None = None
    cli_default: object = None  # the subcommand's value when neither the flag nor --set gives one


@dataclass(frozen=True)
class Stage:
    name: str
    section: str  # the [section] of the settings it owns
    reads: tuple[str, ...]  # tables under the run directory ("raw/tasks" for the gathered ones)
    writes: tuple[str, ...]
    run: Callable[[Path, Settings, ProgressFn], dict]
    help: str
    default: bool = True  # part of `kernelmill run` without --stages
    gpu: bool = False  # holds a slot of the flows' kernelmill-gpu limit
    ray: bool = False  # may run its work on a Ray cluster (flows.ray_address)
    command: str = ""  # CLI subcommand ("": the stage's name)
    cli: tuple[Arg, ...] = ()  # arguments of the subcommand besides --out and --set
    then: tuple[str, ...] = ()  # stages the subcommand runs after this one (gatherers annotate)

    @property
    def cli_name(self) -> str:
        return self.command or self.name


# ---------------------------------------------------------------------------- gathering


def _gather_key(what: str, settings) -> str:
    return f"{what}:" + json.dumps(dataclasses.asdict(settings), sort_keys=True, default=str)


def _gathered(run_dir: Path, what: str, settings) -> int | None:
    """How many tasks a gatherer stored with these settings in an earlier attempt, None if it did not."""
    marks = run_dir / RAW / "gathered.txt"
    key = _gather_key(what, settings)
    for line in marks.read_text().splitlines() if marks.is_file() else []:
        n, _, k = line.partition("\t")
        if k == key:
            return int(n)
    return None


def _save_gathered(run_dir: Path, what: str, settings, tasks: list) -> int:
    """Store gathered tasks in ``raw/tasks``, then mark the gatherer done with these settings (the
    mark comes second: a run killed in between gathers again rather than losing tasks)."""
    written = store.write_records(run_dir / RAW, "tasks", tasks)
    marks = run_dir / RAW / "gathered.txt"
    marks.parent.mkdir(parents=True, exist_ok=True)
    with open(marks, "a") as f:
        f.write(f"{len(tasks)}\t{_gather_key(what, settings)}\n")
    return written


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def load(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """KernelBench-format programs under ``load.dir`` -> ``raw/tasks`` (cheap: not marked, re-read)."""
    if not s.load.dir:
        return {"tasks": 0, "written": 0}
    res = load_kernelbench_dir(repo_path(s.load.dir), source=s.load.source, strict=False)
    written = store.write_records(run_dir / RAW, "tasks", res.tasks)
    return {"dir": s.load.dir, "tasks": len(res.tasks), "not_kernelbench": [str(e) for e in res.errors],
            "written": written}


def mine(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """Modules mined from ``mine.source`` -> ``raw/tasks``, ``mine_report.json`` and ``.md``."""
    if not s.mine.source:
        return {"tasks": 0, "written": 0}
    prior = _gathered(run_dir, "mine", s.mine)
    if prior is not None:
        return {"tasks": prior, "written": 0, "gathered_before": True}
    kw = {k: v for k, v in dataclasses.asdict(s.mine).items() if k not in ("source", "max_files")}
    res = mine_tasks(str(repo_path(s.mine.source)), max_files=s.mine.max_files or None, **kw)
    write_report(run_dir, res.report)
    written = _save_gathered(run_dir, "mine", s.mine, res.tasks)
    summary = {k: v for k, v in res.report.as_dict().items() if k != "modules"}  # per module: the file
    return {"tasks": len(res.tasks), "written": written, "mine_report": summary}


def nnsmith(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """``nnsmith.n`` NNSmith graphs from ``nnsmith.seed`` -> ``raw/tasks`` and ``nnsmith_skips.json``
    (seeded: the same settings give the same tasks)."""
    n = s.nnsmith
    if n.n <= 0:
        return {"tasks": 0, "written": 0}
    prior = _gathered(run_dir, "nnsmith", n)
    if prior is not None:
        return {"tasks": prior, "written": 0, "gathered_before": True}
    res = generate_nnsmith_tasks(n.n, n.seed, max_nodes=n.max_nodes, target_numel=n.target_numel,
                                 include_ops=n.include_ops or None, exclude_ops=n.exclude_ops or None,
                                 dtypes=n.dtypes or None)
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_json(run_dir / "nnsmith_skips.json", {"settings": res.settings, "generated": n.n, "emitted": len(res.tasks),
                                                 "skips": res.skips, "skipped": res.skipped})
    written = _save_gathered(run_dir, "nnsmith", n, res.tasks)
    return {"tasks": len(res.tasks), "skips": dict(res.skips), "written": written}


def annotate(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """Every gathered task not yet in ``tasks`` (or every task of ``annotate.from_dir``'s tasks
    table), annotated and written as it goes (synth/annotate/store.py). Tasks that fail annotation
    are listed by origin path, category and reason in ``annotate_failures.json``, not written; a
    resumed run does not try them again unless ``annotate.retry_failed``."""
    a = s.annotate
    source = Path(a.from_dir) if a.from_dir else run_dir / RAW
    if a.from_dir and not (source / "tasks").is_dir():
        raise InputError(a.from_dir, "has no tasks table (expected DIR/tasks/*.parquet)")
    rep = annotate_into(run_dir, store.read_records(source, "tasks"), device_spec=a.device_spec,
                        timeout_s=a.timeout_s, memory_limit_gb=a.memory_limit_gb, workers=a.workers,
                        real_budget_gb=a.real_budget_gb, retry_failed=a.retry_failed, flush_every=max(1, a.chunk),
                        progress=lambda done, total: progress("annotate", done, total))
    done = rep.annotated
    return {"annotated": len(done), "annotate_failures": len(rep.failures), "written": rep.written,
            "already_annotated": rep.already, "failed_before": rep.failed_before,
            "failures_by_category": rep.by_category(), "failures": rep.failure_lines(),
            "seconds": round(rep.seconds, 1), "slowest": [[p, round(sec, 1)] for p, sec in rep.slowest],
            "levels": {lvl: sum(t.level == lvl for t in done) for lvl in sorted({t.level for t in done})}}


# ---------------------------------------------------------------------------- candidates and verdicts


def generate(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """First-turn candidates: ``generate.samples_per_task`` responses for each task (curriculum
    order, at most ``generate.max_tasks``) that has no first-turn candidate from this generator and
    backend yet, written per task in task order. An endpoint is asked for up to
    ``generate.concurrency`` tasks at once (the teacher, one). Teacher declines are counted, not
    stored (as in repair). No verification here: the path for sampling a large model and verifying
    elsewhere."""
    backend = resolve_backend(s.run.backend)
    generator = make_generator(s.generate, backend=backend)
    tasks = order_curriculum(store.read_records(run_dir, "tasks"))
    tasks = tasks[:s.generate.max_tasks] if s.generate.max_tasks else tasks
    done = {c.task_id for c in store.read_records(run_dir, "candidates")
            if c.turn == 0 and c.backend == backend and c.generator == generator.name}
    todo = [t for t in tasks if t.task_id not in done]
    written = declined = 0
    progress("generate", 0, len(todo))

    def sample(task):
        messages = build_prompt(task, backend)
        return task, messages, generator.generate(messages, s.generate.samples_per_task)

    with ThreadPoolExecutor(max_workers=max(1, int(getattr(generator, "concurrency", 1)))) as pool:
        for i, (task, messages, responses) in enumerate(pool.map(sample, todo)):
            cands = []
            for n, response in enumerate(responses):
                if is_declined(generator, response):
                    declined += 1
                    continue
                cands.append(make_candidate(task.task_id, backend, generator, response,
                                            dialogue_id=dialogue_id_for(task.task_id, backend, generator.name, n),
                                            prompt=messages[-1].content))
            written += store.write_records(run_dir, "candidates", cands)
            progress("generate", i + 1, len(todo))
    return {"backend": backend, "generator": generator.name, "tasks": len(todo),
            "skipped_done": len(tasks) - len(todo), "declined": declined, "candidates_written": written}


def unverified(run_dir: Path, backend: str | None = None) -> list[tuple]:
    """(task, candidate) pairs whose candidate has no verdict yet, in candidate-id order."""
    tasks = {t.task_id: t for t in store.read_records(run_dir, "tasks")}
    verified = store.stored_ids(run_dir, "verdicts")
    items = [(tasks[c.task_id], c) for c in store.read_records(run_dir, "candidates")
             if c.candidate_id not in verified and c.task_id in tasks and (backend is None or c.backend == backend)]
    return sorted(items, key=lambda it: it[1].candidate_id)


def _verify_fn(s: Settings, stats: dict) -> Callable:
    """The local verifier, or Ray when ``flows.ray_address`` names a cluster (same signature)."""
    # Imported here: verifier.api imports torch and ray is an optional dependency; the stage list
    # (and `kernelmill --help`) loads without either.
    if s.flows.ray_address:
        from orchestrator.ray_verify import make_ray_verify_fn

        return make_ray_verify_fn(s.flows.ray_address, workers=s.flows.ray_workers, stats=stats)
    from verifier.api import verify_batch

    return verify_batch


def verify(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """A verdict for every candidate without one (``run.backend`` auto: every backend's), written in
    batches of ``flows.verify_flush_rows`` as they arrive, so a killed run loses at most one batch.

    Candidates of one task and backend with the same code (k samples of a confident model) are
    verified once: the others get a copy of that verdict under their own candidate id (counted in
    ``reused``). So a kernel that passes only some of the time is judged once per call, not per copy."""
    todo = unverified(run_dir, None if s.run.backend == "auto" else s.run.backend)
    copies: dict[tuple, list] = {}
    for task, cand in todo:
        copies.setdefault((cand.task_id, cand.backend, cand.code), []).append((task, cand))
    items = [group[0] for group in copies.values()]
    ray_stats: dict = {}
    verify_fn = _verify_fn(s, ray_stats)
    lock = threading.Lock()
    pending: list = []
    counts = {"candidates": len(todo), "verified": 0, "reused": len(todo) - len(items), "correct": 0, "written": 0}

    def flush() -> None:
        counts["written"] += store.write_records(run_dir, "verdicts", pending)
        pending.clear()

    def add(i: int, verdict) -> None:  # under lock
        cand = items[i][1]
        verdict.candidate_id = verdict.candidate_id or cand.candidate_id
        group = copies[(cand.task_id, cand.backend, cand.code)]
        for _, dup in group:
            v = verdict if dup is cand else dataclasses.replace(verdict, candidate_id=dup.candidate_id)
            pending.append(v)
            counts["correct"] += bool(v.correct)
        counts["verified"] += len(group)

    def on_verdict(i: int, verdict) -> None:
        with lock:  # verify_fn may call back from its own threads
            add(i, verdict)
            if len(pending) >= s.flows.verify_flush_rows:
                flush()
            progress("verify", counts["verified"], len(todo))

    progress("verify", 0, len(todo))
    if items:
        verdicts = verify_fn(items, config=s.verify, compile_workers=s.verify.compile_workers or None,
                             on_verdict=on_verdict)
        with lock:
            # a verify_fn that does not call back (or misses some) still gets its verdicts stored
            seen = {v.candidate_id for v in pending} | store.stored_ids(run_dir, "verdicts")
            for i, ((_, cand), v) in enumerate(zip(items, verdicts)):
                if (v.candidate_id or cand.candidate_id) not in seen:
                    add(i, v)
            flush()
    if ray_stats:  # where the work ran: workers (host, pid), chunks, concurrency, cluster, extensions built
        counts["ray"] = ray_stats
    return counts


def select_for_generation(tasks: list, limit: int) -> list:
    """At most ``limit`` tasks (0: all), taken round-robin across sources in curriculum order, so a
    budgeted run still covers seed, mined and NNSmith tasks. Deterministic for a given task list."""
    if not limit or limit >= len(tasks):
        return list(tasks)
    by_source: dict[str, list] = {}
    for t in tasks:
        by_source.setdefault(t.source, []).append(t)
    queues = [by_source[src] for src in sorted(by_source)]
    picked: list = []
    while len(picked) < limit:
        for q in queues:
            if q and len(picked) < limit:
                picked.append(q.pop(0))
    keep = {t.task_id for t in picked}
    return [t for t in tasks if t.task_id in keep]


def repair(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """Generate, verify and repair (synth/generate/repair.py) for the tasks ``select_for_generation`` picks
    (``repair.max_tasks``) that have no dialogue on this backend yet. Each task's candidates,
    verdicts and dialogues are stored as soon as it is done; tasks where every first-turn sample
    failed add a feedback-conditioned repair task to ``<run_dir>/repair_tasks.jsonl``."""
    backend = resolve_backend(s.run.backend)
    tasks = select_for_generation(order_curriculum(store.read_records(run_dir, "tasks")), s.repair.max_tasks)
    done = {d.task_id for d in store.read_records(run_dir, "dialogues") if d.backend == backend}
    todo = [t for t in tasks if t.task_id not in done]
    finished = [0]

    def save(result) -> None:
        if result.repair_tasks:  # before the dialogues: a task is only "done" once everything is stored
            with open(run_dir / "repair_tasks.jsonl", "a") as f:
                for rt in result.repair_tasks:
                    f.write(json.dumps(rt) + "\n")
        store.write_records(run_dir, "candidates", result.candidates)
        store.write_records(run_dir, "verdicts", result.verdicts)
        store.write_records(run_dir, "dialogues", result.dialogues)
        finished[0] += 1
        progress("repair", finished[0], len(todo))

    progress("repair", 0, len(todo))
    stats = run_dialogues(todo, make_generator(s.generate, backend=backend), backend=backend,
                          samples_per_task=s.generate.samples_per_task, max_turns=s.repair.max_turns,
                          verify_config=s.verify, on_task_done=save, task_batch=s.repair.task_batch)
    return {"backend": backend, "skipped_done": len(tasks) - len(todo), **stats}


# ---------------------------------------------------------------------------- corpora


def curate(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """sft / rft / rl corpora, dataset card and report, into ``curate.out`` (default: the run)."""
    if not run_dir.is_dir():
        raise InputError(f"run directory {run_dir}", "does not exist")
    return build_corpora(run_dir, Path(s.curate.out) if s.curate.out else run_dir, cfg=s.curate)


# ---------------------------------------------------------------------------- the list

_RUN_DIR = Arg(("run_dir",), "run_dir", "run directory holding a tasks table")
_BACKEND = Arg(("--backend",), "run.backend", "cuda, cpu or auto")

STAGES: tuple[Stage, ...] = (
    Stage("load", "load", (), ("raw/tasks",), load, "KernelBench-format programs (a directory of level folders) as tasks",
          cli=(Arg(("dir",), "dir", "a KernelBench directory (level1/, level2/, ...)"),
               Arg(("--source",), "source", "Task.source recorded on the tasks (default: kernelbench)",
                   cli_default="kernelbench")), then=("annotate",)),
    Stage("mine", "mine", (), ("raw/tasks",), mine, "mine nn.Module classes from code into KernelBench tasks",
          cli=(Arg(("source",), "source", "directory, git path or URL, or hf:NAME[:COLUMN]"),
               Arg(("--target-numel",), "target_numel", "scale inputs toward this many elements", int),
               Arg(("--timeout",), "timeout_s", "seconds per module in the sandbox", float),
               Arg(("--workers",), "workers", "sandbox processes", int),
               Arg(("--max-files",), "max_files", "stop after this many files", int)), then=("annotate",)),
    Stage("nnsmith", "nnsmith", (), ("raw/tasks",), nnsmith, "NNSmith graphs emitted as checked tasks, with skip reasons",
          cli=(Arg(("--n",), "n", "graphs to generate", int), Arg(("--seed",), "seed", "run seed (same seed, same tasks)", int),
               Arg(("--max-nodes",), "max_nodes", "ops per graph", int),
               Arg(("--include-ops",), "include_ops", "comma-separated nnsmith ops to use only", str, ","),
               Arg(("--exclude-ops",), "exclude_ops", "comma-separated nnsmith ops to leave out", str, ","),
               Arg(("--dtypes",), "dtypes", "comma-separated dtypes (float32, float16, float64)", str, ","),
               Arg(("--target-numel",), "target_numel", "elements per tensor to scale shapes toward", int)),
          then=("annotate",)),
    Stage("annotate", "annotate", ("raw/tasks",), ("tasks",), annotate,
          "annotate tasks: shapes, FLOPs, bytes, roofline floor, level",
          cli=(Arg(("from_dir",), "from_dir", "directory whose tasks table is annotated into --out"),
               Arg(("--device-spec",), "device_spec", "device for the roofline floor"),
               Arg(("--timeout-s",), "timeout_s", "per-task time limit", float))),
    Stage("generate", "generate", ("tasks", "candidates"), ("candidates",), generate,
          "first-turn candidates for a run's tasks (no verification)", default=False,
          cli=(_RUN_DIR, _BACKEND, Arg(("-n", "--samples"), "samples_per_task", "responses per task", int),
               Arg(("--limit",), "max_tasks", "at most this many tasks", int),
               Arg(("--bug-rate",), "bug_rate", "teacher: share of samples with a planted bug", float))),
    Stage("verify", "verify", ("tasks", "candidates", "verdicts"), ("verdicts",), verify,
          "a verdict for every candidate of a run without one (locally or on Ray)", default=False, gpu=True,
          ray=True, command="verify-run",
          cli=(_RUN_DIR, _BACKEND, Arg(("--ray",), "flows.ray_address", "Ray cluster: local, auto or ray://host:10001"))),
    Stage("repair", "repair", ("tasks", "dialogues"), ("candidates", "verdicts", "dialogues"), repair,
          "generate, verify and repair candidates: multi-turn dialogues for a run's tasks", gpu=True,
          cli=(_RUN_DIR, _BACKEND, Arg(("--samples",), "generate.samples_per_task", "first-turn samples per task", int),
               Arg(("--max-turns",), "max_turns", "turns per dialogue, the first included", int),
               Arg(("--limit",), "max_tasks", "at most this many tasks, round-robin over sources (0: all)", int))),
    Stage("curate", "curate", ("tasks", "candidates", "verdicts", "dialogues"), ("sft", "rft", "rl"), curate,
          "filter, decontaminate and deduplicate a run into sft/rft/rl corpora",
          cli=(_RUN_DIR, Arg(("--out",), "out", "corpus directory (default: RUN_DIR itself)"),
               Arg(("--decontaminate",), "decontaminate_dir", "benchmark directory to decontaminate against"),
               Arg(("--sft-min-speedup",), "sft_min_speedup", "keep sft rows at least P times faster than eager", float),
               Arg(("--rft-k",), "rft_max_per_task", "at most K distinct correct solutions per task in rft", int),
               Arg(("--rl-keep-trivial",), "rl_keep_trivial", "keep rl tasks with pass rate 0 or 1", bool))),
)

BY_NAME = {s.name: s for s in STAGES}
DEFAULT_STAGES = tuple(s.name for s in STAGES if s.default)
