"""Decontamination: drop tasks whose reference program is (nearly) a benchmark program.

The user points at a benchmark directory (for example a KernelBench checkout); every ``*.py``
file under it is a benchmark program. A task is contaminated when its reference program

1. **exact**: normalises (``kernelmill.schema.normalise_source``: comments, docstrings and
   layout removed) to the same text as a benchmark program; or
2. **ngram**: its set of token n-grams (``n`` tokens, default 5) and a single benchmark program's
   have Jaccard similarity >= ``overlap`` (default 0.5), common n-grams left out (below). (An
   IDF-weighted Jaccard was tried and caught fewer rewrites: 0.856 against 0.880.)

Tokens (``program_tokens``) are what a mined copy of a benchmark program keeps: the names after
a dot that are not ``self``'s (``torch.matmul``, ``F.gelu``, ``x.view``, ``nn.Conv2d``: the ops),
keywords, punctuation and the module names torch / nn / F. Every other name (classes, functions,
variables, arguments, ``self.`` attributes) is ``ID`` and every number ``NUM``, so renaming and new
sizes change nothing; n-grams are a set, so reordering methods or statements only changes the
n-grams across the seams. Benchmark programs share a lot of boilerplate (the Model class frame,
``get_inputs``), so n-grams found in more than ``common_share`` of the benchmark programs (and in
at least 3 of them) are *common* and ignored on both sides; a task made only of common n-grams is
judged by exact match alone. Jaccard rather than containment, so a small task (one ReLU) is not
"contained" in every benchmark model that also applies a ReLU, and a large model that merely uses
a benchmark op is not flagged.

Every task's closest benchmark program is reported (``closest_programs``), contaminated or not, with
the Jaccard similarity and both containments, so a reviewer sees near misses too.

Not guaranteed: a benchmark program rewritten with another *algorithm* (``x * torch.sigmoid(x)``
for ``F.silu(x)``) is not caught; problems that differ only in sizes (KernelBench's matmul
variants) are one problem here, so a match names one of them. Measured recall on rewritten
KernelBench problems: bench/bench_decontam.py, bench/results/decontam_cpu.md.
"""

from __future__ import annotations

import keyword
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

from kernelmill.errors import InputError
from kernelmill.schema import Task, content_hash, normalise_source

_MODULES = frozenset({"torch", "nn", "F", "functional", "math", "np", "numpy"})
_KEEP = frozenset(keyword.kwlist) | _MODULES | frozenset({"super", "range", "len", "int", "float", "list", "tuple"})


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
    overlap: float  # Jaccard similarity of the two n-gram sets, common n-grams left out (1.0 for exact)

    def as_dict(self) -> dict:
        return asdict(self)


def program_tokens(code: str) -> list[str]:
    """The tokens a copy keeps (module docstring): ops verbatim, user names ``ID``, numbers ``NUM``."""
    from curation.tokens import _PY_LEX

    out: list[str] = []
    prev2, prev = "", ""
    line_start, depth = True, 0
    toks = _PY_LEX.findall(code + "\n")
    for i, t in enumerate(toks):
        c = t[0]
        if c == "\n":
            line_start = line_start or depth == 0
            continue
        starts, line_start = line_start, False
        if t[-1] in "\"'" and len(t) > 1:
            if not (starts and depth == 0 and toks[i + 1] == "\n"):  # docstrings are not code
                out.append("STR")
        elif c.isalpha() or c == "_":
            if t in _KEEP or (prev == "." and prev2 != "self"):
                out.append(t)
            else:
                out.append("ID")
        elif c.isdigit() or (c == "." and len(t) > 1 and t[1].isdigit()):
            out.append("NUM")
        else:
            depth += (t in "([{") - (t in ")]}")
            depth = max(depth, 0)
            out.append(t)
        prev2, prev = prev, t
    return out


def ngrams(tokens: list[str], n: int) -> frozenset:
    if len(tokens) < n:
        return frozenset({tuple(tokens)}) if tokens else frozenset()
    return frozenset(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def load_benchmark(bench_dir: str | os.PathLike, *, n: int = 5) -> list[BenchmarkProgram]:
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


@dataclass
class ClosestProgram:
    """A task's most similar benchmark program, whether or not it counts as contamination."""
    task_id: str
    task_name: str
    benchmark_path: str
    jaccard: float  # of the two n-gram sets, common n-grams left out
    task_in_benchmark: float  # share of the task's n-grams found in the program
    benchmark_in_task: float  # share of the program's n-grams found in the task
    exact: bool

    def as_dict(self) -> dict:
        return asdict(self)


class _Index:
    def __init__(self, benchmark: list[BenchmarkProgram], common_share: float):
        self.benchmark = benchmark
        self.by_hash = {p.exact_hash: p for p in benchmark}
        index: dict[tuple, list[int]] = {}
        for i, p in enumerate(benchmark):
            for g in p.ngrams:
                index.setdefault(g, []).append(i)
        common_min = max(3, int(common_share * len(benchmark)) + 1)
        self.common = {g for g, progs in index.items() if len(progs) >= common_min}
        self.index = {g: v for g, v in index.items() if g not in self.common}
        self.sizes = [len(p.ngrams - self.common) for p in benchmark]

    def closest(self, task: Task, n: int) -> ClosestProgram | None:
        exact = self.by_hash.get(content_hash(normalise_source(task.reference_code)))
        if exact is not None:
            return ClosestProgram(task.task_id, task.name, exact.path, 1.0, 1.0, 1.0, True)
        grams = ngrams(program_tokens(task.reference_code), n) - self.common
        shared: Counter = Counter()
        size = len(grams)
        for g in grams:
            for i in self.index.get(g, ()):
                shared[i] += 1
        if not shared:
            return None

        def jac(i):
            return shared[i] / (size + self.sizes[i] - shared[i])

        best = min(shared, key=lambda i: (-jac(i), self.benchmark[i].path))
        return ClosestProgram(task.task_id, task.name, self.benchmark[best].path, round(jac(best), 4),
                              round(shared[best] / size, 4), round(shared[best] / max(1e-9, self.sizes[best]), 4),
                              False)


def closest_programs(tasks: Iterable[Task], benchmark: list[BenchmarkProgram], *, n: int = 5,
                     common_share: float = 0.05) -> list[ClosestProgram]:
    """Each task's closest benchmark program (tasks sharing no uncommon n-gram with any are left out)."""
    idx = _Index(benchmark, common_share)
    return [c for c in (idx.closest(t, n) for t in tasks) if c is not None]


def find_contamination(tasks: Iterable[Task], benchmark: list[BenchmarkProgram], *, n: int = 5,
                       overlap: float = 0.5, common_share: float = 0.05) -> list[ContaminationHit]:
    """One hit per contaminated task (module docstring): exact, or n-gram Jaccard >= ``overlap``."""
    hits = []
    for c in closest_programs(tasks, benchmark, n=n, common_share=common_share):
        if c.exact:
            hits.append(ContaminationHit(c.task_id, c.task_name, "exact", c.benchmark_path, 1.0))
        elif c.jaccard >= overlap:
            hits.append(ContaminationHit(c.task_id, c.task_name, "ngram", c.benchmark_path, c.jaccard))
    return hits
