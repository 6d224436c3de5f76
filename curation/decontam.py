"""Decontamination: drop tasks whose reference program is (nearly) a benchmark program.

The user points at a benchmark directory (for example a KernelBench checkout); every ``*.py``
file under it is a benchmark program. A task is contaminated when its reference program

1. **exact**: normalises (``kernelmill.schema.normalise_source``: comments, docstrings and
   layout removed) to the same text as a benchmark program; or
2. **ngram**: shares at least ``overlap`` of its token n-grams (``n`` tokens, default 13, the
   size used by common LLM decontamination reports) with a single benchmark program.

Tokens for n-grams are taken from the normalised source with identifiers kept (a benchmark copy
keeps its names far more often than not) and numbers mapped to ``NUM`` (the same program with
other sizes is the same program). Benchmark programs share a lot of boilerplate (the Model class
frame, ``get_inputs``), so n-grams found in more than ``common_share`` of the benchmark programs
(and in at least 3 of them) are *common* and ignored on both sides; without this every small
elementwise task would "overlap" every elementwise benchmark program. Overlap is measured as a
share of the task's remaining n-grams, so a task that embeds a benchmark program with a little
extra code still counts; a task made only of common n-grams is judged by exact match alone.

Not guaranteed: a benchmark program rewritten with new names *and* new structure is not caught;
programs shorter than ``n`` tokens are compared as one n-gram (effectively exact match).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

from kernelmill.errors import InputError
from kernelmill.schema import Task, content_hash, normalise_source

_TOKEN_RE = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\S")


@dataclass
class BenchmarkProgram:
    path: str  # relative to the benchmark directory
    exact_hash: str
    ngrams: frozenset


@dataclass
class ContaminationHit:
    task_id: str
    task_name: str
    reason: str  # "exact" or "ngram"
    benchmark_path: str
    overlap: float  # share of the task's n-grams found in that benchmark program (1.0 for exact)

    def as_dict(self) -> dict:
        return asdict(self)


def program_tokens(code: str) -> list[str]:
    return ["NUM" if t[0].isdigit() else t for t in _TOKEN_RE.findall(normalise_source(code))]


def ngrams(tokens: list[str], n: int) -> frozenset:
    if len(tokens) < n:
        return frozenset({tuple(tokens)}) if tokens else frozenset()
    return frozenset(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def load_benchmark(bench_dir: str | os.PathLike, *, n: int = 13) -> list[BenchmarkProgram]:
    """Every ``*.py`` program under ``bench_dir`` (recursively), normalised and n-grammed.

    Raises InputError when the directory does not exist or holds no Python files, so a typo in
    ``--decontaminate`` cannot silently produce an uncleaned corpus."""
    root = Path(bench_dir)
    if not root.is_dir():
        raise InputError(f"benchmark directory {root}", "does not exist or is not a directory")
    programs = []
    for f in sorted(root.rglob("*.py")):
        if any(part.startswith(".") for part in f.relative_to(root).parts):
            continue
        try:
            code = f.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise InputError(f"benchmark file {f}", f"cannot be read: {e}") from None
        programs.append(BenchmarkProgram(path=f.relative_to(root).as_posix(),
                                         exact_hash=content_hash(normalise_source(code)),
                                         ngrams=ngrams(program_tokens(code), n)))
    if not programs:
        raise InputError(f"benchmark directory {root}", "holds no *.py programs")
    return programs


def find_contamination(tasks: Iterable[Task], benchmark: list[BenchmarkProgram], *, n: int = 13,
                       overlap: float = 0.5, common_share: float = 0.05) -> list[ContaminationHit]:
    """One hit per contaminated task (exact matches win over n-gram ones; best overlap reported)."""
    by_hash = {p.exact_hash: p for p in benchmark}
    index: dict[tuple, list[int]] = {}
    for i, p in enumerate(benchmark):
        for g in p.ngrams:
            index.setdefault(g, []).append(i)
    common_min = max(3, int(common_share * len(benchmark)) + 1)
    common = {g for g, progs in index.items() if len(progs) >= common_min}
    hits = []
    for t in tasks:
        exact = by_hash.get(content_hash(normalise_source(t.reference_code)))
        if exact is not None:
            hits.append(ContaminationHit(t.task_id, t.name, "exact", exact.path, 1.0))
            continue
        grams = ngrams(program_tokens(t.reference_code), n) - common
        if not grams:
            continue
        shared: Counter = Counter()
        for g in grams:
            for i in index.get(g, ()):
                shared[i] += 1
        if not shared:
            continue
        best, count = min(shared.items(), key=lambda kv: (-kv[1], benchmark[kv[0]].path))
        frac = count / len(grams)
        if frac >= overlap:
            hits.append(ContaminationHit(t.task_id, t.name, "ngram", benchmark[best].path, round(frac, 4)))
    return hits
