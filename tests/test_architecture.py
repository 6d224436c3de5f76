"""The repository's architecture (issue 48), read from the source with ast, imports inside functions included:

- no product module (the packages of PRODUCT) imports bench/: the measurement harness (bench/lib) and the
  benchmark scripts import the product, never the other way (that tests import only bench/lib of bench/ is
  tests/test_layers_bench.py's);
- the import graph between the product's top-level packages has no cycle other than those of KNOWN_CYCLES, and
  each of those still exists (the set is kept true: a cycle removed leaves the set with it);
- every cheat code of verifier/cheats.py has exactly one check (the function deciding it) and at least one probe,
  exactly one row in the anti-cheat catalogue docs/ANTI_CHEAT.md naming both, the test files a row names assert its
  code, and at least one red-team test asserts each code.
"""

import ast
import importlib
import re
from collections import defaultdict
from pathlib import Path

import pytest

from verifier import cheats

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("kernelmill", "verifier", "synth", "graphs", "curation", "flows", "train", "orchestrator")
CATALOGUE = ROOT / "docs" / "ANTI_CHEAT.md"

# The package cycles of today, each a defect to remove (issue 48: "No package cycles"); remove its entry with it.
# None is left: kernelmill.settings holds the [verify] section's dataclass itself (verifier.common.config names it),
# and the one CLI sits at the top, in flows/.
KNOWN_CYCLES: set[frozenset] = set()


