"""bench/ only measures (issue 36): no test and no product module imports bench (a benchmark may import the
product, never the other way), and bench/*.py stays small. Scans the source with ast: an ``import bench``,
``from bench import x`` or ``from bench.x import y`` anywhere in a file, at top level or inside a function."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("kernelmill", "verifier", "synth", "graphs", "curation", "flows", "train", "orchestrator")
BENCH_LINE_CAP = 3500  # issue 36: bench/*.py under 3,500 lines; lower it as benchmarks shrink, never raise it


def bench_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``path:line`` of every import of the bench package in one Python file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(errors="replace"), filename=str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        if any(n == "bench" or n.startswith("bench.") for n in names):
            out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def files_of(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)


def test_the_scan_finds_each_form_of_a_bench_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\nimport bench.common\nfrom bench import testbed_build\n"
                 "def g():\n    from bench.common import emit\nfrom benchmarks import x\nfrom .bench import y\n")
    assert bench_imports(f, tmp_path) == ["m.py:2", "m.py:3", "m.py:5"]


def test_no_test_and_no_product_module_imports_bench():
    files = files_of("tests", *PRODUCT)
    assert len(files) > 100  # the scan saw the tree
    found = [hit for f in files for hit in bench_imports(f)]
    assert not found, "imports of bench/ (move what they need into the product): " + ", ".join(found)


def test_bench_stays_under_its_line_cap():
    lines = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "bench").glob("*.py")}
    assert sum(lines.values()) < BENCH_LINE_CAP, (
        f"bench/*.py has {sum(lines.values())} lines (cap {BENCH_LINE_CAP}): "
        + ", ".join(f"{k} {v}" for k, v in sorted(lines.items(), key=lambda kv: -kv[1])))
