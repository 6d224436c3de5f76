"""Decontamination: drop tasks whose reference program is, or contains, a benchmark program.

The user points at a benchmark directory (for example a KernelBench checkout); every ``*.py`` file under it is a
benchmark program (:func:`load_benchmark`). A task is contaminated by a benchmark program (:func:`contamination`,
:func:`find_contamination`) when
1. **exact**: both normalise (``kernelmill.schema.normalise_source``: comments, docstrings and layout removed) to
   the same text; or
2. **tokens**: both have the same canonical tokens (below) once their segments are sorted: the same program up to
   names, sizes, layout and the order of its functions and methods. This is what catches the benchmark problems
   made only of common n-grams (KernelBench's convolution variants differ from each other only in sizes and keyword
   arguments); or
3. **ngram**: their sets of uncommon token n-grams (``n`` tokens, default 5) have Jaccard similarity >= ``overlap``
   (default 0.5); or
4. **contained**: at least ``contain`` (default 0.8) of the benchmark program's uncommon n-grams are in the task,
   and the program has at least ``min_ngrams`` (default 12) of them: a mined module that embeds a benchmark problem
   (nanoGPT's ``Block`` holds KernelBench's ``MinGPTCausalAttention``). The size floor keeps a one-line problem (a
   ReLU: four uncommon n-grams) from being "contained" in every model that applies a ReLU.

Tokens (``program_tokens``) are what a mined copy of a benchmark program keeps: the names after a dot that are not
``self``'s (``torch.matmul``, ``F.gelu``, ``x.view``, ``nn.Conv2d``: the ops), keywords, ``self``, punctuation, a few
builtins and the module names torch / nn / F / math / numpy. Every other name (classes, functions, variables,
arguments, ``self.`` attributes) is ``ID`` and every number ``NUM``, so renaming and new sizes change nothing. The
program is parsed and unparsed first and cut into segments (each function, each method, each class frame, each run
of other statements; ``program_segments``); n-grams never span two segments, so reordering methods or functions
changes nothing either, and annotations, ``super(Cls, self)`` arguments, keyword order, docstrings and redundant
parentheses are gone. ``get_inputs`` and ``get_init_inputs`` are left out: a mined copy has the miner's, not the
benchmark's, and they only set sizes. Benchmark programs share a lot of boilerplate (the Model class frame,
``super().__init__()``), so n-grams found in more than ``common_share`` (default 0.05) of the benchmark programs (and
in at least 3 of them) are common and ignored on both sides.

Thresholds (bench/bench_decontam.py on KernelBench and 370 tasks mined from ten repositories, as of commit 6733833):
the tasks that embed a benchmark problem contain 0.83-0.95 of it, the unrelated ones at most 0.65; with a floor of 8
n-grams, x-transformers' modules "contain" a depthwise convolution problem, with 12 nothing unrelated is flagged.

Every task's overlaps are reported (:func:`task_overlaps`), contaminated or not: the benchmark programs it shares
uncommon n-grams with, best first, with the Jaccard similarity and both containments, so a reviewer sees near misses
(:func:`near_misses`) and which problem a large task embeds.

Not guaranteed: a benchmark program rewritten with another algorithm (``x * torch.sigmoid(x)`` for ``F.silu(x)``)
is not caught; problems that differ only in sizes (KernelBench's matmul variants) are one problem here, so a match
names one of them; a task that embeds a benchmark problem of fewer than ``min_ngrams`` uncommon n-grams is caught
only by Jaccard, so a one-line level-1 problem with a statement added, or inside a larger module, is mostly missed
(too few n-grams to tell it from a model that merely makes the same call). Measured recall on rewritten KernelBench
problems and flags on mined real code: bench/bench_decontam.py, bench/results/decontam_cpu.md.
"""

from __future__ import annotations

import ast
import keyword
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from curation.tokens import _PY_LEX
from kernelmill.errors import InputError
from kernelmill.schema import Task, content_hash, normalise_source

