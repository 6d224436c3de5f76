"""The test bed of model-written KernelBench solutions (``ext/testbed/manifest.jsonl``, made by
bench/testbed_build.py from fetched mirrors) through the verifier: the manifest, the selection of a run, the run
itself through the verify entry, and the real-code batch that bench/bench_verifier.py ``--batch real`` measures.
The verdict rows and reports are bench/lib/testbed_report.py; tests/gpu/test_testbed_gpu.py is the run on cuda.

    sols = select(load_manifest(Path("ext/testbed/manifest.jsonl")), sources=("technoabsurdist",), per_problem=1,
                  shard="0/4")
    run = run_testbed(sols, make_config(["trials=3"], "strict"), Path("out/testbed_h100_s0of4.jsonl"), budget_s=540)
    batch = real_batch(load_manifest(Path("ext/testbed/manifest.jsonl")), per_task=8, levels=(1, 2, 3), n_tasks=24)
    verdicts = verifier.entry.verify(batch.items, config=VerifyConfig())

What :func:`select` and :func:`run_testbed` guarantee: shards ``i/n`` of one selection are disjoint and cover it,
each with its share of every source and level; ``per_problem=k`` takes k solutions of each (source, level,
problem) by a hash of their ids, alternating between the source's judgements; every selected solution gets one
JSONL row, appended as its verdict arrives (a killed run keeps them): its verdict, ``bench_error`` (its files
could not be read, or the verifier raised for its chunk) or ``not reached`` (the budget stopped the run between
chunks). Each solution is verified against its own source's problem file.

What :func:`real_batch` guarantees:

- a task is a solution's own problem file (``Task.from_code`` of its text, so the problem files of several sources
  that are the same program are one task), level and origin from the manifest; every solution of the task, from
  any source or model, is a candidate of it (``Candidate(backend=...)``, id = the manifest id);
- the task set does not depend on ``per_task``: tasks are taken round-robin over the levels (each level its share),
  within a level those with the most distinct solutions first (ties by a hash of the task id), so the batch at
  ``per_task=1`` and at ``per_task=8`` has the same tasks, and the one solution of the first is among the eight of
  the second;
- ``per_task=k`` takes up to k distinct solutions of each task (by a hash of their ids, alternating between models
  so that the picks span the sources), fewer where the test bed has fewer. Distinct, not copies: the verify entry
  verifies identical code of a task once and copies the verdict, so copies cost nearly nothing and would inflate a
  throughput figure. ``pad=True`` fills a short task to k with identical copies of its picks (what a confident
  model's k samples look like); such items are counted in ``RealBatch.copies`` and their ids end in ``#copyN``.

Not done: picking solutions by the source's judgement (the batch holds correct and incorrect ones as the test bed
has them), reading problem files of another source for a solution (a solution is judged against its own).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from bench.lib.testbed_report import not_reached_row, verdict_row
from kernelmill.errors import InputError
from kernelmill.schema import Candidate, Origin, Task, task_id_for

REQUIRED = ("id", "source", "level", "problem_file", "solution_file")


@dataclass(frozen=True)
class TestbedSolution:
    """One manifest row: a published solution and the problem file it was judged against (absolute paths)."""

    __test__ = False  # not a pytest class, whatever its name

    id: str
    source: str
    level: int
    problem_name: str
    problem_file: Path
    solution_file: Path
    model: str = ""
    source_judgement: str = ""
    repo: str = ""
    commit: str = ""
    path: str = ""
    problem_id: int | str = ""  # the source's number of the problem (with source and level: one problem)
    source_speedup: float | None = None
    source_gpu: str = ""


@dataclass(frozen=True)
class RealBatch:
    """The pairs to verify and what they are."""

    items: tuple[tuple[Task, Candidate], ...]
    per_task: int
    tasks: int
    distinct: int  # distinct solutions among the items
    copies: int  # items that are an identical copy of another (pad only)
    short_tasks: int  # tasks with fewer than per_task distinct solutions
    tasks_by_level: tuple[tuple[int, int], ...]  # (level, tasks)

    def describe(self) -> str:
        levels = ", ".join(f"level {lv}: {n}" for lv, n in self.tasks_by_level)
        return (f"{len(self.items)} candidates over {self.tasks} tasks ({levels}); up to {self.per_task} per task: "
                f"{self.distinct} distinct solutions, {self.copies} identical copies, {self.short_tasks} tasks with "
                f"fewer than {self.per_task} distinct solutions")


def load_manifest(path: Path) -> list[TestbedSolution]:
    """The rows of a test bed manifest (JSON lines; paths relative to it). InputError naming the file and line for
    a missing manifest, a row that is not JSON or lacks a key, or a file it names that does not exist."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "test bed manifest does not exist (bench/testbed_build.py builds it)")
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(where, f"not JSON: {e}") from None
        missing = [k for k in REQUIRED if k not in r]
        if missing:
            raise InputError(where, f"missing key(s) {', '.join(missing)}")
        files = {k: path.parent / r[k] for k in ("problem_file", "solution_file")}
        for k, f in files.items():
            if not f.is_file():
                raise InputError(where, f"{k} {r[k]} does not exist under {path.parent}")
        try:
            level = int(r["level"])
        except (TypeError, ValueError):
            raise InputError(where, f"level {r['level']!r} is not an integer") from None
        out.append(TestbedSolution(id=str(r["id"]), source=str(r["source"]), level=level,
                                   problem_name=str(r.get("problem_name") or r.get("problem_id") or ""),
                                   problem_file=files["problem_file"], solution_file=files["solution_file"],
                                   model=str(r.get("model") or ""), source_judgement=str(r.get("source_judgement") or ""),
                                   repo=str(r.get("repo") or ""), commit=str(r.get("commit") or ""),
                                   path=str(r.get("problem_path") or r.get("path") or ""),
                                   problem_id=r.get("problem_id", ""), source_speedup=r.get("source_speedup"),
                                   source_gpu=str(r.get("source_gpu") or "")))
    return out


