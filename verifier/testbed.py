"""The real-code batch: (Task, Candidate) pairs from the test bed of model-written KernelBench solutions
(``ext/testbed/manifest.jsonl``, made by bench/testbed_build.py), as a generate or RL step would hand them to the
verify entry. bench/bench_verifier.py ``--batch real`` measures throughput on it.

    batch = real_batch(load_manifest(Path("ext/testbed/manifest.jsonl")), per_task=8, levels=(1, 2, 3), n_tasks=24)
    verdicts = verifier.entry.verify(batch.items, config=VerifyConfig())

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
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

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
                                   path=str(r.get("problem_path") or r.get("path") or "")))
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
