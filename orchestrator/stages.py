"""The pipeline's stages: one list, in the order a task travels.

    STAGES          load, mine, nnsmith, annotate, generate, verify, repair, curate, train, loop
    Stage           name, the settings section it owns, the tables it reads and writes, ``run``,
                    what its CLI subcommand adds, and whether it holds the GPU or may use Ray

A stage is ``run(run_dir, settings, progress) -> dict`` (counts of what it did): a plain function
over a run directory and the typed settings (kernelmill/settings.py). Everything that runs a stage
takes it from ``STAGES``: ``kernelmill run [--stages]`` (orchestrator/pipeline.py), the CLI
subcommands (flows/cli.py), the Prefect flows and deployments (flows/, prefect.yaml) and Ray
dispatch (the verify stage's ``flows.ray_address``). Reading the stage functions below in order
follows one task from its source file to its Parquet row.

Every stage reads and writes through kernelmill.store (atomic, keyed by content hashes) and skips
work whose rows are already stored, so a run killed anywhere and started again ends with nothing
lost and nothing duplicated. Gathered tasks are kept unannotated under ``<run_dir>/raw/tasks`` (a
store root of its own: annotating a task does not change its id). What else a resumed run must not
redo is the runner's record (orchestrator/ledger.py; orchestrator.pipeline.run_stage writes it): the
slow gatherers (mine, nnsmith; ``Stage.once``) are recorded with the settings they ran with once their
tasks are stored, and the annotate stage's failed tasks are recorded so its next run leaves them out.
No stage writes that record. Not guaranteed: two processes writing one run directory at the same time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from curation.corpus import build_corpora
from graphs.kernelbench import load_kernelbench_dir
from graphs.nnsmith_tasks import generate_nnsmith_tasks
from kernelmill import store
from kernelmill.config import repo_path
from kernelmill.errors import InputError
from kernelmill.settings import Settings, keywords_for
from orchestrator import ledger
from synth.annotate.annotator import order_curriculum
from synth.annotate.store import AnnotationFailure, annotate_into, read_failures
from synth.generate.generators import dialogue_id_for, is_declined, make_candidate, make_generator
from synth.generate.prompts import build_prompt
from synth.generate.reasoning import template_trace
from synth.generate.repair import dialogue_chains, repair_dialogues
from verifier.common.config import resolve_backend

ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)
RAW = "raw"  # <run_dir>/raw: a store root for gathered, not yet annotated tasks


def no_progress(stage: str, done: int, total: int) -> None:
    pass


def note_progress(progress: ProgressFn, stage: str, line: str) -> None:
    """A line about a stage's work (a heartbeat, a verdict) for a reporter that prints lines: one with a
    ``note(stage, line)`` method (orchestrator.progress.StageProgress, the pipeline's hook); others get none."""
    note = getattr(progress, "note", None)
    if callable(note):
        note(stage, line)


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
    # a slow gatherer: the settings the runner records it done with (None: nothing to gather this time). The
    # runner (orchestrator.pipeline.run_stage) does not run it again with equal settings once its tasks are stored.
    once: Callable[[Settings], object] | None = None

    @property
    def cli_name(self) -> str:
        return self.command or self.name


# ---------------------------------------------------------------------------- gathering


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def load(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """KernelBench-format programs under ``load.dir`` -> ``raw/tasks`` (cheap: read again on every run)."""
    if not s.load.dir:
        return {"tasks": 0, "written": 0}
    res = load_kernelbench_dir(repo_path(s.load.dir), source=s.load.source, strict=False)
    if not res.tasks:  # a wrong directory is the user's to fix, not an empty success
        raise InputError(f"load.dir {s.load.dir}", "holds no KernelBench program (level folders of .py files "
                         "defining Model, get_inputs, get_init_inputs)" + (f"; {len(res.errors)} file(s) were not "
                                                                           f"KernelBench: {res.errors[0]}" if res.errors else ""))
    written = store.write_records(run_dir / RAW, "tasks", res.tasks)
    return {"dir": s.load.dir, "tasks": len(res.tasks), "not_kernelbench": [str(e) for e in res.errors],
            "written": written}


def mine_tasks(source: str, **kw):
    """synth.mine.miner.mine_tasks, imported on first call: the miner needs tree-sitter, which the GPU box
    (it imports this module for verify, train and the loop) does not have."""
    from synth.mine.miner import mine_tasks as mine_source

    return mine_source(source, **kw)


def mine(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """Modules mined from ``mine.source`` -> ``raw/tasks``, ``mine_report.json`` and ``.md`` (once per
    settings: ``Stage.once``)."""
    from synth.mine.miner import write_report  # tree-sitter: see mine_tasks
    if not s.mine.source:
        return {"tasks": 0, "written": 0}
    kw = {k: v for k, v in dataclasses.asdict(s.mine).items() if k not in ("source", "max_files")}
    res = mine_tasks(str(repo_path(s.mine.source)), max_files=s.mine.max_files or None,
                     progress=lambda done, total: progress("mine", done, total), **kw)
    write_report(run_dir, res.report)
    written = store.write_records(run_dir / RAW, "tasks", res.tasks)
    summary = {k: v for k, v in res.report.as_dict().items() if k != "modules"}  # per module: the file
    return {"tasks": len(res.tasks), "written": written, "mine_report": summary}


def nnsmith(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """``nnsmith.n`` NNSmith graphs from ``nnsmith.seed`` -> ``raw/tasks`` and ``nnsmith_skips.json``
    (seeded: the same settings give the same tasks; once per settings: ``Stage.once``)."""
    n = s.nnsmith
    if n.n <= 0:
        return {"tasks": 0, "written": 0}
    res = generate_nnsmith_tasks(n.n, n.seed, max_nodes=n.max_nodes, target_numel=n.target_numel,
                                 include_ops=n.include_ops or None, exclude_ops=n.exclude_ops or None,
                                 dtypes=n.dtypes or None)
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_json(run_dir / "nnsmith_skips.json", {"settings": res.settings, "generated": n.n, "emitted": len(res.tasks),
                                                 "skips": res.skips, "skipped": res.skipped})
    written = store.write_records(run_dir / RAW, "tasks", res.tasks)
    return {"tasks": len(res.tasks), "skips": dict(res.skips), "written": written}


def annotate(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """Every gathered task not yet in ``tasks`` (or every task of ``annotate.from_dir``'s tasks
    table), annotated and written as it goes (synth/annotate/store.py). Tasks that fail annotation
    are listed by origin path, category and reason in the report ``annotate_failures.json``, not
    written, and handed to the runner (under ledger.SKIP) for the run's ledger; a resumed run leaves
    the tasks the ledger records as failed out unless ``annotate.retry_failed``."""
    a = s.annotate
    source = Path(a.from_dir) if a.from_dir else run_dir / RAW
    if a.from_dir and not (source / "tasks").is_dir():
        raise InputError(a.from_dir, "has no tasks table (expected DIR/tasks/*.parquet)")
    tasks = store.read_records(source, "tasks")
    known = store.stored_ids(run_dir, "tasks") if (run_dir / "tasks").is_dir() else set()
    prior = ledger.entries(run_dir).get("annotate")
    recorded = set(prior.skip) - known if prior else set()
    left_out = set() if a.retry_failed else recorded
    rep = annotate_into(run_dir, [t for t in tasks if t.task_id not in left_out], device_spec=a.device_spec,
                        timeout_s=a.timeout_s, memory_limit_gb=a.memory_limit_gb, workers=a.workers,
                        real_budget_gb=a.real_budget_gb, retry_failed=True, flush_every=max(1, a.chunk),
                        progress=lambda done, total: progress("annotate", done, total),
                        log_progress=False)  # its runner shows progress (the CLI's lines or bars, a flow's artifact)
    failed_now = {f.task_id for f in rep.failures}
    reported = read_failures(run_dir)
    before = [reported.get(t.task_id) or AnnotationFailure(t.task_id, t.name, t.origin.path or t.name, t.level,
                                                           "recorded", "failed in an earlier run (the run's ledger)")
              for t in tasks if t.task_id in left_out]
    rep.failures, rep.failed_before = before + rep.failures, len(before)
    ids = {t.task_id for t in tasks}
    skip = (recorded - (ids if a.retry_failed else set())) | failed_now
    done = rep.annotated
    return {"annotated": len(done), "annotate_failures": len(rep.failures), "written": rep.written,
            "already_annotated": rep.already, "failed_before": rep.failed_before,
            "failures_by_category": rep.by_category(), "failures": rep.failure_lines(),
            "seconds": round(rep.seconds, 1), "slowest": [[p, round(sec, 1)] for p, sec in rep.slowest],
            "levels": {lvl: sum(t.level == lvl for t in done) for lvl in sorted({t.level for t in done})},
            ledger.SKIP: sorted(skip)}


# ---------------------------------------------------------------------------- candidates and verdicts


def select_tasks(tasks: list, per_level: int) -> list[list]:
    """The one task selection rule: per level (ascending), the level's tasks taken round-robin over
    their sources (sorted by name), each source in curriculum order -- so a budgeted run covers every
    level and every source. ``per_level`` is how many the caller takes from the front of each list
    (0: all); the lists hold every task so a caller can go on past tasks its generator declines.
    Deterministic for a given task list."""
    out = []
    for level in sorted({t.level for t in tasks}):
        by_source: dict[str, list] = {}
        for t in order_curriculum([t for t in tasks if t.level == level]):
            by_source.setdefault(t.source, []).append(t)
        queues = [list(by_source[src]) for src in sorted(by_source)]
        picked: list = []
        while any(queues):
            for q in queues:
                if q:
                    picked.append(q.pop(0))
        out.append(picked)
    return out


def generate(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """First-turn candidates, each the first turn of a dialogue (``dialogue_id_for``):
    ``generate.samples_per_task`` responses for each task ``select_tasks`` picks -- per level, the
    first ``generate.tasks_per_level`` tasks that get at least one candidate from this generator on
    this backend (tasks already sampled count; a task the teacher declines does not) -- written per
    task with the prompt sent (``Candidate.prompt``). An endpoint is asked for up to
    ``generate.concurrency`` tasks at once (the teacher, one). No verification here: the verify stage
    judges them, and the repair stage continues the failed ones."""
    backend = resolve_backend(s.run.backend, "run.backend")
    generator = make_generator(s.generate, backend=backend)
    per_level = s.generate.tasks_per_level
    sampled = {c.task_id for c in store.read_records(run_dir, "candidates")
               if c.turn == 0 and c.backend == backend and c.generator == generator.name}
    levels = select_tasks(store.read_records(run_dir, "tasks"), per_level)
    counts = {"backend": backend, "generator": generator.name, "tasks": 0, "skipped_done": 0, "declined": 0,
              "candidates_written": 0, "levels": {}}
    total = sum(min(len(lv), per_level) if per_level else len(lv) for lv in levels)
    progress("generate", 0, total)

    def sample(task):
        messages = build_prompt(task, backend)
        return task, messages, generator.generate(messages, s.generate.samples_per_task)

    with ThreadPoolExecutor(max_workers=max(1, generator.concurrency)) as pool:
        for tasks in levels:
            have = sum(t.task_id in sampled for t in tasks)
            counts["skipped_done"] += have
            queue = [t for t in tasks if t.task_id not in sampled]
            while queue and (not per_level or have < per_level):
                batch, queue = (queue[:per_level - have], queue[per_level - have:]) if per_level else (queue, [])
                for task, messages, responses in pool.map(sample, batch):
                    cands = []
                    for n, response in enumerate(responses):
                        if is_declined(generator, response):
                            counts["declined"] += 1
                            continue
                        cands.append(make_candidate(
                            task.task_id, backend, generator, response,
                            dialogue_id=dialogue_id_for(task.task_id, backend, generator.name, n),
                            prompt=messages[-1].content,
                            # the teacher's first turn carries the task's annotated reasoning trace
                            reasoning=None if generator.is_llm else template_trace(task, backend)))
                    counts["candidates_written"] += store.write_records(run_dir, "candidates", cands)
                    if cands:
                        have += 1
                        counts["tasks"] += 1
                        counts["levels"][task.level] = counts["levels"].get(task.level, 0) + 1
                        progress("generate", counts["tasks"] + counts["skipped_done"], total)
    return counts


def unverified(run_dir: Path, backend: str | None = None) -> list[tuple]:
    """(task, candidate) pairs whose candidate has no verdict yet, in candidate-id order."""
    tasks = {t.task_id: t for t in store.read_records(run_dir, "tasks")}
    verified = store.stored_ids(run_dir, "verdicts")
    items = [(tasks[c.task_id], c) for c in store.read_records(run_dir, "candidates")
             if c.candidate_id not in verified and c.task_id in tasks and (backend is None or c.backend == backend)]
    return sorted(items, key=lambda it: it[1].candidate_id)


def verify_items(run_dir: Path, s: Settings, todo: list[tuple], progress: ProgressFn = no_progress,
                 stage: str = "verify") -> tuple[dict, dict]:
    """Verify (task, candidate) pairs through the one entry (verifier.entry.verify: identical code judged
    once, copies get its verdict under their own id; on Ray with ``flows.ray_address``) and write the
    verdicts: the verify stage's work, which the repair stage calls for every turn it adds. Returns
    (counts, {candidate_id: verdict}).

    Verdicts are written in batches of ``flows.verify_flush_rows`` as the entry hands them out, so a killed
    run loses at most one batch; what was handed out before an error (Ray out of attempts) is written too."""
    # Imported here: verifier.engine imports torch and ray is an optional dependency; the stage list
    # (and `kernelmill --help`) loads without either.
    from verifier.entry import VerifyStats, ray_target, verify as verify_entry

    lock = threading.Lock()
    pending: list = []
    got: dict = {}
    stats = VerifyStats()
    counts = {"candidates": len(todo), "verified": 0, "reused": 0, "correct": 0, "written": 0}

    def flush() -> None:
        counts["written"] += store.write_records(run_dir, "verdicts", pending)
        pending.clear()

    t0 = time.monotonic()

    def on_verdict(_i: int, verdict) -> None:
        with lock:  # the entry calls back from its execution threads
            pending.append(verdict)
            got[verdict.candidate_id] = verdict
            counts["verified"] += 1
            counts["correct"] += bool(verdict.correct)
            if len(pending) >= s.flows.verify_flush_rows:
                flush()
            progress(stage, counts["verified"], len(todo))
            note_progress(progress, stage, f"{counts['verified']}/{len(todo)} {verdict_line(verdict)} "
                                           f"({time.monotonic() - t0:.0f} s)")

    def heartbeat() -> str:
        live = dict(stats.live)
        with lock:
            done = counts["verified"]
        parts = [f"verified {done}/{len(todo)}"]
        if live:  # the local engine's counts (none on Ray)
            parts += [f"compiled {live.get('compiled', 0)}", f"executing {live.get('executing', 0)}"]
        return ", ".join(parts) + f", pending {max(0, len(todo) - done)} ({time.monotonic() - t0:.0f} s)"

    progress(stage, 0, len(todo))
    try:
        if todo:
            with _heartbeat(lambda: note_progress(progress, stage, heartbeat()), s.run.progress_every_s):
                verify_entry(todo, config=s.verify, ray=ray_target(s.flows.ray_address, s.flows.ray_workers),
                             compile_workers=s.verify.compile_workers or None, on_verdict=on_verdict, stats=stats)
    finally:
        with lock:
            flush()
    counts["reused"] = stats.reused
    if stats.ray:  # where the work ran: workers (host, pid), chunks, concurrency, cluster, extensions built
        counts["ray"] = stats.ray
    return counts, got


def verdict_line(v) -> str:
    """One verdict as a progress line says it: candidate, status, reward, speedup with its interval."""
    sp = ""
    if v.speedup_eager is not None:
        sp = f", {v.speedup_eager:.2f}x" + (f" [{v.speedup_lo:.2f}, {v.speedup_hi:.2f}]"
                                            if v.speedup_lo is not None and v.speedup_hi is not None else "")
    return f"{v.candidate_id} {v.status or '?'} (reward {v.reward:.2f}{sp})"


@contextlib.contextmanager
def _heartbeat(beat: Callable[[], None], every_s: float):
    """``beat()`` every ``every_s`` seconds on a daemon thread while the block runs (a stage whose items take
    minutes, as compiling does, still says what it is doing); stopped, and joined, when the block ends."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(max(every_s, 0.01)):
            try:
                beat()
            except Exception:  # noqa: BLE001 - a progress line never stops the work
                pass

    t = threading.Thread(target=loop, name="km-heartbeat", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def verify(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """A verdict for every candidate without one (``run.backend`` auto: every backend's), through
    ``verify_items`` (batched writes, identical code judged once, Ray when asked)."""
    todo = unverified(run_dir, None if s.run.backend == "auto" else s.run.backend)
    return verify_items(run_dir, s, todo, progress)[0]


def repair(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """Continue every stored dialogue of this generator and backend that has no Dialogue record yet
    (synth/generate/repair.py): a failed latest turn gets the verifier's feedback as the next user
    turn and a new answer from the same generator, verified by ``verify_items`` (the verify stage's
    function), up to ``repair.max_turns`` turns. Candidates are written per round, verdicts in the
    verify stage's batches, each Dialogue as soon as it closes. Tasks where every first-turn sample
    failed add a feedback-conditioned repair task to ``<run_dir>/repair_tasks.jsonl``. It samples no
    first turn: that is the generate stage's (a first turn without a verdict is verified here). Progress
    counts turns verified, one by one as their verdicts arrive."""
    backend = resolve_backend(s.run.backend, "run.backend")
    generator = make_generator(s.generate, backend=backend)
    tasks = {t.task_id: t for t in store.read_records(run_dir, "tasks")}
    done = store.stored_ids(run_dir, "dialogues")
    chains = {d: ch for d, ch in dialogue_chains(store.read_records(run_dir, "candidates"), backend=backend,
                                                 generator=generator.name).items() if d not in done}
    for ch in chains.values():  # the teacher explains the bug it planted in another process (a model: a no-op)
        sample = next((i for i in range(max(s.generate.samples_per_task, 64))
                       if dialogue_id_for(ch[0].task_id, backend, generator.name, i) == ch[0].dialogue_id), 0)
        for c in ch:
            generator.recall(c.response, bug=c.injected_bug, variant=sample)
    wanted = {c.candidate_id for ch in chains.values() for c in ch}
    verdicts = {v.candidate_id: v for v in store.read_records(run_dir, "verdicts") if v.candidate_id in wanted}
    verify_counts: dict = {}

    def verify_fn(items: list[tuple], done: Callable[[int], None]) -> dict:
        counts, got = verify_items(run_dir, s, items, progress=lambda _stage, n, _total: done(n),
                                   stage="repair-verify")
        for k, v in counts.items():
            if isinstance(v, int):
                verify_counts[k] = verify_counts.get(k, 0) + v
        return got

    def write_repair_tasks(found: list[dict]) -> None:
        path = run_dir / "repair_tasks.jsonl"
        have = {json.loads(line)["repair_task_id"] for line in path.read_text().splitlines()} if path.is_file() else set()
        new = [rt for rt in found if rt["repair_task_id"] not in have]
        if new:
            with open(path, "a") as f:
                f.writelines(json.dumps(rt) + "\n" for rt in new)

    stats = repair_dialogues(chains, tasks, generator, backend=backend, max_turns=s.repair.max_turns,
                             verdicts=verdicts, verify=verify_fn,
                             save_candidates=lambda cands: store.write_records(run_dir, "candidates", cands),
                             on_closed=lambda dls: store.write_records(run_dir, "dialogues", dls),
                             on_first_turns=write_repair_tasks,
                             progress=lambda done_, total: progress("repair", done_, total))
    return {"backend": backend, "generator": generator.name, "skipped_done": len(done), **stats,
            "verify": verify_counts}


# ---------------------------------------------------------------------------- corpora


def curate(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """sft / rft / rl corpora, dataset card and report, into ``curate.out`` (default: the run)."""
    if not run_dir.is_dir():
        raise InputError(f"run directory {run_dir}", "does not exist")
    return build_corpora(run_dir, Path(s.curate.out) if s.curate.out else run_dir, cfg=s.curate)


# ---------------------------------------------------------------------------- training


def train(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """``train.kind`` on the run's corpus (``curate.out``, default the run directory) into
    ``train.out`` (default ``<run_dir>/train/<kind>``): sft or rft fine-tuning (train/sft.py) from
    ``train.model`` (empty: a tiny model), or GRPO (train/rl.py) from ``train.model`` or the run's
    sft output, rewarded by the verifier on ``run.backend`` (in this process, or through the verifier service
    ``train.verifier_url`` names). Resumes from checkpoints in the output.
    Not in the default run."""
    t = s.train
    corpus = Path(s.curate.out) if s.curate.out else run_dir
    out = Path(t.out) if t.out else run_dir / "train" / t.kind
    if not (corpus / t.kind).is_dir():
        raise InputError(f"corpus {corpus}", f"has no {t.kind}/ corpus; run the curate stage first")
    if t.kind in ("sft", "rft"):
        from train.sft import train_sft  # torch and transformers: seconds to import

        return train_sft(corpus, out, config=t.kind, init=t.model, **keywords_for(train_sft, t),
                         progress=lambda done, total: progress("train", done, total))
    init = t.model or str(run_dir / "train" / "sft")
    if not Path(init).exists():
        raise InputError("train.model", "is empty and the run has no train/sft output to start RL from")
    from train.rl import train_rl
    from verifier.entry import ray_target

    return train_rl(corpus, out, init=init, backend=resolve_backend(s.run.backend, "run.backend"),
                    verify_cfg=s.verify, verify_ray=ray_target(s.flows.ray_address, s.flows.ray_workers),
                    **keywords_for(train_rl, t),
                    on_step=lambda m: progress("train", int(m.get("step", 0)), t.rl_steps))


def loop(run_dir: Path, s: Settings, progress: ProgressFn = no_progress) -> dict:
    """``loop.rounds`` rounds of generate -> verify -> repair -> curate on the training split with the
    current model, RFT on the correct answers, and an evaluation of each model on the held-out split
    (orchestrator/loop.py; metrics in ``<run_dir>/loop/metrics.jsonl`` and ``loop.md``). Not in the
    default run."""
    from orchestrator.loop import run_loop  # train and the server: imported when the loop runs

    return run_loop(run_dir, s, progress, {n: BY_NAME[n].run for n in ("generate", "verify", "repair", "curate")})


# ---------------------------------------------------------------------------- the list

_RUN_DIR = Arg(("run_dir",), "run_dir", "run directory holding a tasks table")
_BACKEND = Arg(("--backend",), "run.backend", "cuda, cpu or auto")

STAGES: tuple[Stage, ...] = (
    Stage("load", "load", (), ("raw/tasks",), load, "KernelBench-format programs (a directory of level folders) as tasks",
          cli=(Arg(("dir",), "dir", "a KernelBench directory (level1/, level2/, ...)"),
               Arg(("--source",), "source", "Task.source recorded on the tasks (default: kernelbench)",
                   cli_default="kernelbench")), then=("annotate",)),
    Stage("mine", "mine", (), ("raw/tasks",), mine, "mine nn.Module classes from code into KernelBench tasks",
          once=lambda s: s.mine if s.mine.source else None,
          cli=(Arg(("source",), "source", "directory, git path or URL, or hf:NAME[:COLUMN]"),
               Arg(("--target-numel",), "target_numel", "scale inputs toward this many elements", int),
               Arg(("--timeout",), "timeout_s", "seconds per module in the sandbox", float),
               Arg(("--workers",), "workers", "sandbox processes", int),
               Arg(("--max-files",), "max_files", "stop after this many files", int)), then=("annotate",)),
    Stage("nnsmith", "nnsmith", (), ("raw/tasks",), nnsmith, "NNSmith graphs emitted as checked tasks, with skip reasons",
          once=lambda s: s.nnsmith if s.nnsmith.n > 0 else None,
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
          "first-turn candidates (teacher or LLM) for the tasks the selection rule picks on every level",
          cli=(_RUN_DIR, _BACKEND, Arg(("-n", "--samples"), "samples_per_task", "responses per task", int),
               Arg(("--per-level",), "tasks_per_level", "tasks per level, round-robin over sources (0: all)", int),
               Arg(("--bug-rate",), "bug_rate", "teacher: share of samples with a planted bug", float))),
    Stage("verify", "verify", ("tasks", "candidates", "verdicts"), ("verdicts",), verify,
          "a verdict for every candidate of a run without one (locally or on Ray)", gpu=True,
          ray=True, command="verify-run",
          cli=(_RUN_DIR, _BACKEND, Arg(("--ray",), "flows.ray_address", "Ray cluster: local, auto or ray://host:10001"))),
    Stage("repair", "repair", ("tasks", "candidates", "verdicts", "dialogues"), ("candidates", "verdicts", "dialogues"),
          repair, "continue failed first turns: verifier feedback as the next turn, verified like the verify stage",
          gpu=True, ray=True,
          cli=(_RUN_DIR, _BACKEND, Arg(("--max-turns",), "max_turns", "turns per dialogue, the first included", int),
               Arg(("--ray",), "flows.ray_address", "Ray cluster: local, auto or ray://host:10001"))),
    Stage("curate", "curate", ("tasks", "candidates", "verdicts", "dialogues"), ("sft", "rft", "rl"), curate,
          "filter, decontaminate and deduplicate a run into sft/rft/rl corpora",
          cli=(_RUN_DIR, Arg(("--out",), "out", "corpus directory (default: RUN_DIR itself)"),
               Arg(("--decontaminate",), "decontaminate_dir", "benchmark directory to decontaminate against"),
               Arg(("--sft-min-speedup",), "sft_min_speedup", "keep sft rows at least P times faster than eager", float),
               Arg(("--rft-k",), "rft_max_per_task", "at most K distinct correct solutions per task in rft", int),
               Arg(("--rl-keep-trivial",), "rl_keep_trivial", "keep rl tasks with pass rate 0 or 1", bool))),
    Stage("train", "train", ("sft", "rft", "rl"), ("train/<kind>",), train,
          "fine-tune on the run's corpus: sft, rft or rl (GRPO rewarded by the verifier)", default=False, gpu=True,
          command="train-run",
          cli=(_RUN_DIR, _BACKEND, Arg(("--kind",), "kind", "sft, rft or rl"),
               Arg(("--init",), "model", "model to start from (rl default: RUN_DIR/train/sft)"),
               Arg(("--out",), "out", "output directory (default: RUN_DIR/train/KIND)"))),
    Stage("loop", "loop", ("tasks",), ("loop/",), loop,
          "rounds of sample, verify, repair, curate and RFT from a checkpoint or endpoint, evaluated on held-out tasks",
          default=False, gpu=True,
          cli=(_RUN_DIR, _BACKEND, Arg(("--rounds",), "rounds", "rounds of sampling and RFT", int),
               Arg(("--model",), "model", "starting checkpoint (default: the generate.base_url endpoint)"),
               Arg(("-k",), "k", "samples per task", int))),
)

BY_NAME = {s.name: s for s in STAGES}
DEFAULT_STAGES = tuple(s.name for s in STAGES if s.default)
