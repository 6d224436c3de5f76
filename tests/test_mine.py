"""End-to-end mining of the shipped sample corpus (data/sample_repos) and the `kernelmill mine` CLI.

The corpus is mined once per session (real tree-sitter parses, real sandboxed subprocesses). Every
emitted task is then run from its own file in a fresh process: each in its own child forked from a
`python` that has imported torch and nothing else (so 20 programs do not cost 20 torch imports), and
two of them (a cross-file module, a config-object module) in a brand-new interpreter as well."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from graphs.kernelbench import check_kernelbench_source
from kernelmill import store
from flows.cli import main as cli_main
from kernelmill.schema import task_id_for
from synth.mine.miner import mine_tasks

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample_repos"
TARGET = 1 << 18
ALLOW = ["mit", "apache-2.0", "bsd-3-clause", "bsd-2-clause", "unknown"]


@pytest.fixture(scope="session")
def mined():
    return mine_tasks(str(SAMPLE), target_numel=TARGET, timeout_s=8, license_allowlist=ALLOW, workers=2)


def outcome(result, cls: str, path_part: str = "") -> str:
    rows = [m for m in result.report.modules if m["class"] == cls and path_part in m["path"]]
    assert rows, f"{cls} not in report"
    return rows[0]["outcome"]


def test_report_counts_every_step(mined):
    r = mined.report
    assert r.files == 18 and r.files_parsed == 15
    assert dict(r.file_skips) == {"binary": 1, "non_utf8": 1, "syntax_error": 1}
    assert r.modules_found == 30
    assert r.self_contained == r.modules_found - sum(r.not_self_contained.values())
    assert r.license_allowed == r.self_contained - sum(r.license_rejected.values())
    assert r.inputs_deduced == r.license_allowed - sum(r.deduction_failures.values())
    assert r.tasks_emitted == len(mined.tasks) == r.runs_from_file - r.duplicates
    assert r.yield_ == pytest.approx(len(mined.tasks) / r.modules_found)
    passed = [r.passed_filters[f] for f in ("float_output", "no_io_or_randomness", "deterministic",
                                            "input_dependent", "runtime")]
    assert passed == sorted(passed, reverse=True) and passed[0] <= r.inputs_deduced
    table = r.table()
    for label in ("files", "modules found", "made self-contained", "inputs deduced", "passed deterministic",
                  "tasks emitted", "yield"):
        assert label in table
    d = r.as_dict()
    json.dumps(d)
    assert d["tasks_emitted"] == len(mined.tasks)


def test_bad_modules_are_counted_with_their_reason(mined):
    assert outcome(mined, "FusedLayerNorm") == "missing_package"
    assert outcome(mined, "PlainScale") == "task"  # same file as the missing import, but does not need it
    assert outcome(mined, "Conv1dStack") == "license"
    assert outcome(mined, "HangingInit") == "timeout"
    assert outcome(mined, "HugeBuffer") == "memory"
    assert outcome(mined, "NoisyHead") == "no_io_or_randomness"
    assert outcome(mined, "LoggingLayer") == "no_io_or_randomness"
    assert outcome(mined, "CallCounter") == "deterministic"
    assert outcome(mined, "ArgmaxHead") == "float_output"
    assert outcome(mined, "LearnedQueries") == "input_dependent"
    assert mined.report.duplicates == 1 and outcome(mined, "RMSNorm", "norms.py") == "duplicate"


def test_tasks_are_kernelbench_programs_with_provenance(mined):
    names = {t.name for t in mined.tasks}
    # helpers, nested modules, cross-file imports, config objects, embeddings, inherited constructors
    for expected in ("visionlib_MBConv", "visionlib_ResidualBlock", "textmodels_TransformerBlock",
                     "textmodels_MultiHeadSelfAttention", "textmodels_PoolerHead", "textmodels_TokenEmbedding",
                     "visionlib_GroupNormAct", "visionlib_GELUTanh"):
        assert expected in names
    ids = [t.task_id for t in mined.tasks]
    assert len(set(ids)) == len(ids)
    for t in mined.tasks:
        check_kernelbench_source(t.reference_code, t.name)
        assert t.task_id == task_id_for(t.reference_code)
        assert t.source == "github" and t.origin.repo in ("visionlib", "textmodels")
        assert t.origin.license in ("mit", "apache-2.0") and t.origin.class_name and t.origin.path.endswith(".py")
        assert "class Model(" in t.reference_code
        numel = max(math.prod(s.shape) for s in [*t.input_specs, *t.output_specs])
        assert TARGET // 8 <= numel <= TARGET, (t.name, t.input_specs)
    mb = next(t for t in mined.tasks if t.name == "visionlib_MBConv")
    assert "def make_divisible" in mb.reference_code and "class ConvBNAct" in mb.reference_code
    assert mb.input_specs[0].shape[1] == 32 and len(mb.input_specs[0].shape) == 4
    emb = next(t for t in mined.tasks if t.name == "textmodels_TokenEmbedding")
    assert emb.input_specs[0].dtype == "int64" and "torch.randint(0, " in emb.reference_code
    pooler = next(t for t in mined.tasks if t.name == "textmodels_PoolerHead")
    assert "types.SimpleNamespace(hidden_size=" in pooler.init_inputs


RUN_ONE = """
import runpy, sys, torch
g = runpy.run_path(sys.argv[1])
model = g["Model"](*g["get_init_inputs"]()).eval()
with torch.no_grad():
    out = model(*g["get_inputs"]())
