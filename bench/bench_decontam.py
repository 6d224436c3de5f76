"""Decontamination against KernelBench: recall on rewritten problems, and reports on real task sets.

    python bench/bench_decontam.py --kb ext/KernelBench/KernelBench [--tasks RUN_OR_TASK_DIR ...]
                                   [--out bench/results/decontam_cpu.md]

1. Recall. Every KernelBench problem (level1-3) is rewritten the way a mined copy would be
   (``rewrite``): the class, the variables, arguments and ``self.`` attributes renamed, every size
   (integer constant > 8) changed, methods and module-level functions in reverse order, docstrings
   and comments gone, the layout of ``ast.unparse``. A rewrite is *caught* when decontamination
   flags it (curation.decontam.find_contamination with the default settings) and *named* when the
   flagged program is its original or one that differs from it only in sizes and names (same
   ``program_tokens``). The same rewrites are also checked against the benchmark without their own
   original (leave-one-out): how many would still be flagged, against another problem.
2. Reports. For each task directory given (a run directory's ``tasks/`` table, or a folder of
   KernelBench-format ``*.py`` files), every task's closest benchmark program with its Jaccard
   similarity and both containments; flagged tasks first.
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEEP = {"forward", "__init__", "get_inputs", "get_init_inputs", "self", "super", "torch", "nn", "F", "math",
        "range", "len", "int", "float", "list", "tuple", "print", "True", "False", "None", "isinstance"}


def rewrite(code: str, seed: int) -> str:
    """``code`` as a mined copy would have it (module docstring); the program's behaviour is kept
    except for the sizes."""
    rng = random.Random(seed)
    tree = ast.parse(code)
    imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    names: dict[str, str] = {}
    words = ["blk", "layer", "unit", "part", "op", "stage", "mod", "net", "val", "buf", "arg", "inp"]

    def new(name: str) -> str:
        if name in KEEP or name in imported or name.startswith("__"):
            return name
        if name not in names:
            w = rng.choice(words)
            names[name] = (w.capitalize() + "Block" if name[:1].isupper() else w) + f"_{len(names)}"
        return names[name]

    builtin = set(dir(__builtins__)) if isinstance(__builtins__, dict) is False else set(__builtins__)

    class Renamer(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id not in builtin:
                node.id = new(node.id)
            return node

        def visit_arg(self, node):
            node.arg = new(node.arg)
            return self.generic_visit(node)

        def visit_ClassDef(self, node):
            node.name = new(node.name)
            return self.generic_visit(node)

        def visit_FunctionDef(self, node):
            node.name = new(node.name)
            return self.generic_visit(node)

        def visit_Attribute(self, node):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                node.attr = new(node.attr)
            return self.generic_visit(node)

        def visit_keyword(self, node):
            return self.generic_visit(node)  # keyword names are API (dim=, keepdim=)

        def visit_Constant(self, node):
            if type(node.value) is int and node.value > 8:
                node.value = rng.choice([node.value // 2, node.value * 2, node.value + rng.randint(1, 64)])
            return node

    tree = Renamer().visit(tree)

    def drop_docstring(body):
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            return body[1:] or [ast.Pass()]
        return body

    tree.body = drop_docstring(tree.body)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            node.body = drop_docstring(node.body)
        if isinstance(node, ast.ClassDef):
            funcs = [i for i, b in enumerate(node.body) if isinstance(b, ast.FunctionDef)]
            for i, b in zip(funcs, [node.body[i] for i in reversed(funcs)]):
                node.body[i] = b
    funcs = [i for i, b in enumerate(tree.body) if isinstance(b, ast.FunctionDef)]
    for i, b in zip(funcs, [tree.body[i] for i in reversed(funcs)]):
        tree.body[i] = b
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _task(name: str, code: str):
    from kernelmill.schema import Task, content_hash

    return Task(task_id=content_hash(code), source="kernelbench", name=name, level=1, reference_code=code)


def recall_table(kb: Path, n: int, overlap: float) -> str:
    from curation import decontam

    bench = decontam.load_benchmark(kb, n=n)
    files = [p for p in bench if p.path.split("/")[0] in ("level1", "level2", "level3")]
    toks = {p.path: decontam.program_tokens((kb / p.path).read_text(errors="replace")) for p in files}
    rows = []
    t0 = time.perf_counter()
    per_level: dict[str, list] = {}
    examples = []
    for i, p in enumerate(files):
        code = (kb / p.path).read_text(errors="replace")
        try:
            rw = rewrite(code, seed=i)
        except SyntaxError:
            continue
        task = _task(p.path, rw)
        hits = decontam.find_contamination([task], bench, n=n, overlap=overlap)
        caught = bool(hits)
        named = caught and (hits[0].benchmark_path == p.path or toks.get(hits[0].benchmark_path) == toks[p.path])
        others = [b for b in bench if b.path != p.path]
        loo = decontam.find_contamination([task], others, n=n, overlap=overlap)
        close = decontam.closest_programs([task], bench, n=n)
        per_level.setdefault(p.path.split("/")[0], []).append((caught, named, bool(loo), close[0].jaccard if close else 0.0))
        if not caught and len(examples) < 8:
            examples.append(f"{p.path} (closest {close[0].benchmark_path if close else '-'}, "
                            f"Jaccard {close[0].jaccard if close else 0:.2f})")
    secs = time.perf_counter() - t0
    lines = [f"## Recall on rewritten KernelBench problems (n-gram {n}, overlap >= {overlap})", "",
             "| level | problems | caught | named the original | still flagged without the original | median Jaccard with the closest |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    allr = []
    for lvl in sorted(per_level):
        r = per_level[lvl]
        allr += r
        js = sorted(x[3] for x in r)
        lines.append(f"| {lvl} | {len(r)} | {sum(x[0] for x in r) / len(r):.3f} | {sum(x[1] for x in r) / len(r):.3f} "
                     f"| {sum(x[2] for x in r) / len(r):.3f} | {js[len(js) // 2]:.2f} |")
    js = sorted(x[3] for x in allr)
    lines.append(f"| all | {len(allr)} | {sum(x[0] for x in allr) / len(allr):.3f} | "
                 f"{sum(x[1] for x in allr) / len(allr):.3f} | {sum(x[2] for x in allr) / len(allr):.3f} | {js[len(js) // 2]:.2f} |")
    lines += ["", f"{secs:.1f} s for {len(allr)} rewrites (two decontamination passes each)."]
    if examples:
        lines += ["", "Missed rewrites (first 8): " + "; ".join(examples)]
    return "\n".join(lines)


def load_tasks(path: Path):
    """Tasks of a run directory (its tasks table) or of a folder of KernelBench-format files."""
    if (path / "tasks").is_dir():
        from kernelmill import store

        return store.read_records(path, "tasks")
    from graphs.kernelbench import load_task_file

    out = []
    for f in sorted(path.rglob("*.py")):
        try:
            out.append(load_task_file(f))
        except Exception:  # not a KernelBench-format program: not a task
            continue
    return out


def report_table(label: str, tasks, kb: Path, n: int, overlap: float) -> str:
    from curation import decontam

    bench = decontam.load_benchmark(kb, n=n)
    close = {c.task_id: c for c in decontam.closest_programs(tasks, bench, n=n)}
    flagged = {h.task_id for h in decontam.find_contamination(tasks, bench, n=n, overlap=overlap)}
    rows = sorted(tasks, key=lambda t: (t.task_id not in flagged, -(close[t.task_id].jaccard if t.task_id in close else 0)))
    lines = [f"## {label}: {len(tasks)} tasks, {len(flagged)} flagged (n-gram {n}, Jaccard >= {overlap})", "",
             "| task | source | flagged | closest benchmark program | Jaccard | task in program | program in task |",
             "| --- | --- | --- | --- | ---: | ---: | ---: |"]
    for t in rows:
        c = close.get(t.task_id)
        if c is None:
            lines.append(f"| {t.name} | {t.source} | no | (no shared n-gram) | 0 | 0 | 0 |")
        else:
            lines.append(f"| {t.name} | {t.source} | {'**yes**' + (' (exact)' if c.exact else '') if t.task_id in flagged else 'no'} "
                         f"| {c.benchmark_path} | {c.jaccard:.2f} | {c.task_in_benchmark:.2f} | {c.benchmark_in_task:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kb", default=str(ROOT / "ext" / "KernelBench" / "KernelBench"))
    ap.add_argument("--tasks", nargs="*", default=[], metavar="LABEL=DIR",
                    help="task sets to report, as label=directory (a run directory or a folder of task files)")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--no-recall", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "decontam_cpu.md"))
    args = ap.parse_args(argv)
    kb = Path(args.kb)
    load0 = os.getloadavg()[0]
    parts = [f"# Decontamination against {kb.name} ({sum(1 for _ in kb.rglob('*.py'))} programs)", "",
             f"Command: `python bench/bench_decontam.py {' '.join(argv if argv is not None else sys.argv[1:])}`; "
             f"load average at start {load0:.1f}; {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}", ""]
    if not args.no_recall:
        parts += [recall_table(kb, args.n, args.overlap), ""]
    for spec in args.tasks:
        label, _, d = spec.partition("=")
        parts += [report_table(label, load_tasks(Path(d)), kb, args.n, args.overlap), ""]
    text = "\n".join(parts)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