def _h(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _spread(rows: list[TestbedSolution]) -> list[TestbedSolution]:
    """Rows in hash order of their ids, interleaved by model (else source): the first k span the models."""
    queues: dict[str, list[TestbedSolution]] = {}
    for r in sorted(rows, key=lambda r: _h(r.id)):
        queues.setdefault(r.model or r.source, []).append(r)
    out: list[TestbedSolution] = []
    qs = list(queues.values())
    while any(qs):
        for q in qs:
            if q:
                out.append(q.pop(0))
    return out


def real_batch(solutions: Iterable[TestbedSolution], *, per_task: int = 1, levels: Iterable[int] = (1, 2, 3),
               n_tasks: int = 0, sources: Iterable[str] = (), backend: str = "cuda", pad: bool = False) -> RealBatch:
    """The real-code batch (module docstring): ``n_tasks`` tasks (0: all) of ``levels`` from ``sources`` (empty:
    all), up to ``per_task`` distinct solutions each. InputError for per_task < 1, n_tasks < 0, a source or level
    with no solution in the manifest."""
    if per_task < 1:
        raise InputError("per_task", f"must be >= 1, got {per_task}")
    if n_tasks < 0:
        raise InputError("n_tasks", f"must be >= 0 (0: every task), got {n_tasks}")
    rows = list(solutions)
    want_s, want_l = set(sources), set(levels)
    unknown = sorted(want_s - {r.source for r in rows})
    if unknown:
        raise InputError("sources", f"no solution of {', '.join(unknown)} in the manifest; it has "
                         + ", ".join(sorted({r.source for r in rows})))
    rows = [r for r in rows if (not want_s or r.source in want_s) and r.level in want_l]
    if not rows:
        raise InputError("levels", f"no solution of level(s) {sorted(want_l)} in the manifest"
                         + (f" from {', '.join(sorted(want_s))}" if want_s else ""))
    texts: dict[Path, str] = {}

    def text(f: Path) -> str:
        if f not in texts:
            texts[f] = f.read_text(errors="replace")
        return texts[f]

    tids: dict[Path, str] = {}
    groups: dict[str, list[TestbedSolution]] = {}
    for r in sorted(rows, key=lambda r: r.id):
        if r.problem_file not in tids:
            tids[r.problem_file] = task_id_for(text(r.problem_file))
        groups.setdefault(tids[r.problem_file], []).append(r)
    distinct: dict[str, list[TestbedSolution]] = {}
    for tid, rs in groups.items():
        seen: set[str] = set()
        distinct[tid] = [r for r in _spread(rs) if not (text(r.solution_file) in seen or seen.add(text(r.solution_file)))]
    by_level: dict[int, list[str]] = {}
    for tid in sorted(distinct, key=lambda t: (-len(distinct[t]), _h(t))):
        by_level.setdefault(distinct[tid][0].level, []).append(tid)
    order = [q[i] for i in range(max(map(len, by_level.values()))) for _, q in sorted(by_level.items()) if i < len(q)]
    chosen = order[:n_tasks] if n_tasks else order
    items: list[tuple[Task, Candidate]] = []
    copies = short = 0
    for tid in chosen:
        rs = distinct[tid]
        first = rs[0]
        task = Task.from_code(text(first.problem_file), name=f"L{first.level}/{first.problem_name}",
                              source="kernelbench", level=first.level,
                              origin=Origin(repo=first.repo, path=first.path, commit=first.commit))
        picks = rs[:per_task]
        short += len(picks) < per_task
        for r in picks:
            items.append((task, Candidate(candidate_id=r.id, task_id=task.task_id, backend=backend,
                                          generator=r.model or r.source, code=text(r.solution_file))))
        for j in range(per_task - len(picks) if pad else 0):
            r = picks[j % len(picks)]
            copies += 1
            items.append((task, Candidate(candidate_id=f"{r.id}#copy{j // len(picks) + 1}", task_id=task.task_id,
                                          backend=backend, generator=r.model or r.source, code=text(r.solution_file))))
    lv = Counter(distinct[t][0].level for t in chosen)
    return RealBatch(items=tuple(items), per_task=per_task, tasks=len(chosen), distinct=len(items) - copies,
                     copies=copies, short_tasks=short, tasks_by_level=tuple(sorted(lv.items())))


# ----------------------------------------------------------------------------- a run of the test bed

# a test bed run asks about correctness and legality, not speed: no torch.compile of every reference (a minute
# each), and the fewest timed iterations that still re-check timed outputs (C16); --set overrides both
RUN_DEFAULTS = {"time_torch_compile": False, "timing_trials": 5}


def _alternate_judgements(group: list[TestbedSolution]) -> list[TestbedSolution]:
    """The group in hash order of the ids, interleaved by judgement (the first pick is the hash-first id whatever
    its judgement, so a source that judged everything correct gets the same picks as a plain hash order)."""
    by_j: dict[str, list[TestbedSolution]] = {}
    for r in sorted(group, key=lambda r: _h(r.id)):
        by_j.setdefault(r.source_judgement, []).append(r)
    queues, out = list(by_j.values()), []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def select(solutions: Iterable[TestbedSolution], *, levels: Iterable[int] = (), sources: Iterable[str] = (),
           shard: str = "0/1", limit: int = 0, skip_ids: Iterable[str] = (), per_problem: int = 0) -> list[TestbedSolution]:
    """The solutions of a run: of ``levels`` and ``sources`` (empty: all), at most ``per_problem`` of each (source,
    level, problem) (0: all), less ``skip_ids``; then shard ``i/n`` takes every n-th of them sorted by source,
    level and id; then the first ``limit`` (0: all). InputError for a source with no solution, a bad shard."""
    rows = list(solutions)
    want_l, want_s = {int(x) for x in levels}, set(sources)
    if want_l:
        rows = [r for r in rows if r.level in want_l]
    unknown = sorted(want_s - {r.source for r in rows})
    if unknown:
        raise InputError("sources", f"no solution of {', '.join(unknown)} in the manifest; it has "
                         + ", ".join(sorted({r.source for r in rows})))
    if want_s:
        rows = [r for r in rows if r.source in want_s]
    if per_problem:
        groups: dict[tuple, list[TestbedSolution]] = {}
        for r in rows:
            groups.setdefault((r.source, r.level, r.problem_id), []).append(r)
        rows = [r for g in groups.values() for r in _alternate_judgements(g)[:per_problem]]
    skip = set(skip_ids)
    rows = [r for r in rows if r.id not in skip]
    try:
        i, n = (int(x) for x in shard.split("/"))
    except ValueError:
        raise InputError("shard", f"{shard!r}: want i/n") from None
    if not 0 <= i < n:
        raise InputError("shard", f"{shard}: want i/n with 0 <= i < n")
    rows = sorted(rows, key=lambda r: (r.source, r.level, r.id))[i::n]
    return rows[:limit] if limit else rows


def solution_item(s: TestbedSolution, backend: str) -> tuple[Task, Candidate]:
    """The (Task, Candidate) pair of one solution: its own problem file as the task."""
    task = Task.from_code(s.problem_file.read_text(), name=f"L{s.level}/{s.problem_name}", source="kernelbench",
                          level=s.level, origin=Origin(repo=s.repo, path=s.path, commit=s.commit))
    return task, Candidate(candidate_id=s.id, task_id=task.task_id, backend=backend, generator=s.model or s.source,
                           code=s.solution_file.read_text())


def make_config(sets: Iterable[str] = (), legality: str = "", exec_workers: int = 4):
    """The VerifyConfig of a run: RUN_DEFAULTS, ``exec_workers``, then each ``KEY=VALUE`` of ``sets`` (a
    VerifyConfig field, ``verify.`` prefix allowed), then ``legality`` where given. InputError (naming the
    closest key) for an unknown field or a bad value."""
    from kernelmill.config import parse_value
    from kernelmill.settings import parse_section

    d: dict = dict(RUN_DEFAULTS, exec_workers=exec_workers)
    for s in sets:
        k, _, v = s.partition("=")
        d[k.strip().removeprefix("verify.")] = parse_value(v.strip())
    if legality:
        d["legality"] = legality
    return parse_section("verify", d, "--set")


def verifier_commit(root: Path) -> str:
    """The commit the verifier ran at: KERNELMILL_VERIFIER_COMMIT where a run uses an exported copy of a commit (the
    GPU box gets `git archive` of it, whose parent directories may hold another checkout), else git at root."""
    if os.environ.get("KERNELMILL_VERIFIER_COMMIT"):
        return os.environ["KERNELMILL_VERIFIER_COMMIT"] + " (exported tree)"
    try:
        git = ["git", "-C", str(root)]
        head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(git + ["status", "--porcelain", "--", "verifier", "kernelmill"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return (head or "unknown") + (" + uncommitted verifier/kernelmill changes" if dirty else "")
    except Exception:  # noqa: BLE001 - a copy of the tree without .git
        return "unknown (no git)"


def run_static(solutions: list[TestbedSolution]) -> list[dict]:
    """Extraction and static stages only (the verifier's own front, as a run has it), cuda rules: no compiler,
    no GPU. A solution that would go on to compile is ``static_ok`` (``static_ok_torch`` with PyTorch compute
    found, which the strict policy rejects at the end of a real run)."""
    from verifier.screen import front as _front

    out = []
    for s in solutions:
        task, cand = solution_item(s, "cuda")
        w = _front(task.reference_code, cand.code, "cuda", task.task_id, cand.candidate_id)
        torch_found = [f"Static check, {f}." for f in getattr(w, "torch_findings", None) or []]
        row = verdict_row(s, w.verdict, "static stages only")
        if not w.verdict.status:
            row["status"] = "static_ok_torch" if torch_found else "static_ok"
            row["findings"] = torch_found[:12]
            row["key_line"] = torch_found[0][:240] if torch_found else ""
        out.append(row)
    return out


class RowLog:
    """The rows of a run, appended to the JSONL as they come (one lock; the file starts empty)."""

    def __init__(self, jsonl: Path):
        self.jsonl, self.lock, self.rows = Path(jsonl), threading.Lock(), []
        self.jsonl.parent.mkdir(parents=True, exist_ok=True)
        self.jsonl.write_text("")

    def add(self, row: dict) -> None:
        with self.lock:
            self.rows.append(row)
            with open(self.jsonl, "a") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")


def run_testbed(solutions: list[TestbedSolution], config, jsonl: Path, *, budget_s: float = 560, chunk: int = 48,
                backend: str = "cuda", compile_workers: int | None = None, log: Callable[[str], None] = print,
                at_budget: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Every solution through verifier.entry.verify, ``chunk`` at a time (0: all in one call, so no chunk waits
    for its slowest row, a timeout, before the next starts), one row each (module docstring). A solution whose
    files cannot be read is its own ``bench_error`` row; the rest of its chunk is verified. The budget is checked
    between chunks (a chunk starts only with max(45 s, 0.8 x the last chunk) left); with ``at_budget``, a
    watchdog also fires at the budget while a chunk runs: it adds the ``not reached`` rows and calls
    ``at_budget(rows)`` from its thread (the CLI writes its report there and exits). Returns the rows."""
    from verifier.entry import verify

    t0, out, done = time.time(), RowLog(jsonl), set()
    legality = getattr(config, "legality", "")

    def fill(reason: str) -> None:
        with out.lock:
            left = [s for s in solutions if s.id not in done]
            done.update(s.id for s in left)
        for s in left:
            out.add(not_reached_row(s, legality, reason))

    def watchdog() -> None:
        log(f"budget of {budget_s:.0f} s reached: writing what is done")
        fill("budget reached while running")
        at_budget(out.rows)

    timer = threading.Timer(max(1.0, budget_s), watchdog) if at_budget else None
    if timer:
        timer.daemon = True
        timer.start()
    last, chunk = 0.0, chunk if chunk > 0 else max(1, len(solutions))
    for start in range(0, len(solutions), chunk):
        left_s = budget_s - (time.time() - t0)
        if left_s < max(45.0, 0.8 * last):
            log(f"stopping before chunk {start // chunk}: {left_s:.0f} s left, last chunk took {last:.0f} s")
            break
        c0, part, items = time.time(), [], []
        for s in solutions[start:start + chunk]:
            try:
                items.append(solution_item(s, backend))
                part.append(s)
            except Exception as e:  # noqa: BLE001 - an unreadable file is its solution's row, not the chunk's
                out.add(not_reached_row(s, legality, f"could not read: {type(e).__name__}: {e}", status="bench_error"))
                done.add(s.id)
        if not items:
            continue

        def on_verdict(i: int, v, part=part) -> None:
            s = part[i]
            row = verdict_row(s, v, legality)
            out.add(row)
            done.add(s.id)
            log(f"[{len(done)}/{len(solutions)} {time.time() - t0:.0f}s] {s.id}: {v.status} {','.join(v.cheats)} "
                f"{row['key_line'][:120]}")

        try:
            verify(items, config=config, compile_workers=compile_workers, on_verdict=on_verdict)
        except Exception as e:  # noqa: BLE001 - the verifier raised: record it against the chunk, go on
            for s in part:
                if s.id not in done:
                    out.add(not_reached_row(s, legality, f"verify raised {type(e).__name__}: {str(e)[:200]}",
                                            status="bench_error"))
                    done.add(s.id)
        last = time.time() - c0
    if timer:
        timer.cancel()
    fill("budget: not started")
    return out.rows


def verify_keys(pairs: list[str], exec_workers: int = 0, no_split: bool = False) -> dict:
    """The [verify] keys a real batch sets: ``KEY=VALUE`` pairs (``--verify``; values as ``--set`` reads them),
    ``--exec-workers`` and ``--no-split``, for ``kernelmill.settings.parse_section`` (which checks names and types)."""
    from kernelmill.config import parse_value

    keys = {k.strip(): parse_value(v.strip()) for k, _, v in (kv.partition("=") for kv in pairs)}
    return {**keys, **({"exec_workers": exec_workers} if exec_workers else {}),
            **({"split_build": False} if no_split else {})}