_MODULES = frozenset({"torch", "nn", "F", "functional", "math", "np", "numpy"})
_KEEP = frozenset(keyword.kwlist) | _MODULES | frozenset({"self", "super", "range", "len", "int", "float", "list", "tuple"})


def program_tokens(code: str) -> list[str]:
    """The tokens a copy keeps (module docstring): ops verbatim, user names ``ID``, numbers ``NUM``."""
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


# the functions that only say which inputs and constructor arguments to run with: a mined copy
# gets the miner's, never the benchmark's, and sizes are not what makes a problem
INPUT_FUNCTIONS = frozenset({"get_inputs", "get_init_inputs"})


class _Canonical(ast.NodeTransformer):
    """What a copy may change without changing the program: annotations, ``super(Cls, self)``,
    docstrings, the order of keyword arguments."""

    def visit_arg(self, node):
        node.annotation = None
        return node

    def _function(self, node):
        node.returns = None
        node.body = _without_docstring(node.body)
        self.generic_visit(node)
        node.body = node.body or [ast.Pass()]  # its only statements were bare annotations
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "super":
            node.args = []
        node.keywords.sort(key=lambda k: k.arg or "")  # keyword order means nothing (** last)
        return self.generic_visit(node)


def _without_docstring(body: list) -> list:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:] or [ast.Pass()]
    return body


