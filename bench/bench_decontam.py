"""Decontamination against KernelBench: recall on rewritten problems, and reports on real task sets.

    python bench/bench_decontam.py --kb ext/KernelBench/KernelBench [--tasks LABEL=DIR ...]
                                   [--out bench/results/decontam_cpu.md]

1. Recall. Every KernelBench problem (level1-3) is rewritten three ways (``KINDS``): as a mined copy
   would be (``rewrite``: the class, the variables, arguments and ``self.`` attributes renamed,
   every size (integer constant > 8) changed, methods and module-level functions in reverse order,
   docstrings and comments gone, the layout of ``ast.unparse``); the same with what mining adds
   (``edit``: the miner's ``get_inputs`` / ``get_init_inputs``, keyword arguments reordered, an
   extra statement); and inside a larger module (``embed``: a wrapper class and an unrelated block
   around it). A rewrite is *caught* when decontamination flags it (curation.decontam with the
   given rule) and *named* when the flagged program is its original or one with the same canonical
   tokens. The rewrites are also checked against the benchmark without their own problem
   (leave-one-out): how many would still be flagged, against another problem.
2. Reports. For each task directory given (a run directory's ``tasks/`` table, or a folder of
   KernelBench-format ``*.py`` files), whether each task is flagged, why, and the benchmark
   programs it overlaps most (Jaccard and the share of the program found in the task).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.rewrites import KINDS, edit, embed, rewrite  # noqa: E402,F401


def _task(name: str, code: str):
    from kernelmill.schema import Task, content_hash

    return Task(task_id=content_hash(code), source="kernelbench", name=name, level=1, reference_code=code)


def recall_table(kb: Path, n: int, overlap: float, contain: float, min_ngrams: int) -> str:
    """Recall of each kind of rewrite, per level; the reasons it was caught; leave-one-out."""
    from curation import decontam

    bench = decontam.load_benchmark(kb, n=n)
    files = [p for p in bench if p.path.split("/")[0] in ("level1", "level2", "level3")]
    same = {p.path: p.tokens_hash for p in bench}
    rule = dict(overlap=overlap, contain=contain, min_ngrams=min_ngrams)
    t0 = time.perf_counter()
    idx = decontam._Index(bench, 0.05)
    loo: dict[str, object] = {}  # path -> index of the benchmark without that problem
    stats: dict[tuple[str, str], list] = {}
    examples: dict[str, list] = {}
    for i, p in enumerate(files):
        code = (kb / p.path).read_text(errors="replace")
        for kind, fn in KINDS.items():
            try:
                task = _task(p.path, fn(code, seed=i))
            except SyntaxError:
                continue
            o = idx.overlaps(task, n, 10 ** 9, min_ngrams)
            hit = decontam.contamination(o, **rule)
            named = hit is not None and (hit.benchmark_path == p.path or same[hit.benchmark_path] == same[p.path])
            # leave-one-out: the same task against the benchmark without its own program (and without
            # the programs with the same tokens, which are the same problem)
            if p.path not in loo:
                loo[p.path] = decontam._Index([q for q in bench if q.tokens_hash != p.tokens_hash], 0.05)
            o2 = loo[p.path].overlaps(task, n, 10 ** 9, min_ngrams) if kind != "embedded" else None
            hit2 = decontam.contamination(o2, **rule) if o2 is not None else None
            stats.setdefault((kind, p.path.split("/")[0]), []).append((hit, named, hit2))
            if hit is None and len(examples.setdefault(kind, [])) < 6:
                best = o.programs[0] if o.programs else None
                examples[kind].append(f"{p.path} (closest {best.benchmark_path if best else '-'}, Jaccard "
                                      f"{best.jaccard if best else 0:.2f}, contained {best.benchmark_in_task if best else 0:.2f})")
    secs = time.perf_counter() - t0
    lines = [f"## Recall on rewritten KernelBench problems (n-gram {n}; Jaccard >= {overlap}, or >= {contain} of a "
             f"program of >= {min_ngrams} uncommon n-grams contained)", "",
             "Kinds: **rewrite** = class, variables, arguments and attributes renamed, sizes changed, methods and "
             "functions in reverse order, docstrings and comments gone, `ast.unparse` layout; **edited** = rewrite + "
             "the miner's `get_inputs` / `get_init_inputs` (randn of literal shapes, literal arguments), keyword "
             "arguments reversed, `x = x.contiguous()` first in `forward`; **embedded** = edited, used by a wrapper "
             "module next to an unrelated feed-forward block (a mined module that embeds the problem).", "",
             "| kind | level | problems | caught | named the original | by exact / tokens / ngram / contained | "
             "still flagged without the original |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: |"]
    for kind in KINDS:
        allr = []
        for lvl in ("level1", "level2", "level3"):
            r = stats.get((kind, lvl), [])
            allr += r
            if r:
                lines.append(_recall_row(kind, lvl, r))
        lines.append(_recall_row(kind, "all", allr))
    lines += ["", f"{secs:.1f} s for {sum(len(v) for v in stats.values())} rewritten programs (each checked twice: "
              "with and without its original)."]
    for kind, ex in examples.items():
        lines += ["", f"Missed ({kind}, first {len(ex)}): " + "; ".join(ex)]
    return "\n".join(lines)


def _recall_row(kind: str, lvl: str, r: list) -> str:
    from collections import Counter

    reasons = Counter(h.reason for h, _, _ in r if h is not None)
    loo = "—" if kind == "embedded" else f"{sum(h2 is not None for _, _, h2 in r) / len(r):.3f}"
    return (f"| {kind} | {lvl} | {len(r)} | {sum(h is not None for h, _, _ in r) / len(r):.3f} | "
            f"{sum(x for _, x, _ in r) / len(r):.3f} | "
            f"{' / '.join(str(reasons[k]) for k in ('exact', 'tokens', 'ngram', 'contained'))} | {loo} |")


def load_tasks(path: Path, source: str = "kernelbench"):
    """Tasks of a run directory (its tasks table) or of a folder of KernelBench-format files
    (labelled ``source``)."""
    if (path / "tasks").is_dir():
        from kernelmill import store

        return store.read_records(path, "tasks")
    from graphs.kernelbench import load_task_file

    out = []
    for f in sorted(path.rglob("*.py")):
        try:
            out.append(load_task_file(f, source=source))
        except Exception:  # not a KernelBench-format program: not a task
            continue
    return out


def report_table(label: str, tasks, kb: Path, n: int, overlap: float, contain: float, min_ngrams: int) -> str:
    """Every task of a set: flagged or not, why, and the benchmark programs it overlaps most."""
    from curation import decontam

    bench = decontam.load_benchmark(kb, n=n)
    ovs = {o.task_id: o for o in decontam.task_overlaps(tasks, bench, n=n, top=10 ** 9, min_ngrams=min_ngrams)}
    hits = {t.task_id: decontam.contamination(ovs[t.task_id], overlap=overlap, contain=contain, min_ngrams=min_ngrams)
            for t in tasks}

    def score(t):
        o = ovs[t.task_id]
        return max((max(p.jaccard, p.benchmark_in_task if p.benchmark_ngrams >= min_ngrams else 0) for p in o.programs),
                   default=0.0)

    rows = sorted(tasks, key=lambda t: (hits[t.task_id] is None, -score(t), t.name))
    flagged = sum(h is not None for h in hits.values())
    lines = [f"## {label}: {len(tasks)} tasks, {flagged} flagged", "",
             "| task | source | flagged | overlapping benchmark programs (Jaccard, share of the program in the task, "
             "its uncommon n-grams) |",
             "| --- | --- | --- | --- |"]
    shown = 0
    for t in rows:
        o, h = ovs[t.task_id], hits[t.task_id]
        if h is None and shown >= 25:
            continue
        shown += h is None
        flag = f"**{h.reason}**: {h.benchmark_path}" if h else "no"
        progs = "; ".join(f"{p.benchmark_path} ({p.jaccard:.2f}, {p.benchmark_in_task:.2f}, {p.benchmark_ngrams})"
                          for p in o.programs[:3]) or "none"
        lines.append(f"| {t.name} | {t.source} | {flag} | {progs} |")
    if len(tasks) - flagged > 25:
        lines.append(f"| ({len(tasks) - flagged - 25} more unflagged tasks, smaller overlaps) | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kb", default=str(ROOT / "ext" / "KernelBench" / "KernelBench"))
    ap.add_argument("--tasks", nargs="*", default=[], metavar="LABEL=DIR",
                    help="task sets to report, as label=directory[:source] (a run directory, or a folder of task "
                    "files labelled source)")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--contain", type=float, default=0.8)
    ap.add_argument("--min-ngrams", type=int, default=12)
    ap.add_argument("--no-recall", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "decontam_cpu.md"))
    args = ap.parse_args(argv)
    kb = Path(args.kb)
    load0 = os.getloadavg()[0]
    rule = (args.n, args.overlap, args.contain, args.min_ngrams)
    parts = [f"# Decontamination against {kb.name} ({sum(1 for _ in kb.rglob('*.py'))} programs)", "",
             f"Command: `python bench/bench_decontam.py {' '.join(argv if argv is not None else sys.argv[1:])}`; "
             f"load average at start {load0:.1f}; {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}", ""]
    if not args.no_recall:
        parts += [recall_table(kb, *rule), ""]
    summary = ["## Task sets", "", "| task set | tasks | flagged | exact / tokens / ngram / contained |", "| --- | ---: | ---: | --- |"]
    tables = []
    for spec in args.tasks:
        label, _, d = spec.partition("=")
        d, _, source = d.partition(":")
        tasks = load_tasks(Path(d), source or "kernelbench")
        tables += [report_table(label, tasks, kb, *rule), ""]
        from collections import Counter

        from curation import decontam

        hits = decontam.find_contamination(tasks, decontam.load_benchmark(kb, n=args.n), n=args.n, overlap=args.overlap,
                                           contain=args.contain, min_ngrams=args.min_ngrams)
        c = Counter(h.reason for h in hits)
        summary.append(f"| {label} | {len(tasks)} | {len(hits)} | "
                       f"{' / '.join(str(c[k]) for k in ('exact', 'tokens', 'ngram', 'contained'))} |")
    if args.tasks:
        parts += summary + [""] + tables
    text = "\n".join(parts)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