outs = out if isinstance(out, (tuple, list)) else [out]
print([list(o.shape) for o in outs if isinstance(o, torch.Tensor)])
"""

# Forks one fresh child per file from a process that has imported torch and nothing else, so each
# program runs alone from its own file without paying for a new torch import every time.
FORK_EACH = """
import json, os, sys, torch
results = {}
for path in sys.argv[1:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            import runpy
            g = runpy.run_path(path)
            model = g["Model"](*g["get_init_inputs"]()).eval()
            with torch.no_grad():
                out = model(*g["get_inputs"]())
            outs = out if isinstance(out, (tuple, list)) else [out]
            msg = str([list(o.shape) for o in outs if isinstance(o, torch.Tensor)])
        except BaseException as e:
            msg = "ERROR " + repr(e)
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    results[path] = data.decode()
print(json.dumps(results))
"""


def _write_tasks(tasks, folder):
    paths = {}
    for t in tasks:
        f = folder / f"{t.name}.py"
        f.write_text(t.reference_code)
        paths[t.name] = f
    return paths


def test_every_task_runs_in_a_fresh_process_from_its_own_file(mined, tmp_path):
    paths = _write_tasks(mined.tasks, tmp_path)
    r = subprocess.run([sys.executable, "-c", FORK_EACH, *map(str, paths.values())], capture_output=True,
                       text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    results = json.loads(r.stdout)
    for t in mined.tasks:
        assert results[str(paths[t.name])] == str([s.shape for s in t.output_specs]), t.name


@pytest.mark.parametrize("name", ["visionlib_MBConv", "textmodels_TransformerBlock"])
def test_task_runs_in_a_new_interpreter(mined, tmp_path, name):
    t = next(t for t in mined.tasks if t.name == name)
    f = _write_tasks([t], tmp_path)[name]
    r = subprocess.run([sys.executable, "-c", RUN_ONE, str(f)], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == str([s.shape for s in t.output_specs])


def test_cli_writes_tasks_table_and_report(tmp_path, capsys):
    src = tmp_path / "repo"
    src.mkdir()
    (src / "LICENSE").write_text("MIT License\n\nPermission is hereby granted, free of charge, to any person")
    (src / "layers.py").write_text((SAMPLE / "visionlib" / "visionlib" / "layers.py").read_text())
    out = tmp_path / "run"
    code = cli_main(["mine", str(src), "--out", str(out), "--workers", "1", "--target-numel", "65536"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "modules found" in printed and "tasks emitted" in printed
    tasks = store.read_records(out, "tasks")
    report = json.loads((out / "mine_report.json").read_text())
    assert report["modules_found"] == 5 and report["tasks_emitted"] == len(tasks) == 5
    assert "| tasks emitted | 5 |" in (out / "mine_report.md").read_text()
    import duckdb

    rows = duckdb.sql(f"SELECT count(*), min(length(reference_code)) FROM read_parquet('{out}/tasks/*.parquet')").fetchall()[0]
    assert rows[0] == 5 and rows[1] > 100
    # a second run adds nothing: the table is keyed by task_id
    assert cli_main(["mine", str(src), "--out", str(out), "--workers", "1", "--target-numel", "65536"]) == 0
    assert len(store.read_records(out, "tasks")) == 5


def test_cli_names_a_bad_source(tmp_path, capsys):
    assert cli_main(["mine", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "nope" in capsys.readouterr().err
