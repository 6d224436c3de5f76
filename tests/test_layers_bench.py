"""bench/ only measures (issue 36): tests import the measurement harness package bench/lib (issue 48) and nothing
else of bench/ (a benchmark script is never a test's dependency), and bench/*.py stays small. That no product
module imports bench at all is tests/test_architecture.py's. Scans the source with ast: an ``import bench``,
``from bench import x`` or ``from bench.x import y`` anywhere in a file, at top level or inside a function."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# issue 36: bench/*.py (the scripts; the harness package bench/lib is not counted) under 3,500 lines; lower it as
# benchmarks shrink, never raise it
BENCH_LINE_CAP = 3500
HARNESS = "bench.lib"  # the one part of bench/ that tests may import


def imported_modules(node: ast.AST) -> list[str]:
    """The modules an import statement names: ``from bench import lib`` names bench.lib (a package's names are
    its modules), ``from bench.lib import fixtures`` bench.lib; [] for anything else (relative imports too)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [f"bench.{a.name}" for a in node.names] if node.module == "bench" else [node.module]
    return []


def bench_imports(path: Path, root: Path = ROOT, *, allowed: str = "") -> list[str]:
    """``path:line`` of every import of the bench package in one Python file, except those of package ``allowed``
    and its modules."""
    def counts(n: str) -> bool:
        return (n == "bench" or n.startswith("bench.")) and not (allowed and (n == allowed
                                                                             or n.startswith(allowed + ".")))
    return [f"{path.relative_to(root)}:{node.lineno}"
            for node in ast.walk(ast.parse(path.read_text(errors="replace"), filename=str(path)))
            if any(counts(n) for n in imported_modules(node))]


def files_of(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)


def test_the_scan_finds_each_form_of_a_bench_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\nimport bench.common\nfrom bench import testbed_build\n"
                 "def g():\n    from bench.common import emit\nfrom benchmarks import x\nfrom .bench import y\n")
    assert bench_imports(f, tmp_path) == ["m.py:2", "m.py:3", "m.py:5"]


def test_the_scan_lets_the_harness_package_through(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from bench.lib import fixtures as fx\nimport bench.lib.testbed\nfrom bench import lib\n"
                 "from bench import common\nfrom bench.libx import y\ndef g():\n    from bench.common import emit\n")
    assert bench_imports(f, tmp_path, allowed=HARNESS) == ["m.py:4", "m.py:5", "m.py:7"]
    assert bench_imports(f, tmp_path) == [f"m.py:{i}" for i in (1, 2, 3, 4, 5, 7)]


def test_tests_import_only_the_harness_package_of_bench():
    files = files_of("tests")
    assert len(files) > 50  # the scan saw the tree
    found = [hit for f in files for hit in bench_imports(f, allowed=HARNESS)]
    assert not found, ("imports of bench/ outside bench/lib (move what a test needs into bench/lib): "
                       + ", ".join(found))


def test_bench_stays_under_its_line_cap():
    lines = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "bench").glob("*.py")}
    assert sum(lines.values()) < BENCH_LINE_CAP, (
        f"bench/*.py has {sum(lines.values())} lines (cap {BENCH_LINE_CAP}): "
        + ", ".join(f"{k} {v}" for k, v in sorted(lines.items(), key=lambda kv: -kv[1])))
