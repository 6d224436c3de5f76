"""The main job as plain stage functions over a run directory, in the order a task travels.

    stage_tasks       seed KernelBench programs + mined code + NNSmith graphs -> annotated Task rows
                      (= stage_load + stage_mine + stage_nnsmith into raw/tasks, then stage_annotate)
    stage_dialogues   prompts -> candidates (teacher or LLM) -> verifier -> repair turns -> Dialogue rows
                      (= stage_repair; stage_generate and stage_verify run its first two steps alone,
                      for sampling and verification at scale outside dialogues)
    stage_curate      rejection filtering, dedup, decontamination -> sft / rft / rl corpora + card + report
    summarize         a DuckDB query over the Parquet files, printed at the end of a run

Gathered tasks are kept unannotated under ``<run_dir>/raw/tasks`` (a store root of its own, since
a task's id does not change when it is annotated), so mining and NNSmith generation are not
repeated when a run resumes. Long stages report progress through ``progress(stage, done, total)``
or, when none is passed, through the hook set by :func:`set_progress_hook` (the CLI's bar).

Every stage reads and writes the run directory through kernelmill.store (atomic, keyed by content
hashes), and skips work whose rows are already there, so a killed run started again finishes with
nothing lost and nothing duplicated. The Prefect flow (flows/pipeline.py) calls these functions
as tasks and adds retries, caching and artifacts; nothing here imports prefect.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

from kernelmill import store
from kernelmill.config import REPO_ROOT, default_backend

log = logging.getLogger("kernelmill.pipeline")


def _repo_path(p: str) -> Path:
    path = Path(p)
    return path if path.is_absolute() else REPO_ROOT / path


def resolve_backend(cfg: dict, backend: str | None = None) -> str:
    b = backend or cfg["run"].get("backend", "auto")
    return default_backend() if b == "auto" else b


# ---------------------------------------------------------------------------- progress and resume

ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)
_progress_hook: ProgressFn | None = None


def set_progress_hook(fn: ProgressFn | None) -> ProgressFn | None:
    """Install the progress callback used when a stage is given none; returns the previous one."""
    global _progress_hook
    prev, _progress_hook = _progress_hook, fn
    return prev


def _report(progress: ProgressFn | None, stage: str, done: int, total: int) -> None:
    fn = progress or _progress_hook
    if fn is not None:
        fn(stage, done, total)


RAW = "raw"  # <run_dir>/raw: a store root for gathered, not yet annotated tasks


def sweep_partial_writes(run_dir: str | os.PathLike) -> list[Path]:
    """Delete the temporary files a process killed mid-write left in the run's table folders.

    A write renames its temporary file into place only once it is complete (kernelmill.store), so
    a ``.tmp-*.parquet`` file is never part of a table; it must not be read (it may be truncated)
    and is removed before a run resumes. Assumes no other process is writing this run directory
    at the same time (one writer per run, as the store requires)."""
    root = Path(run_dir)
    removed = []
    for table in store.TABLES:
        for base in (root, root / RAW):
            d = base / table
            if d.is_dir():
                for f in d.glob(".tmp-*"):
                    f.unlink(missing_ok=True)
                    removed.append(f)
    if removed:
        log.warning("removed %d partial write(s) left by a killed run: %s", len(removed),
                    ", ".join(str(f) for f in removed))
    return removed


def dir_fingerprint(path: str | os.PathLike) -> str:
    """A content hash of every file under ``path`` (names and bytes): a cache key for sources."""
    import hashlib

    root = Path(path)
    h = hashlib.sha256()
    files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.is_file())
    for f in files:
        h.update(str(f.relative_to(root) if f != root else f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------- tasks


def gather_seed(source: str) -> list:
    """KernelBench-format programs under ``source`` as unannotated Task rows (pure: no writes)."""
    from graphs.kernelbench import load_kernelbench_dir

    return list(load_kernelbench_dir(_repo_path(source), source="seed").tasks)


def gather_mined(source: str, mine_cfg: dict) -> tuple[list, dict]:
    """Mined tasks and the mining report (pure: no writes)."""
    from synth.mine import mine_tasks

    mined = mine_tasks(str(_repo_path(source)), target_numel=mine_cfg["target_numel"],
                       timeout_s=mine_cfg["timeout_s"], license_allowlist=mine_cfg["license_allowlist"])
    return list(mined.tasks), mined.report.as_dict()


def gather_nnsmith(n: int, seed: int, nnsmith_cfg: dict) -> tuple[list, dict]:
    """NNSmith-generated tasks and the skip counts (pure and seeded: same arguments, same tasks)."""
    from graphs.nnsmith_tasks import generate_nnsmith_tasks

    res = generate_nnsmith_tasks(n, seed, max_nodes=nnsmith_cfg["max_nodes"], target_numel=nnsmith_cfg["target_numel"],
                                 dtypes=nnsmith_cfg.get("dtypes") or None)
    return list(res.tasks), dict(res.skips)


def write_raw_tasks(run_dir: str | os.PathLike, tasks: list) -> int:
    """Append gathered tasks to ``<run_dir>/raw/tasks``; returns rows written (0 for known ids)."""
    return store.write_records(Path(run_dir) / RAW, "tasks", tasks)


def stage_load(run_dir: str | os.PathLike, cfg: dict, source: str | None = None) -> dict:
    """Seed / KernelBench programs (``source`` or run.seed_tasks) -> raw tasks."""
    source = source if source is not None else cfg["run"].get("seed_tasks", "")
    if not source:
        return {"seed": 0, "written": 0}
    tasks = gather_seed(source)
    return {"seed": len(tasks), "written": write_raw_tasks(run_dir, tasks)}


def stage_mine(run_dir: str | os.PathLike, cfg: dict, source: str | None = None) -> dict:
    """Mined GitHub-style code (``source`` or run.mine_source) -> raw tasks + ``mine_report.json``."""
    import json

    source = source if source is not None else cfg["run"].get("mine_source", "")
    if not source:
        return {"github": 0, "written": 0}
    tasks, report = gather_mined(source, cfg["mine"])
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "mine_report.json").write_text(json.dumps(report, indent=2, default=str))
    written = save_gathered(run_dir, "mine", {"source": source, **cfg["mine"]}, tasks)
    summary = {k: v for k, v in report.items() if k != "modules"}  # per-module detail stays in the file
    return {"github": len(tasks), "mine_report": summary, "written": written}


def save_gathered(run_dir: str | os.PathLike, what: str, settings: dict, tasks: list) -> int:
    """Store gathered tasks in ``raw/tasks``, then mark the gatherer done with these settings
    (the mark comes second, so a run killed in between gathers again rather than losing tasks)."""
    written = write_raw_tasks(run_dir, tasks)
    _mark_gathered(run_dir, what, settings, len(tasks))
    return written


def _gather_key(what: str, settings: dict) -> str:
    import json

    return f"{what}:" + json.dumps(settings, sort_keys=True, default=str)


def _mark_gathered(run_dir: str | os.PathLike, what: str, settings: dict, n: int) -> None:
    """Record, after its tasks are stored, that a gatherer ran with these settings."""
    marks = Path(run_dir) / RAW / "gathered.txt"
    marks.parent.mkdir(parents=True, exist_ok=True)
    with open(marks, "a") as f:
        f.write(f"{n}\t{_gather_key(what, settings)}\n")


def _gathered(run_dir: str | os.PathLike, what: str, settings: dict) -> int | None:
    """How many tasks a gatherer stored with these settings in an earlier attempt, None if it did not."""
    marks = Path(run_dir) / RAW / "gathered.txt"
    key = _gather_key(what, settings)
    for line in marks.read_text().splitlines() if marks.is_file() else []:
        n, _, k = line.partition("\t")
        if k == key:
            return int(n)
    return None


def stage_nnsmith(run_dir: str | os.PathLike, cfg: dict, n: int | None = None, seed: int | None = None) -> dict:
    """NNSmith graphs (``n``/``seed`` or run.nnsmith_n/nnsmith_seed) -> raw tasks."""
    n = cfg["run"].get("nnsmith_n", 0) if n is None else n
    seed = cfg["run"].get("nnsmith_seed", 0) if seed is None else seed
    if n <= 0:
        return {"nnsmith": 0, "written": 0}
    tasks, skips = gather_nnsmith(n, seed, cfg["nnsmith"])
    written = save_gathered(run_dir, "nnsmith", {"n": n, "seed": seed, **cfg["nnsmith"]}, tasks)
    return {"nnsmith": len(tasks), "nnsmith_skips": skips, "written": written}


def stage_annotate(run_dir: str | os.PathLike, cfg: dict, progress: ProgressFn | None = None,
                   chunk: int = 64) -> dict:
    """Annotate every raw task not yet in the ``tasks`` table, writing each chunk as it is done.

    Tasks that fail annotation are counted (and listed in ``annotate_failures.json``), not written;
    a resumed run tries them again."""
    import json

    from synth.annotate import annotate_tasks

    a = cfg["annotate"]
    known = store.stored_ids(run_dir, "tasks")
    todo = [t for t in store.read_records(Path(run_dir) / RAW, "tasks") if t.task_id not in known]
    annotated = written = 0
    failures: list = []
    _report(progress, "annotate", 0, len(todo))
    for i in range(0, len(todo), chunk):
        done, failed = annotate_tasks(todo[i:i + chunk], device_spec=a["device_spec"], timeout_s=a.get("timeout_s", 60),
                                      memory_limit_gb=a.get("memory_limit_gb", 16.0))
        annotated += len(done)
        failures += failed
        written += store.write_records(run_dir, "tasks", done)
        _report(progress, "annotate", min(i + chunk, len(todo)), len(todo))
    if failures:
        (Path(run_dir) / "annotate_failures.json").write_text(json.dumps([list(f) for f in failures], indent=1))
    return {"annotated": annotated, "annotate_failures": len(failures), "written": written,
            "already_annotated": len(known)}


def stage_tasks(run_dir: str | os.PathLike, cfg: dict) -> dict:
    """Gather tasks from every configured source, annotate them, write the ``tasks`` table.

    Returns counts per source. Sources whose setting is empty or zero are skipped. Gathered tasks
    are kept in ``raw/tasks`` first, so a resumed run does not mine or generate again."""
    counts: dict = {}
    run = cfg["run"]
    if run.get("seed_tasks"):
        counts["seed"] = stage_load(run_dir, cfg)["seed"]
    # Mining and NNSmith are the slow gatherers: when an earlier attempt of this run stored their
    # tasks with the same settings (a mark written after the tasks), they are not run again.
    if run.get("mine_source"):
        prior = _gathered(run_dir, "mine", {"source": run["mine_source"], **cfg["mine"]})
        if prior is None:
            r = stage_mine(run_dir, cfg)
            counts["github"], counts["mine_report"] = r["github"], r["mine_report"]
        else:
            counts["github"] = prior
    if run.get("nnsmith_n", 0) > 0:
        prior = _gathered(run_dir, "nnsmith", {"n": run["nnsmith_n"], "seed": run.get("nnsmith_seed", 0), **cfg["nnsmith"]})
        if prior is None:
            r = stage_nnsmith(run_dir, cfg)
            counts["nnsmith"], counts["nnsmith_skips"] = r["nnsmith"], r["nnsmith_skips"]
        else:
            counts["nnsmith"] = prior
    a = stage_annotate(run_dir, cfg)
    counts.update(annotated=a["annotated"], annotate_failures=a["annotate_failures"], written=a["written"])
    return counts


# ---------------------------------------------------------------------------- candidates and verdicts


def stage_generate(run_dir: str | os.PathLike, cfg: dict, backend: str | None = None,
                   progress: ProgressFn | None = None) -> dict:
    """First-turn candidates: ``run.samples_per_task`` responses per task that has no first-turn
    candidate from this generator and backend yet, written per task to the ``candidates`` table.

    No verification and no repair here (stage_verify, stage_repair); this is the path for sampling
    a large model over many tasks and verifying elsewhere."""
    from synth.annotate import order_curriculum
    from synth.generate import make_generator
    from synth.prompts import build_prompt
    from kernelmill.schema import Candidate

    backend = resolve_backend(cfg, backend)
    run = cfg["run"]
    generator = make_generator(cfg["generate"], backend=backend, bug_rate=run["bug_rate"], seed=run.get("nnsmith_seed", 0))
    tasks = order_curriculum(store.read_records(run_dir, "tasks"))
    done = {c.task_id for c in store.read_records(run_dir, "candidates")
            if c.turn == 0 and c.backend == backend and c.generator == generator.name}
    todo = [t for t in tasks if t.task_id not in done]
    written = 0
    _report(progress, "generate", 0, len(todo))
    for i, task in enumerate(todo):
        messages = build_prompt(task, backend)
        prompt = messages[-1].content  # as synth.repair records a turn's prompt: the last message
        cands = []
        for response in generator.generate(messages, run["samples_per_task"]):
            code = _extract_or_raw(response)
            cands.append(Candidate(candidate_id=Candidate.make_id(task.task_id, backend, code), task_id=task.task_id,
                                   backend=backend, generator=generator.name, code=code, turn=0,
                                   prompt=prompt, response=response,
                                   injected_bug=getattr(generator, "injected_bug", lambda r: "")(response)))
        written += store.write_records(run_dir, "candidates", cands)
        _report(progress, "generate", i + 1, len(todo))
    return {"backend": backend, "generator": generator.name, "tasks": len(todo),
            "skipped_done": len(tasks) - len(todo), "candidates_written": written}


def _extract_or_raw(response: str) -> str:
    """The code block of a response, or the response itself when none is found (the verifier
    then records an extract-stage verdict for it, which is data too)."""
    from verifier.extract import extract_code

    try:
        return extract_code(response) or response
    except Exception:
        return response


def unverified(run_dir: str | os.PathLike, backend: str | None = None) -> list[tuple]:
    """(task, candidate) pairs whose candidate has no verdict yet, in candidate-id order."""
    tasks = {t.task_id: t for t in store.read_records(run_dir, "tasks")}
    verified = store.stored_ids(run_dir, "verdicts")
    items = [(tasks[c.task_id], c) for c in store.read_records(run_dir, "candidates")
             if c.candidate_id not in verified and c.task_id in tasks and (backend is None or c.backend == backend)]
    return sorted(items, key=lambda it: it[1].candidate_id)


def stage_verify(run_dir: str | os.PathLike, cfg: dict, backend: str | None = None, *,
                 verify_fn: Callable | None = None, flush_rows: int | None = None,
                 progress: ProgressFn | None = None) -> dict:
    """Verify every candidate without a verdict; verdicts are written as they arrive, in batches of
    ``flush_rows`` (cfg flows.verify_flush_rows), so a killed run loses at most one batch of work
    and a resumed run verifies only what is missing.

    ``verify_fn`` has the signature of ``verifier.api.verify_batch`` (the default); the Ray
    executor in flows/ray_verify.py is a drop-in replacement. ``backend`` None: every backend."""
    import threading

    from verifier.api import VerifyConfig, verify_batch

    verify_fn = verify_fn or verify_batch
    flush_rows = flush_rows or cfg.get("flows", {}).get("verify_flush_rows", 16)
    items = unverified(run_dir, backend)
    config = VerifyConfig.from_dict(cfg["verify"])
    lock = threading.Lock()
    pending: list = []
    counts = {"verified": 0, "written": 0, "correct": 0}

    def flush() -> None:
        counts["written"] += store.write_records(run_dir, "verdicts", pending)
        pending.clear()

    def on_verdict(i: int, verdict) -> None:
        with lock:  # verify_fn may call back from its own threads
            verdict.candidate_id = verdict.candidate_id or items[i][1].candidate_id
            pending.append(verdict)
            counts["verified"] += 1
            counts["correct"] += bool(verdict.correct)
            if len(pending) >= flush_rows:
                flush()
            _report(progress, "verify", counts["verified"], len(items))

    _report(progress, "verify", 0, len(items))
    if items:
        compile_workers = cfg["verify"].get("compile_workers") or None
        verdicts = verify_fn(items, config=config, compile_workers=compile_workers, on_verdict=on_verdict)
        with lock:
            # a verify_fn that does not call back (or misses some) still gets its verdicts stored
            seen = {v.candidate_id for v in pending} | store.stored_ids(run_dir, "verdicts")
            for (_, cand), v in zip(items, verdicts):
                v.candidate_id = v.candidate_id or cand.candidate_id
                if v.candidate_id not in seen:
                    pending.append(v)
            flush()
    return {"candidates": len(items), "verified": counts["verified"], "correct": counts["correct"],
            "written": counts["written"]}


def select_for_generation(tasks: list, limit: int) -> list:
    """At most ``limit`` tasks (0: all), taken round-robin across sources in curriculum order, so a
    budgeted run still covers seed, mined and NNSmith tasks. Deterministic for a given task list."""
    if not limit or limit >= len(tasks):
        return list(tasks)
    by_source: dict[str, list] = {}
    for t in tasks:
        by_source.setdefault(t.source, []).append(t)
    queues = [by_source[s] for s in sorted(by_source)]
    picked: list = []
    while len(picked) < limit:
        for q in queues:
            if q and len(picked) < limit:
                picked.append(q.pop(0))
    keep = {t.task_id for t in picked}
    return [t for t in tasks if t.task_id in keep]


def stage_dialogues(run_dir: str | os.PathLike, cfg: dict, backend: str | None = None,
                    progress: ProgressFn | None = None, limit: int | None = None) -> dict:
    """Generate, verify and repair candidates for the selected tasks that have no dialogues yet.

    The selection is ``select_for_generation(curriculum, limit)`` with ``limit`` from
    ``run.max_generate_tasks`` unless given (0: every task). Each task's candidates, verdicts and
    dialogues are written as soon as that task is done; feedback-conditioned repair tasks (groups in
    which every sample failed) are appended to ``<run_dir>/repair_tasks.jsonl``."""
    import json

    from synth.annotate import order_curriculum
    from synth.generate import make_generator
    from synth.repair import run_dialogues
    from verifier.api import VerifyConfig

    backend = resolve_backend(cfg, backend)
    run = cfg["run"]
    limit = run.get("max_generate_tasks", 0) if limit is None else limit
    tasks = select_for_generation(order_curriculum(store.read_records(run_dir, "tasks")), limit)
    done = {d.task_id for d in store.read_records(run_dir, "dialogues") if d.backend == backend}
    todo = [t for t in tasks if t.task_id not in done]
    finished = [0]
    repair_file = Path(run_dir) / "repair_tasks.jsonl"

    def save(result) -> None:
        if result.repair_tasks:  # before the dialogues: a task is only "done" once everything is stored
            with open(repair_file, "a") as f:
                for rt in result.repair_tasks:
                    f.write(json.dumps(rt) + "\n")
        store.write_records(run_dir, "candidates", result.candidates)
        store.write_records(run_dir, "verdicts", result.verdicts)
        store.write_records(run_dir, "dialogues", result.dialogues)
        finished[0] += 1
        _report(progress, "dialogues", finished[0], len(todo))

    generator = make_generator(cfg["generate"], backend=backend, bug_rate=run["bug_rate"], seed=run.get("nnsmith_seed", 0))
    _report(progress, "dialogues", 0, len(todo))
    stats = run_dialogues(todo, generator, backend=backend, samples_per_task=run["samples_per_task"],
                          max_turns=run["max_turns"], verify_config=VerifyConfig.from_dict(cfg["verify"]),
                          on_task_done=save)
    return {"backend": backend, "tasks": len(todo), "skipped_done": len(tasks) - len(todo), **stats}


stage_repair = stage_dialogues  # the repair stage is the dialogue loop: feedback -> next turn -> verify


def stage_curate(run_dir: str | os.PathLike, cfg: dict) -> dict:
    """Build the sft / rft / rl corpora, the dataset card and the report inside the run directory."""
    from curation.corpus import build_corpora

    return build_corpora(run_dir, run_dir, cfg=cfg["curate"])


SUMMARY_SQL = """
SELECT t.level,
       count(DISTINCT t.task_id)                                   AS tasks,
       count(v.candidate_id)                                       AS candidates,
       round(avg(v.correct::INT), 3)                               AS pass_rate,
       count(DISTINCT CASE WHEN v.correct THEN t.task_id END)      AS tasks_solved,
       round(median(v.speedup_eager) FILTER (WHERE v.correct), 3)  AS median_speedup_eager