# ------------------------------------------------------------------------------------------------- imports
def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in one file, at any depth: ``import a.b`` and ``from a.b import c``
    name a.b, ``from a import b`` names a.b as well (a package's names may be its modules). Relative imports stay
    inside their own top-level package and are left out."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(errors="replace"), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return sorted(out)


def python_files(*dirs: str, root: Path = ROOT) -> list[Path]:
    return sorted(p for d in dirs for p in (root / d).rglob("*.py") if "__pycache__" not in p.parts)


def package_graph(root: Path = ROOT, packages=PRODUCT) -> dict[tuple[str, str], list[str]]:
    """{(importer, imported): ["path:line", ...]} between the top-level ``packages``."""
    edges = defaultdict(list)
    for pkg in packages:
        for f in python_files(pkg, root=root):
            for line, top in sorted({(line, name.split(".")[0]) for line, name in imports_of(f)}):
                if top in packages and top != pkg:
                    edges[(pkg, top)].append(f"{f.relative_to(root)}:{line}")
    return dict(edges)


def cycles(nodes, edges) -> set[frozenset]:
    """The strongly connected components of more than one node: each set of packages that import one another
    around a cycle."""
    reach = {n: {b for a, b in edges if a == n} for n in nodes}
    changed = True
    while changed:  # transitive closure; a handful of nodes
        changed = False
        for n in nodes:
            more = set().union(*(reach[m] for m in reach[n])) - reach[n]
            if more:
                reach[n] |= more
                changed = True
    return {frozenset({n} | {m for m in reach[n] if n in reach[m]}) for n in nodes if n in reach[n]}


def test_the_import_scan_finds_each_form(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os.path\nfrom bench.lib import fixtures as fx\nfrom bench import common\n"
                 "def g():\n    import flows.commands\n    from . import sibling\n"
                 "if True:\n    from verifier import cheats\n")
    assert imports_of(f) == [(1, "os.path"), (2, "bench.lib"), (2, "bench.lib.fixtures"), (3, "bench"),
                             (3, "bench.common"), (5, "flows.commands"), (8, "verifier"), (8, "verifier.cheats")]


def test_no_product_module_imports_bench():
    files = python_files(*PRODUCT)
    assert len(files) > 100  # the scan saw the tree
    found = [f"{f.relative_to(ROOT)}:{line} {name}" for f in files for line, name in imports_of(f)
             if name == "bench" or name.startswith("bench.")]
    assert not found, ("product modules importing bench/ (the harness imports the product, never the other way; "
                       "move what the product needs into it): " + ", ".join(found))


def test_the_cycle_finder(tmp_path):
    assert cycles("abcde", {("a", "b"), ("b", "c"), ("c", "a"), ("d", "a"), ("d", "e")}) == {frozenset("abc")}
    assert cycles("ab", {("a", "b")}) == set()
    for pkg, body in {"p": "import q.x\n", "q": "def f():\n    from p import y\n", "r": "import p\n"}.items():
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text(body)
    g = package_graph(tmp_path, ("p", "q", "r"))
    assert g == {("p", "q"): ["p/__init__.py:1"], ("q", "p"): ["q/__init__.py:2"], ("r", "p"): ["r/__init__.py:1"]}
    assert cycles("pqr", g) == {frozenset("pq")}


def test_the_package_import_graph_has_only_the_known_cycles():
    graph = package_graph()
    assert ("verifier", "kernelmill") in graph and ("orchestrator", "synth") in graph  # the scan saw the tree
    found = cycles(PRODUCT, graph)

    def where(cycle) -> str:
        return "; ".join(f"{a} -> {b}: {', '.join(graph[(a, b)][:3])}" for a, b in sorted(graph)
                         if a in cycle and b in cycle)
    new = [f"{sorted(c)} ({where(c)})" for c in found - KNOWN_CYCLES]
    assert not new, "new package import cycles (break them; never add them to KNOWN_CYCLES): " + " | ".join(new)
    gone = [sorted(c) for c in KNOWN_CYCLES - found]
    assert not gone, f"cycles of KNOWN_CYCLES that no longer exist (remove them from the set): {gone}"


# ----------------------------------------------------------------------------------------- anti-cheat catalogue
def catalogue_rows(text: str) -> list[list[str]]:
    """The cells of every table row of docs/ANTI_CHEAT.md whose first cell is a cheat code (`C05_...`)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if re.fullmatch(r"C\d\d_[A-Z0-9_]+", cells[0].strip("`")):
                rows.append([cells[0].strip("`")] + cells[1:])
    return rows


def codes_asserted(path: Path) -> set[str]:
    """The cheat codes one test file names in code: ``cheats.C05`` or a string holding ``C05_CONSTANT_OUTPUT``."""
    short = {name: getattr(cheats, name) for name in dir(cheats) if re.fullmatch(r"C\d\d", name)}
    found = set()
    for node in ast.walk(ast.parse(path.read_text(errors="replace"), filename=str(path))):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cheats"
                and node.attr in short):
            found.add(short[node.attr])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= {c for c in cheats.CODES if c in node.value}
    return found


def asserting_tests() -> dict[str, list[str]]:
    by_code = defaultdict(list)
    for f in python_files("tests"):
        if f.name != Path(__file__).name:
            for code in codes_asserted(f):
                by_code[code].append(str(f.relative_to(ROOT)))
    return by_code


def test_the_catalogue_scans(tmp_path):
    text = ("| code | catches | how | check | probes | tests |\n| --- | --- | --- | --- | --- | --- |\n"
            "| `C05_CONSTANT_OUTPUT` | zeros | judge | `constant_output` | `judge.outputs.check_outputs` (judge) | "
            "`tests/a.py` |\n"
            "| 22 | a thread | C01, C09 | - |\n")
    assert catalogue_rows(text) == [["C05_CONSTANT_OUTPUT", "zeros", "judge", "`constant_output`",
                                     "`judge.outputs.check_outputs` (judge)", "`tests/a.py`"]]
    f = tmp_path / "t.py"
    f.write_text('from verifier import cheats\nx = [cheats.C05, "cheat"]\n'
                 'y = "Anti-cheat C07_INPUT_MUTATION: ..."\n# C08_OUTPUT_CACHING in a comment is not asserted\n')
    assert codes_asserted(f) == {cheats.C05, cheats.C07}


def test_every_cheat_code_has_exactly_one_row_in_the_catalogue():
    rows = catalogue_rows(CATALOGUE.read_text())
    count = {code: [r[0] for r in rows].count(code) for code in cheats.CODES}
    assert len(cheats.CODES) >= 18
    assert not [c for c, n in count.items() if n != 1], f"codes without exactly one row in {CATALOGUE}: {count}"
    assert not [r[0] for r in rows if r[0] not in cheats.CODES], "rows of codes verifier/cheats.py does not define"
    assert all(len(r) == 6 and all(r) for r in rows), \
        "each row: code | what it catches | how | check | probes | test files"


def test_every_cheat_code_is_asserted_by_a_test_and_its_row_names_them():
    by_code = asserting_tests()
    missing = [c for c in cheats.CODES if not by_code.get(c)]
    assert not missing, f"cheat codes no test under tests/ asserts: {missing}"
    wrong = []
    for code, _, _, _, _, files in catalogue_rows(CATALOGUE.read_text()):
        named = re.findall(r"`(tests/[^`]+\.py)`", files)
        if not named:
            wrong.append(f"{code}: names no test file")
        wrong += [f"{code}: {f} does not assert it" for f in named if f not in by_code[code]]
    assert not wrong, f"{CATALOGUE.name} rows out of date: " + "; ".join(wrong)


# ------------------------------------------------------------------------------------ the verifier's packages
# verifier/ is laid along a candidate's path (verifier/README.md, "Packages"): each unit below may import only the
# units named for it. A unit is a subpackage (verifier.front, ...) or a top-level module (verifier.engine, ...).
VERIFIER_MAY_IMPORT = {
    "verifier.common": set(),
    "verifier.cheats": set(),
    "verifier.child": {"verifier.common"},
    "verifier.front": {"verifier.common", "verifier.cheats"},
    "verifier.build": {"verifier.common", "verifier.front"},
    "verifier.execute": {"verifier.common"},
    "verifier.judge": {"verifier.common", "verifier.cheats", "verifier.execute", "verifier.child", "verifier.front"},
    "verifier.runs": {"verifier.common", "verifier.execute", "verifier.judge"},
    "verifier.workers": {"verifier.common", "verifier.execute"},
    "verifier.screen": {"verifier.common", "verifier.cheats", "verifier.front", "verifier.build", "verifier.judge"},
    "verifier.engine": {"verifier.common", "verifier.front", "verifier.build", "verifier.execute", "verifier.judge",
                        "verifier.runs", "verifier.workers", "verifier.screen"},
    "verifier.ray_pool": {"verifier.common", "verifier.front", "verifier.build", "verifier.engine"},
    "verifier.entry": {"verifier.common", "verifier.front", "verifier.engine", "verifier.ray_pool"},
    "verifier.serve": {"verifier.common", "verifier.front", "verifier.entry", "verifier.engine"},
}
# The execution child runs the candidate's code: what it loads is the import closure of these modules (the fork
# server preloads the job's imports; a job runs child.worker's main). Only the child package and common may be in it.
CHILD_ROOTS = ("verifier.child.worker", "verifier.child.forkserver")
CHILD_MAY_LOAD = ("verifier.child", "verifier.common", "kernelmill.errors", "kernelmill.settings")  # settings: dataclasses


def verifier_unit(name: str, root: Path = ROOT) -> str | None:
    """The unit of VERIFIER_MAY_IMPORT a dotted name belongs to (``verifier.judge.outputs.RNG_LOCK`` ->
    verifier.judge), or None outside verifier/ or for the package itself."""
    parts = name.split(".")
    if parts[0] != "verifier" or len(parts) < 2:
        return None
    if (root / "verifier" / parts[1]).is_dir() or (root / "verifier" / f"{parts[1]}.py").is_file():
        return f"verifier.{parts[1]}"
    return None


def module_file(name: str, root: Path = ROOT) -> Path | None:
    base = root.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def import_closure(roots, root: Path = ROOT, tops=("verifier", "kernelmill")) -> dict[str, str]:
    """{module: the module that first imported it} over every module of ``tops`` reachable from ``roots`` by
    imports at any depth (a package's __init__ included)."""
    seen, stack = {}, [(r, "") for r in roots]
    while stack:
        name, by = stack.pop()
        f = module_file(name, root)
        if f is None or name in seen:
            continue
        seen[name] = by
        parts = name.split(".")
        stack += [(".".join(parts[:i]), name) for i in range(1, len(parts))]  # the packages it lives in
        stack += [(n, name) for _, n in imports_of(f) if n.split(".")[0] in tops]
    return seen


def test_the_closure_follows_every_import_form(tmp_path):
    (tmp_path / "verifier" / "child").mkdir(parents=True)
    (tmp_path / "verifier" / "judge").mkdir()
    for f, body in {"verifier/__init__.py": "", "verifier/child/__init__.py": "", "verifier/judge/__init__.py": "",
                    "verifier/child/worker.py": "def main():\n    from verifier.child import helper\n",
                    "verifier/child/helper.py": "import verifier.judge.outputs\n",
                    "verifier/judge/outputs.py": "X = 1\n"}.items():
        (tmp_path / f).write_text(body)
    found = import_closure(["verifier.child.worker"], tmp_path)
    assert found["verifier.judge.outputs"] == "verifier.child.helper"
    assert found["verifier.child.helper"] == "verifier.child.worker"
    assert verifier_unit("verifier.judge.outputs.X", tmp_path) == "verifier.judge"
    assert verifier_unit("verifier", tmp_path) is None


def test_the_candidates_process_loads_only_the_child_package_and_common():
    found = import_closure(CHILD_ROOTS)
    assert "verifier.child.worker" in found and "verifier.common.contract" in found  # the scan saw the tree
    outside = [f"{m} (imported by {by})" for m, by in sorted(found.items())
               if m not in ("verifier", "kernelmill")
               and not any(m == ok or m.startswith(ok + ".") for ok in CHILD_MAY_LOAD)]
    assert not outside, ("verifier modules that would load in the candidate's process (keep the child to "
                         "verifier.child and verifier.common): " + ", ".join(outside))


def test_the_verifier_packages_import_only_along_the_path():
    edges = defaultdict(list)
    for f in python_files("verifier"):
        unit = verifier_unit(".".join(f.relative_to(ROOT).with_suffix("").parts))
        for line, name in imports_of(f):
            other = verifier_unit(name)
            if unit and other and other != unit:
                edges[(unit, other)].append(f"{f.relative_to(ROOT)}:{line}")
    units = {u for e in edges for u in e}
    assert "verifier.child" in units and "verifier.judge" in units  # the scan saw the tree
    assert not units - set(VERIFIER_MAY_IMPORT), f"units VERIFIER_MAY_IMPORT does not name: {units - set(VERIFIER_MAY_IMPORT)}"
    wrong = [f"{a} -> {b} ({', '.join(w[:3])})" for (a, b), w in sorted(edges.items())
             if b not in VERIFIER_MAY_IMPORT[a]]
    assert not wrong, "imports against the verifier's layout: " + "; ".join(wrong)
    assert not cycles(units, set(edges)), cycles(units, set(edges))


# ------------------------------------------------------------------------------------------- the check registry
def probes_cell(code: str) -> str:
    """The catalogue's "probes" cell of ``code``, as the registry says it."""
    return ", ".join(f"`{p.function.removeprefix('verifier.')}` ({p.where})" for p in cheats.registered()[code][1])


def test_the_registry_refuses_an_unknown_code_or_place():
    with pytest.raises(KeyError, match="C99_NOTHING"):
        cheats.probe("C99_NOTHING", where="judge")
    with pytest.raises(ValueError, match="where"):
        cheats.probe(cheats.C05, where="somewhere")
    with pytest.raises(KeyError):
        cheats.probe(where="judge")
    with pytest.raises(KeyError, match="C99_NOTHING"):
        cheats.Seen(frozenset({"C99_NOTHING"}))
    with pytest.raises(ValueError, match="legality"):
        cheats.Seen(legality="lenient")


def test_a_code_has_one_check_and_a_second_is_refused():
    """Exactly one check per code: the registry is keyed by code, every code has its check, a function of
    verifier/cheats.py, and entering a code again is refused (a code is decided in one place)."""
    reg = cheats.registered()
    assert list(reg) == list(cheats.CODES) == list(cheats.CHECKS)
    for code, (check, _) in reg.items():
        assert check.code == code and check.function.startswith("verifier.cheats.")
        assert getattr(cheats, check.function.rsplit(".", 1)[1]) is check.decide
    before = dict(cheats.CHECKS)
    with pytest.raises(ValueError, match="already has its check"):
        cheats._code(cheats.C05, row=5, pattern="p", caught_by="c", fix="f")(lambda seen: True)
    assert cheats.CHECKS == before


def test_the_checks_decide_what_the_policies_say():
    """The codes a verdict lists come from the checks alone: a sighted code fires under either policy; PyTorch
    compute a monitor saw run is C01 under the strict policy only; found outside the process and never seen to
    run it is C19 (strict only); the partial policy's own-work condition failing is C02 (partial only)."""
    S = cheats.Seen
    for legality in cheats.LEGALITY:
        for code in set(cheats.CODES) - {cheats.C19}:  # C19 is the strict policy's reading of compute found, no sighting
            assert cheats.decide(S(frozenset({code}), legality=legality)) == [code]
        assert cheats.decide(S(legality=legality)) == []
    ran = frozenset({cheats.C01})
    assert cheats.decide(S(torch=ran)) == [cheats.C01]
    assert cheats.decide(S(torch=ran, torch_found=True)) == [cheats.C01]
    assert cheats.decide(S(torch_found=True)) == [cheats.C19]
    assert cheats.decide(S(torch=ran, torch_found=True, legality="partial", partial_ok=True)) == []
    assert cheats.decide(S(torch=ran, legality="partial", partial_ok=False)) == [cheats.C02]
    assert cheats.decide(S(torch_found=True, partial_ok=False)) == [cheats.C19]  # strict: the own-work rule is partial's
    assert cheats.decide(S(frozenset({cheats.C07}), torch=ran)) == [cheats.C01, cheats.C07]
    # a fallback branch PyTorch ran on some trials only: C03 under the strict policy, allowed by the partial one
    branch = frozenset({cheats.C01, cheats.C03})
    assert cheats.decide(S(torch=branch)) == [cheats.C01, cheats.C03]
    assert cheats.decide(S(torch=branch, legality="partial", partial_ok=True)) == []
    # PyTorch compute found in the text while the monitors saw some (of another op) run: C01, not C19
    assert cheats.decide(S(torch=frozenset({cheats.C03}), torch_found=True)) == [cheats.C01, cheats.C03]


def test_every_cheat_code_has_its_check_and_probes_named_in_its_catalogue_row():
    import verifier.engine  # noqa: F401 - imports every module that registers a probe

    reg = cheats.registered()
    assert not [c for c in cheats.CODES if not reg[c][1]], "cheat codes no registered probe sees"
    for code, (_, probes) in reg.items():
        for p in probes:
            module, _, name = p.function.rpartition(".")
            obj = importlib.import_module(module)
            assert callable(getattr(obj, name, None)), f"{code}: {p.function} is not a function of {module}"
    rows = {r[0]: (r[3], r[4]) for r in catalogue_rows(CATALOGUE.read_text())}
    wrong = [f"{code}: the row's check is {rows.get(code, ('',))[0]!r}, the registry's {reg[code][0].function!r}"
             for code in cheats.CODES if rows.get(code, ("",))[0] != f"`{reg[code][0].function.rsplit('.', 1)[1]}`"]
    # as sets: the registry's order is the order its modules happened to be imported in
    wrong += [f"{code}: the row says {rows.get(code, ('', ''))[1]!r}, the registry {probes_cell(code)!r}"
              for code in cheats.CODES
              if set(rows.get(code, ("", ""))[1].split(", ")) != set(probes_cell(code).split(", "))]
    assert not wrong, f"{CATALOGUE.name}'s check and probes cells out of date: " + "; ".join(wrong)


def test_every_cheat_code_has_a_red_team_test():
    by_code = asserting_tests()
    missing = [c for c in cheats.CODES if not any(f.startswith(("tests/redteam/", "tests/gpu/redteam/"))
                                                  for f in by_code.get(c, []))]
    assert not missing, f"cheat codes no red-team test (tests/redteam, tests/gpu/redteam) asserts: {missing}"


def test_every_catalogue_row_names_the_tests_that_assert_its_code():
    """The catalogue's tests cell of each code lists exactly the test files that assert it (codes_asserted): a new
    red-team file goes into its row, a row names no test that no longer asserts its code."""
    rows = {r[0]: set(re.findall(r"`([^`]+)`", r[5])) for r in catalogue_rows(CATALOGUE.read_text())}
    by_code = asserting_tests()
    wrong = [f"{code}: missing {sorted(set(by_code.get(code, [])) - rows.get(code, set()))}, "
             f"extra {sorted(rows.get(code, set()) - set(by_code.get(code, [])))}"
             for code in cheats.CODES if rows.get(code, set()) != set(by_code.get(code, []))]
    assert not wrong, f"{CATALOGUE.name}'s tests cells out of date: " + "; ".join(wrong)