def program_segments(code: str) -> list[list[str]]:
    """The program's tokens (``program_tokens``) in segments whose order does not matter: each
    function, each method, each class without its methods, each run of other top-level statements;
    ``get_inputs`` and ``get_init_inputs`` left out (``INPUT_FUNCTIONS``).

    The program is parsed and unparsed first (``ast``), so layout, redundant parentheses, quotes,
    comments, docstrings, annotations, keyword order and ``super(Cls, self)`` arguments change
    nothing. Code that does not parse is one segment of its raw tokens."""
    try:
        tree = _Canonical().visit(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError):
        return [program_tokens(code)]
    segments: list[list[str]] = []
    run: list = []

    def flush():
        if run:
            segments.append(program_tokens("\n".join(ast.unparse(n) for n in run)))
            run.clear()

    for node in _without_docstring(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            flush()
            if node.name not in INPUT_FUNCTIONS:
                segments.append(program_tokens(ast.unparse(node)))
        elif isinstance(node, ast.ClassDef):
            flush()
            body = _without_docstring(node.body)
            methods = [b for b in body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
            rest = [b for b in body if b not in methods] or [ast.Pass()]
            frame = ast.ClassDef(name=node.name, bases=node.bases, keywords=node.keywords, body=rest,
                                 decorator_list=node.decorator_list, type_params=[])
            segments.append(program_tokens(ast.unparse(frame)))
            segments += [program_tokens(ast.unparse(m)) for m in methods]
        else:
            run.append(node)
    flush()
    return [s for s in segments if s]


def ngrams(tokens: list[str], n: int) -> frozenset:
    if len(tokens) < n:
        return frozenset({tuple(tokens)}) if tokens else frozenset()
    return frozenset(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def program_ngrams(code: str, n: int) -> frozenset:
    """The union of the n-grams of the program's segments (``program_segments``): no n-gram spans
    two segments, so reordering methods or functions changes nothing."""
    out: set = set()
    for seg in program_segments(code):
        out |= ngrams(seg, n)
    return frozenset(out)


@dataclass
class BenchmarkProgram:
    path: str  # relative to the benchmark directory
    exact_hash: str
    tokens_hash: str  # of the canonical tokens, segments sorted
    ngrams: frozenset


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
        segments = program_segments(code)
        programs.append(BenchmarkProgram(path=f.relative_to(root).as_posix(),
                                         exact_hash=content_hash(normalise_source(code)),
                                         tokens_hash=_tokens_hash(segments),
                                         ngrams=_segment_ngrams(segments, n)))
    if not programs:
        raise InputError(f"benchmark directory {root}", "holds no *.py programs")
    return programs


def _tokens_hash(segments: list[list[str]]) -> str:
    return content_hash("\n".join(sorted(" ".join(s) for s in segments)))


def _segment_ngrams(segments: list[list[str]], n: int) -> frozenset:
    out: set = set()
    for seg in segments:
        out |= ngrams(seg, n)
    return frozenset(out)


@dataclass
class Overlap:
    """How much a task and one benchmark program share (uncommon n-grams)."""
    benchmark_path: str
    jaccard: float  # of the two n-gram sets
    benchmark_in_task: float  # share of the program's n-grams found in the task (containment)
    task_in_benchmark: float  # share of the task's n-grams found in the program
    benchmark_ngrams: int  # the program's uncommon n-grams

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TaskOverlaps:
    """A task's overlaps with the benchmark, best first (``task_overlaps``)."""
    task_id: str
    task_name: str
    exact: str | None  # benchmark program equal after normalisation
    same_tokens: str | None  # benchmark program with the same canonical tokens
    programs: list[Overlap]


@dataclass
class ContaminationHit:
    task_id: str
    task_name: str
    reason: str  # "exact", "tokens", "ngram" or "contained"
    benchmark_path: str
    overlap: float  # Jaccard similarity of the two n-gram sets (1.0 for exact / tokens)
    contained: float = 1.0  # share of the benchmark program's n-grams found in the task
    others: list = field(default_factory=list)  # other overlapping programs: {path, jaccard, contained}

    def as_dict(self) -> dict:
        return asdict(self)


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
        self.by_tokens: dict[str, BenchmarkProgram] = {}
        for p in benchmark:
            self.by_tokens.setdefault(p.tokens_hash, p)
        index: dict[tuple, list[int]] = {}
        for i, p in enumerate(benchmark):
            for g in p.ngrams:
                index.setdefault(g, []).append(i)
        common_min = max(3, int(common_share * len(benchmark)) + 1)
        self.common = {g for g, progs in index.items() if len(progs) >= common_min}
        self.index = {g: v for g, v in index.items() if g not in self.common}
        self.sizes = [len(p.ngrams - self.common) for p in benchmark]

    def overlaps(self, task: Task, n: int, top: int, min_ngrams: int) -> TaskOverlaps:
        exact = self.by_hash.get(content_hash(normalise_source(task.reference_code)))
        segments = program_segments(task.reference_code)
        same = self.by_tokens.get(_tokens_hash(segments))
        grams = _segment_ngrams(segments, n) - self.common
        shared: Counter = Counter()
        size = len(grams)
        for g in grams:
            for i in self.index.get(g, ()):
                shared[i] += 1
        found = []
        for i, k in shared.items():
            b = self.sizes[i]
            found.append(Overlap(self.benchmark[i].path, round(k / (size + b - k), 4), round(k / b, 4),
                                 round(k / size, 4), b))
        # best first: Jaccard, or containment where the program is large enough for it to count
        found.sort(key=lambda o: (-max(o.jaccard, o.benchmark_in_task if o.benchmark_ngrams >= min_ngrams else 0.0),
                                  -o.jaccard, o.benchmark_path))
        return TaskOverlaps(task.task_id, task.name, exact.path if exact else None, same.path if same else None,
                            found[:top])


def task_overlaps(tasks: Iterable[Task], benchmark: list[BenchmarkProgram], *, n: int = 5,
                  common_share: float = 0.05, top: int = 5, min_ngrams: int = 12) -> list[TaskOverlaps]:
    """Each task's overlaps with the benchmark programs, at most ``top`` per task, best first: by
    Jaccard similarity, or by containment for programs of at least ``min_ngrams`` uncommon n-grams."""
    idx = _Index(benchmark, common_share)
    return [idx.overlaps(t, n, top, min_ngrams) for t in tasks]


def closest_programs(tasks: Iterable[Task], benchmark: list[BenchmarkProgram], *, n: int = 5,
                     common_share: float = 0.05) -> list[ClosestProgram]:
    """Each task's closest benchmark program by Jaccard similarity (an exact match first; tasks
    sharing no uncommon n-gram with any program and matching none are left out)."""
    out = []
    for o in task_overlaps(tasks, benchmark, n=n, common_share=common_share, top=10 ** 9):
        if o.exact:
            out.append(ClosestProgram(o.task_id, o.task_name, o.exact, 1.0, 1.0, 1.0, True))
            continue
        if not o.programs:
            continue
        best = min(o.programs, key=lambda p: (-p.jaccard, p.benchmark_path))
        out.append(ClosestProgram(o.task_id, o.task_name, best.benchmark_path, best.jaccard, best.task_in_benchmark,
                                  best.benchmark_in_task, False))
    return out


def contamination(o: TaskOverlaps, *, overlap: float = 0.5, contain: float = 0.8,
                  min_ngrams: int = 12) -> ContaminationHit | None:
    """The rule of the module docstring applied to one task's overlaps (None: clean); the hit lists
    up to five other overlapping programs. ``o`` should hold every overlapping program."""
    others = [{"path": p.benchmark_path, "jaccard": p.jaccard, "contained": p.benchmark_in_task}
              for p in o.programs[:6]]
    if o.exact or o.same_tokens:
        path = o.exact or o.same_tokens
        return ContaminationHit(o.task_id, o.task_name, "exact" if o.exact else "tokens", path, 1.0, 1.0,
                                [x for x in others if x["path"] != path][:5])
    # a Jaccard match names the program the task is most like; containment, the program it embeds
    by_jaccard = [p for p in o.programs if p.jaccard >= overlap]
    by_containment = [p for p in o.programs if p.benchmark_in_task >= contain and p.benchmark_ngrams >= min_ngrams]
    if by_jaccard:
        p, reason = max(by_jaccard, key=lambda p: p.jaccard), "ngram"
    elif by_containment:
        p, reason = max(by_containment, key=lambda p: (p.benchmark_in_task, p.benchmark_ngrams)), "contained"
    else:
        return None
    return ContaminationHit(o.task_id, o.task_name, reason, p.benchmark_path, p.jaccard, p.benchmark_in_task,
                            [x for x in others if x["path"] != p.benchmark_path][:5])


def find_contamination(tasks: Iterable[Task], benchmark: list[BenchmarkProgram], *, n: int = 5,
                       overlap: float = 0.5, common_share: float = 0.05, contain: float = 0.8,
                       min_ngrams: int = 12) -> list[ContaminationHit]:
    """One hit per contaminated task (module docstring): exact, same tokens, n-gram Jaccard >=
    ``overlap``, or >= ``contain`` of a program of >= ``min_ngrams`` uncommon n-grams contained."""
    hits = []
    for o in task_overlaps(tasks, benchmark, n=n, common_share=common_share, top=10 ** 9, min_ngrams=min_ngrams):
        hit = contamination(o, overlap=overlap, contain=contain, min_ngrams=min_ngrams)
        if hit is not None:
            hits.append(hit)
    return hits


def near_misses(overlaps: Iterable[TaskOverlaps], flagged: set[str], *, jaccard: float = 0.3,
                contained: float = 0.5, top: int = 3) -> list[dict]:
    """The tasks not flagged whose largest overlap reaches ``jaccard`` or ``contained``, with their
    ``top`` overlapping programs: what a reviewer of a decontaminated corpus should look at."""
    out = []
    for o in overlaps:
        if o.task_id in flagged:
            continue
        close = [p for p in o.programs if p.jaccard >= jaccard or p.benchmark_in_task >= contained]
        if close:
            out.append({"task_id": o.task_id, "task_name": o.task_name,
                        "programs": [{"path": p.benchmark_path, "jaccard": p.jaccard, "contained": p.benchmark_in_task,
                                      "program_ngrams": p.benchmark_ngrams} for p in close[:top]]})
    return out
