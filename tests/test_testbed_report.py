"""The test bed's CPU side (bench/lib/testbed.py, bench/lib/testbed_report.py): shard selection, merging shard JSONL
files, the hand classification of disagreements, the markdown tables, two runs compared and the regressions the
gpu suite fails on, the extraction + static run and the budget of a run over a small manifest, and the builder
script (bench/testbed_build.py, run as a program) over a fork made here. Every row and program here is written
by hand in this file (no fetched solution, no ext/)."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lib import testbed as T
from bench.lib import testbed_report as tb
from kernelmill.errors import InputError
from bench.lib.testbed import TestbedSolution

ROOT = Path(__file__).resolve().parents[1]


def row(id_, status, judgement="correct", source="srcA", level=1, cheats=(), key="", **kw):
    r = {"id": id_, "source": source, "level": level, "problem": f"p_{id_}", "problem_id": 1, "model": "m",
         "source_judgement": judgement, "source_speedup": 1.0, "source_gpu": "L40S", "status": status,
         "stage_reached": "", "cheats": list(cheats), "max_abs_err": None, "max_rel_err": None,
         "own_kernel_share": None, "fallback_ops": [], "foreign_kernels": [], "pass_strict": None,
         "pass_partial": None, "speedup_eager": None, "runtime_us": None, "eager_us": None, "feedback": key,
         "key_line": key, "findings": [], "stage_seconds_total": 1.0, "legality": "strict", "device": "H100"}
    r.update(kw)
    return r


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def shards(tmp_path):
    s0 = write_jsonl(tmp_path / "testbed_h100_s0of2.jsonl", [
        row("a1", "pass", pass_strict=True, pass_partial=True),
        row("a2", "wrong", max_abs_err=9.8e-4, max_rel_err=1e-3, key="mismatch at [3, 7]: got 0.8783, expected 0.8785"),
        row("a3", tb.NOT_REACHED, key="budget reached while running"),
    ])
    s1 = write_jsonl(tmp_path / "testbed_h100_s1of2.jsonl", [
        row("a3", "cheat", cheats=["C01_TORCH_COMPUTE"], source="srcB", level=2, key="Static check, line 9: calls `F.conv2d`",
            pass_strict=False, pass_partial=True),
        row("b1", "pass", judgement="incorrect", source="srcB", level=2, pass_strict=True, pass_partial=True),
        row("b2", "task_error", source="srcB", level=2, key="the reference output does not depend on its inputs"),
    ])
    return s0, s1


def test_merge_keeps_a_verdict_over_not_reached_whatever_the_file_order(shards):
    s0, s1 = shards
    for files in ([s0, s1], [s1, s0]):
        rows = {r["id"]: r for r in tb.merge_rows(files)}
        assert sorted(rows) == ["a1", "a2", "a3", "b1", "b2"]
        assert rows["a3"]["status"] == "cheat"


def test_report_tables_agreement_and_disagreements_with_classes(shards, tmp_path):
    classes_file = tmp_path / "classes.json"
    classes_file.write_text(json.dumps({"a2": {"class": "tolerance", "note": "K=4096 accumulation order"},
                                        "b2": "task at fault"}))
    rows = tb.merge_rows(list(shards))
    text = tb.render(rows, tb.load_classes(classes_file), "t", [])
    # verdicts by status: the all row counts every status once
    all_row = next(ln for ln in text.splitlines() if ln.startswith("| all |  | 5 |"))
    assert all_row.count("| 1 ") >= 3 and "| 2 |" in all_row  # pass 2, wrong/cheat/task_error 1 each
    assert "| C01_TORCH_COMPUTE |" in text
    # agreement: srcA correct 2 of 2 judged... a1 agrees, a2 does not
    assert "| srcA | correct | 2 |" in text and "1 (50%)" in text
    # an "incorrect" solution the verifier passes is a disagreement too
    dis = text.split("## Disagreements")[1]
    for i in ("a2", "a3", "b1", "b2"):
        assert f"| {i} |" in dis
    assert "| a1 |" not in dis
    a2 = next(ln for ln in dis.splitlines() if ln.startswith("| a2 |"))
    assert "| tolerance | K=4096 accumulation order |" in a2 and "9.80e-04 / 1.00e-03" in a2 and "mismatch at [3, 7]" in a2
    b2 = next(ln for ln in dis.splitlines() if ln.startswith("| b2 |"))
    assert "| task at fault |" in b2
    a3 = next(ln for ln in dis.splitlines() if ln.startswith("| a3 |"))
    assert a3.endswith("|  |  |")  # not classified yet: empty class and note
    assert "(unclassified): 2" in text and "task at fault: 1" in text and "tolerance: 1" in text


def test_classify_csv_and_bad_class(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("id,class,note\na2,verifier fault,static scan misreads nn.init\n")
    assert tb.load_classes(f) == {"a2": {"class": "verifier fault", "note": "static scan misreads nn.init"}}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"a2": "flaky"}))
    with pytest.raises(InputError, match="a2: class 'flaky'"):
        tb.load_classes(bad)


def test_merge_names_the_file_and_line_of_a_bad_row(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(row("a1", "pass")) + "\n{not json\n")
    with pytest.raises(InputError, match="bad.jsonl line 2"):
        tb.merge_rows([f])
    with pytest.raises(InputError, match="missing.jsonl: no such verdict file"):
        tb.merge_rows([tmp_path / "missing.jsonl"])


def sol(id_, level=1, source="x", judgement="correct", problem_id=1, base=Path("/nonexistent")):
    return TestbedSolution(id=id_, source=source, level=level, problem_name=f"p{problem_id}",
                           problem_file=base / "p.py", solution_file=base / f"{id_}.py", model="m",
                           source_judgement=judgement, problem_id=problem_id)


def test_shards_are_disjoint_and_cover_the_selection():
    rows = [sol(f"src-l{1 + i % 3}-p{i:03d}", level=1 + i % 3, source="x" if i % 2 else "y", problem_id=i)
            for i in range(50)]
    parts = [T.select(rows, shard=f"{i}/3") for i in range(3)]
    ids = [r.id for p in parts for r in p]
    assert sorted(ids) == sorted(r.id for r in rows) and len(set(ids)) == 50
    assert {r.level for r in parts[0]} == {1, 2, 3}
    assert all(r.level == 2 for r in T.select(rows, levels=[2]))
    assert len(T.select(rows, sources=["x"], limit=4)) == 4
    with pytest.raises(InputError, match="sources: no solution of nosuch"):
        T.select(rows, sources=["x", "nosuch"])
    with pytest.raises(InputError, match="shard: 3/3"):
        T.select(rows, shard="3/3")
    assert "src-l2-p001" not in {r.id for r in T.select(rows, skip_ids={"src-l2-p001"})}


TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
'''

HONEST = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="relu_tb", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=src,
                  functions=["relu"])

class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''

NO_KERNEL = '''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def test_static_only_run_over_a_small_manifest(tmp_path):
    (tmp_path / "problems").mkdir()
    (tmp_path / "solutions").mkdir()
    (tmp_path / "problems" / "relu.py").write_text(TASK)
    manifest = []
    for id_, code in (("honest", HONEST), ("no-kernel", NO_KERNEL)):
        (tmp_path / "solutions" / f"{id_}.py").write_text(code)
        manifest.append({"id": id_, "source": "hand", "repo": "none/none", "commit": "0" * 40, "path": "x",
                         "level": 1, "problem_id": 1, "problem_name": "relu", "problem_file": "problems/relu.py",
                         "solution_file": f"solutions/{id_}.py", "source_judgement": "correct", "model": "hand"})
    write_jsonl(tmp_path / "manifest.jsonl", manifest)
    rows = {r["id"]: r for r in T.run_static(T.load_manifest(tmp_path / "manifest.jsonl"))}
    assert rows["honest"]["status"] == "static_ok"
    assert rows["no-kernel"]["status"] == "extract_error"
    assert "| no-kernel |" in tb.render(list(rows.values()), {}, "t", []).split("## Disagreements")[1]


def test_a_run_writes_one_row_per_solution_without_verifying_past_its_budget(tmp_path):
    """No verification runs here: one solution's file is gone (its row says so), and a budget under the 45 s a
    chunk needs leaves the rest ``not reached``; the JSONL holds the same rows as the return value."""
    (tmp_path / "problems").mkdir()
    (tmp_path / "problems" / "relu.py").write_text(TASK)
    sols = []
    for id_ in ("gone", "kept"):
        (tmp_path / f"{id_}.py").write_text(HONEST)
        sols.append(TestbedSolution(id=id_, source="hand", level=1, problem_name="relu",
                                    problem_file=tmp_path / "problems" / "relu.py", solution_file=tmp_path / f"{id_}.py"))
    (tmp_path / "gone.py").unlink()
    cfg = T.make_config(["trials=7"], "partial")
    assert (cfg.trials, cfg.legality, cfg.time_torch_compile, cfg.timing_trials) == (7, "partial", False, 5)
    rows = T.run_testbed(sols[:1], cfg, tmp_path / "a.jsonl", budget_s=600, chunk=1, backend="cpu", log=lambda m: None)
    assert [(r["id"], r["status"]) for r in rows] == [("gone", "bench_error")] and "could not read" in rows[0]["key_line"]
    rows = T.run_testbed(sols, cfg, tmp_path / "b.jsonl", budget_s=10, backend="cpu", log=lambda m: None)
    assert [(r["id"], r["status"]) for r in rows] == [("gone", tb.NOT_REACHED), ("kept", tb.NOT_REACHED)]
    assert [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()] == rows
    with pytest.raises(InputError, match="nosuch"):
        T.make_config(["nosuch=1"])


def test_an_unreadable_solution_is_its_own_row_and_the_rest_of_its_chunk_is_verified(tmp_path):
    """One verify call for the whole selection (chunk 0): the solution whose file is gone is a bench_error row,
    the other one still goes through the verify entry (no kernel: extract_error, no compile)."""
    (tmp_path / "problems").mkdir()
    (tmp_path / "problems" / "relu.py").write_text(TASK)
    sols = []
    for id_, code in (("gone", HONEST), ("no-kernel", NO_KERNEL)):
        (tmp_path / f"{id_}.py").write_text(code)
        sols.append(TestbedSolution(id=id_, source="hand", level=1, problem_name="relu",
                                    problem_file=tmp_path / "problems" / "relu.py", solution_file=tmp_path / f"{id_}.py"))
    (tmp_path / "gone.py").unlink()
    rows = T.run_testbed(sols, T.make_config([], "strict"), tmp_path / "c.jsonl", budget_s=600, chunk=0,
                         backend="cpu", log=lambda m: None)
    assert sorted((r["id"], r["status"]) for r in rows) == [("gone", "bench_error"), ("no-kernel", "extract_error")]


# ----------------------------------------------------------------------------- two runs compared


@pytest.fixture
def two_runs(tmp_path):
    before = [write_jsonl(tmp_path / "before_s0.jsonl", [
        row("same", "pass", pass_strict=True, pass_partial=True),
        row("fixed", "cheat", cheats=["C01_TORCH_COMPUTE"], key="calls `F.conv2d`"),
        row("broke", "pass", source="srcB", level=2, pass_strict=True, pass_partial=True),
        row("recoded", "cheat", cheats=["C03_FALLBACK_BRANCH"]),
        row("late", "wrong"),
        row("gone", "pass"),
    ])]
    after = [write_jsonl(tmp_path / "after_s0.jsonl", [
        row("same", "pass", pass_strict=True, pass_partial=True),
        row("fixed", "pass", pass_strict=True, pass_partial=True),
        row("late", tb.NOT_REACHED, key="budget reached while running"),
        row("new", "pass"),
    ]), write_jsonl(tmp_path / "after_s1.jsonl", [
        row("broke", "wrong", source="srcB", level=2, key="mismatch at [0, 1]: got 2.0, expected 1.0",
            pass_strict=False, pass_partial=False),
        row("recoded", "cheat", cheats=["C02_KERNEL_NOT_LAUNCHED"]),
    ])]
    return before, after


def test_compare_finds_each_changed_verdict_by_id(two_runs):
    before, after = two_runs
    c = tb.compare(tb.merge_rows(before), tb.merge_rows(after))
    assert sorted(b["id"] for b, _ in c["common"]) == ["broke", "fixed", "recoded", "same"]
    assert [(b["id"], b["status"], a["status"]) for b, a in c["changed"]] == [
        ("fixed", "cheat", "pass"), ("recoded", "cheat", "cheat"), ("broke", "pass", "wrong")]
    # a row the budget did not reach on one side is no change, and ids on one side only are listed apart
    assert c["unreached"] == ["late"] and c["only_before"] == ["gone"] and c["only_after"] == ["new"]


def test_compare_report_tables(two_runs):
    before, after = two_runs
    text = tb.render_compare(tb.compare(tb.merge_rows(before), tb.merge_rows(after)), before, after)
    counts = text.split("## Counts")[1].splitlines()[4]
    assert counts == "| 4 | 3 | 2 | 1 | 1 | 1 | 1 |"
    trans = text.split("## Status transitions")[1]
    assert "| before \\ after | pass | cheat | wrong | all |" in trans
    assert "| cheat | 1 | 1 | 0 | 2 |" in trans and "| pass | 1 | 0 | 1 | 2 |" in trans
    passes = text.split("## Passes per source")[1]
    assert "| srcB | 1 | 1 | 0 | 1 | 0 | 1 | 0 |" in passes and "| all | 4 | 2 | 2 | 2 | 2 | 2 | 2 |" in passes
    changed = text.split("## Changed verdicts (3)")[1]
    recoded = next(ln for ln in changed.splitlines() if ln.startswith("| recoded |"))
    assert "| cheat | cheat | C03_FALLBACK_BRANCH | C02_KERNEL_NOT_LAUNCHED |" in recoded
    broke = next(ln for ln in changed.splitlines() if ln.startswith("| broke |"))
    assert "| pass | wrong |  |  | mismatch at [0, 1]" in broke
    assert "| same |" not in changed and "| late |" not in changed
    assert "Not reached on one side (1): late" in text and "Only before (1): gone" in text


def test_regressions_are_lost_passes_and_verifier_errors_on_correct_solutions(two_runs, tmp_path):
    before, after = two_runs
    got = tb.regressions(tb.merge_rows(before), tb.merge_rows(after))
    assert got == ["broke: pass -> wrong: mismatch at [0, 1]: got 2.0, expected 1.0"]  # "late": not reached
    err = write_jsonl(tmp_path / "err.jsonl", [row("new", "verifier_error", key="worker died"),
                                               row("ok", "verifier_error", judgement="incorrect")])
    assert tb.regressions([], tb.merge_rows([err])) == [
        "new: verifier_error on a solution its source judged correct: worker died"]
    assert tb.regressions(tb.merge_rows(before), tb.merge_rows(before)) == []


def test_compare_script_prints_and_writes_the_report(two_runs, tmp_path):
    before, after = two_runs
    out = tmp_path / "cmp.md"
    p = subprocess.run([sys.executable, "bench/testbed_compare.py", "--before", *map(str, before), "--after",
                        *map(str, after), "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "## Changed verdicts (3)" in p.stdout and out.read_text() == p.stdout.rstrip("\n") + "\n"


def test_per_problem_alternates_judgements_and_keeps_the_hash_first_pick():
    rows = [sol(f"s-l1-p1-m{i}", source="s", judgement="correct" if i < 3 else "incorrect") for i in range(5)]
    two = T.select(rows, per_problem=2)
    assert sorted(r.source_judgement for r in two) == ["correct", "incorrect"]
    one_correct_only = T.select([r for r in rows if r.source_judgement == "correct"], per_problem=1)
    first = min((r for r in rows if r.source_judgement == "correct"), key=lambda r: hashlib.sha1(r.id.encode()).hexdigest())
    assert [r.id for r in one_correct_only] == [first.id]
    assert len(T.select(rows, per_problem=1)) == 1


# ----------------------------------------------------------------------------- a KernelBench fork's run folders


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def test_build_reads_a_fork_with_both_judgements_and_leaves_out_harness_faults(tmp_path):
    """A small fork made here as a real git repository, in the two layouts of yenhao-huang/KernelBench."""
    work = tmp_path / "work"
    files = {
        "KernelBench/level1/1_ReLU.py": TASK, "KernelBench/level1/2_ReLU_big.py": TASK,
        "KernelBench/level1/3_ReLU_again.py": TASK, "KernelBench/level2/1_ReLU_fused.py": TASK,
        "runs/ralph_codex_cuda_all/generated_kernels/level_1/problem_1.py": HONEST,
        "runs/ralph_codex_cuda_all/generated_kernels/level_1/problem_2.py": HONEST.replace("relu_tb", "relu_2"),
        "runs/ralph_codex_cuda_all/generated_kernels/level_1/problem_3.py": NO_KERNEL,
        "runs/ralph_codex_cuda_all/generated_kernels/level_2/problem_1.py": HONEST.replace("relu_tb", "relu_l2"),
        "runs/ralph_codex_cuda_all/generated_kernels/level_4/problem_1.py": HONEST,
        "runs/ralph_codex_cuda_all/generated_kernels/level_1/problem_9.py": HONEST.replace("relu_tb", "relu_9"),
        "runs/openrouter_deepseek_v4_pro_leaderboard_l1/generation_config.yaml": "model_name: openrouter/x/y\n",
        "runs/openrouter_deepseek_v4_pro_leaderboard_l1/eval_results.json": json.dumps({"1": [
            {"sample_id": 0, "compiled": True, "correctness": False,
             "metadata": {"hardware": "RTX 4090", "correctness_issue": "Output mismatch"}}]}),
    }
    k = "runs/ralph_codex_cuda_all/generated_kernels"
    ralph = [
        {"level": 1, "problem_id": 1, "status": "evaluated", "model_name": "codex-gpt-5.5",
         "generated_kernel_path": f"{k}/level_1/problem_1.py",
         "eval_result": {"compiled": True, "correctness": True, "metadata": {"hardware": "RTX 4090"}}},
        {"level": 1, "problem_id": 2, "status": "evaluated", "generated_kernel_path": f"{k}/level_1/problem_2.py",
         "eval_result": {"compiled": True, "correctness": False,
                         "metadata": {"runtime_error": "CUDA out of memory. Tried to allocate 6.00 GiB"}}},
        {"level": 1, "problem_id": 3, "status": "evaluated", "generated_kernel_path": f"{k}/level_1/problem_3.py",
         "eval_result": {"compiled": True, "correctness": False, "metadata": {"correctness_issue": "Output mismatch"}}},
        {"level": 2, "problem_id": 1, "status": "static_failed", "generated_kernel_path": f"{k}/level_2/problem_1.py",
         "static_errors": ["Contains 'pass' statement (inheritance bypass)"]},
        {"level": 4, "problem_id": 1, "status": "evaluated", "generated_kernel_path": f"{k}/level_4/problem_1.py",
         "eval_result": {"compiled": True, "correctness": True}},
    ]
    files["runs/ralph_codex_cuda_all/results.jsonl"] = "".join(json.dumps(r) + "\n" for r in ralph)
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    link = work / "runs/openrouter_deepseek_v4_pro_leaderboard_l1/level_1_problem_1_sample_0_kernel.py"
    link.symlink_to("../ralph_codex_cuda_all/generated_kernels/level_1/problem_9.py")
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "runs")
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "yenhao-huang+KernelBench" / "repo")],
                   check=True, capture_output=True)

    out = tmp_path / "testbed"

    def build(*sources):
        return subprocess.run([sys.executable, "bench/testbed_build.py", "--out", str(out), "--mirrors", str(mirrors),
                               "--sources", ",".join(sources)], cwd=ROOT, capture_output=True, text=True)

    p = build("yenhaohuang")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    skipped = json.loads((out / "skipped.json").read_text())
    got = {(r["level"], r["problem_id"], r["model"]): r for r in rows}
    assert sorted(got) == [(1, 1, "deepseek-v4-pro"), (1, 1, "gpt-5.5"), (2, 1, "gpt-5.5")]
    assert got[(1, 1, "gpt-5.5")]["source_judgement"] == "correct"
    assert got[(2, 1, "gpt-5.5")]["source_judgement"] == "incorrect"
    assert "KernelBench static check: Contains 'pass'" in got[(2, 1, "gpt-5.5")]["source_note"]
    ds = got[(1, 1, "deepseek-v4-pro")]
    assert ds["source_judgement"] == "incorrect" and ds["source_note"] == "Output mismatch"
    assert (out / ds["solution_file"]).read_text() == files[f"{k}/level_1/problem_9.py"]  # the link, followed
    assert (out / ds["problem_file"]).read_text() == TASK and ds["problem_path"] == "KernelBench/level1/1_ReLU.py"
    assert ds["problem_name"] == "1_ReLU"
    assert skipped["yenhaohuang: no verdict on the code (harness fault)"] == 1  # out of memory: not the code's fault
    assert skipped["yenhaohuang: no load_inline + __global__ (incorrect)"] == 1
    assert skipped["yenhaohuang: run folder runs/ralph_gemma4_cuda_all not in the mirror"] == 1
    assert {s.id for s in T.load_manifest(out / "manifest.jsonl")} == {r["id"] for r in rows}
    p = build("nosuch")
    assert p.returncode == 2 and "nosuch" in p.stderr


def test_the_real_batch_report_shows_its_ramp_minute_by_minute():
    """A budget-cut batch's rate is mostly its first minutes (the builds, the tasks' preparations, the slots'
    processes starting): the report gives the verdicts of each minute beside the filled pipeline's rate."""
    from bench.lib.real_report import filled_lines

    rows = [{"t": t} for t in (2, 4, 70, 130, 131, 132, 150, 179)]
    text = "\n".join(filled_lines({"wall_s": 185.0, "rows": rows}))
    assert "first verdict after 2 s" in text and "each minute of the batch" in text and ": 2, 1, 5, 0" in text, text
    assert filled_lines({"wall_s": 185.0, "rows": rows[:3]}) == []  # too few to be a rate
    assert "first executed verdict" not in text  # no row says it was executed
    # the first verdicts are the static stage's; from the first executed one (70 s) on, 5 verdicts in 115 s
    for r in rows[2:]:
        r["stage_seconds"] = {"execute": 5.0}
    text = "\n".join(filled_lines({"wall_s": 185.0, "rows": rows}))
    assert "first executed verdict after 70 s" in text and "(115 s): **157** per hour" in text, text