FROM read_parquet('{root}/tasks/*.parquet') t
LEFT JOIN read_parquet('{root}/verdicts/*.parquet') v USING (task_id)
GROUP BY t.level ORDER BY t.level
"""


def summarize(run_dir: str | os.PathLike) -> str:
    """A per-level summary table computed by DuckDB over the run's Parquet files."""
    import duckdb

    root = Path(run_dir).resolve().as_posix()
    con = duckdb.connect()
    rel = con.sql(SUMMARY_SQL.format(root=root))
    cols = rel.columns
    rows = rel.fetchall()
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(str(c)) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(str(v).rjust(w) for v, w in zip(vals, widths))  # noqa: E731
    return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def run_all(out: str | os.PathLike, cfg: dict, backend: str = "auto") -> dict:
    """Every stage in order, without Prefect (the flow in flows/pipeline.py does the same as tasks)."""
    from kernelmill.config import record_latest_run

    run_dir = Path(out).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    record_latest_run(run_dir)
    sweep_partial_writes(run_dir)
    result: dict = {"run_dir": str(run_dir)}
    result["tasks"] = stage_tasks(run_dir, cfg)
    result["dialogues"] = stage_dialogues(run_dir, cfg, None if backend == "auto" else backend)
    result["curate"] = stage_curate(run_dir, cfg)
    result["summary"] = summarize(run_dir)
    return result
