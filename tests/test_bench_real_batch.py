"""The real-code batch (bench/lib/testbed.py, what `bench/bench_verifier.py --batch real` measures): a test bed
manifest becomes (Task, Candidate) pairs, the same tasks at every k, k distinct solutions per task where the test bed
has them, copies only when asked, and errors that name the manifest line. The manifest here is written by hand in
this file (the real one, ext/testbed, is git-ignored and holds cuda solutions); the one verification runs the cpu
fixtures of bench/lib/fixtures.py through the real verify entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows_fixtures import FAST_VERIFY
from bench.lib import fixtures as fx
from kernelmill.errors import InputError
from kernelmill.schema import Task
from bench.lib.testbed import load_manifest, real_batch

RELU_NAMED = fx.HONEST_RELU.replace("return ext.relu(x.contiguous())", "flat = x.contiguous()\n        return ext.relu(flat)")
FALLBACK = fx.cpu_candidate("return torch.relu(x)")
# level -> problems (name, program, solutions); the relu program appears under two sources (one task)
SOLUTIONS = {
    "relu_a": fx.HONEST_RELU, "relu_b": RELU_NAMED, "relu_c": FALLBACK,
    "mm_a": fx.HONEST_MATMUL, "mm_b": fx.cpu_candidate("return torch.matmul(a, b)", args="a, b"),
}


def write_testbed(root: Path, extra_rows: list[dict] | None = None) -> Path:
    """A manifest in the test bed's format: relu (level 1) published by two sources with 3 distinct solutions, one
    of them published twice; matmul (level 1) with 2; a level-2 relu variant with 1."""
    (root / "problems" / "s1").mkdir(parents=True)
    (root / "problems" / "s2").mkdir(parents=True)
    (root / "solutions").mkdir()
    relu2 = fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(32, 500)")
    problems = {"s1/relu.py": fx.RELU_TASK, "s2/relu.py": fx.RELU_TASK, "s1/mm.py": fx.MATMUL_TASK,
                "s1/relu2.py": relu2}
    for rel, text in problems.items():
        (root / "problems" / rel).write_text(text)
    rows = []

    def add(id_, source, level, problem, solution, model):
        (root / "solutions" / f"{id_}.py").write_text(SOLUTIONS[solution])
        rows.append({"id": id_, "source": source, "level": level, "problem_name": Path(problem).stem,
                     "problem_file": f"problems/{problem}", "solution_file": f"solutions/{id_}.py", "model": model,
                     "source_judgement": "correct", "repo": f"o/{source}", "commit": "0" * 40, "path": problem})

    add("s1-relu-m1", "s1", 1, "s1/relu.py", "relu_a", "m1")
    add("s1-relu-m2", "s1", 1, "s1/relu.py", "relu_b", "m2")
    add("s2-relu-m3", "s2", 1, "s2/relu.py", "relu_c", "m3")
    add("s2-relu-m1", "s2", 1, "s2/relu.py", "relu_a", "m1")  # the same code as s1-relu-m1: one solution
    add("s1-mm-m1", "s1", 1, "s1/mm.py", "mm_a", "m1")
    add("s1-mm-m2", "s1", 1, "s1/mm.py", "mm_b", "m2")
    add("s1-relu2-m1", "s1", 2, "s1/relu2.py", "relu_a", "m1")
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows + (extra_rows or [])))
    return manifest


def test_the_same_tasks_at_every_k_with_k_distinct_solutions_each(tmp_path):
    sols = load_manifest(write_testbed(tmp_path))
    one, three = real_batch(sols, per_task=1, backend="cpu"), real_batch(sols, per_task=3, backend="cpu")
    tasks = lambda b: [t.task_id for t, _ in b.items]  # noqa: E731
    assert list(dict.fromkeys(tasks(one))) == list(dict.fromkeys(tasks(three)))
    assert one.tasks == three.tasks == 3  # the relu program of two sources is one task
    # each task is its own problem file's program, its solutions the candidates of that task
    relu = Task.from_code(fx.RELU_TASK, name="x", source="kernelbench")
    by_task = {}
    for t, c in three.items:
        by_task.setdefault(t.task_id, []).append(c)
        assert c.backend == "cpu" and c.task_id == t.task_id and c.code == (tmp_path / "solutions" / f"{c.candidate_id}.py").read_text()
    assert sorted(c.code for c in by_task[relu.task_id]) == sorted([fx.HONEST_RELU, RELU_NAMED, FALLBACK])
    assert sorted(len(v) for v in by_task.values()) == [1, 2, 3] and three.short_tasks == 2
    assert three.distinct == 6 and three.copies == 0
    # the one solution of a task at k=1 is among its k=3 picks; picks span models before repeating one
    assert {c.candidate_id for _, c in one.items} <= {c.candidate_id for _, c in three.items}
    two = real_batch(sols, per_task=2, backend="cpu")
    relu_two = [c.generator for t, c in two.items if t.task_id == relu.task_id]
    assert len(set(relu_two)) == 2
    assert three.tasks_by_level == ((1, 2), (2, 1))


def test_tasks_alternate_levels_and_the_richest_come_first(tmp_path):
    sols = load_manifest(write_testbed(tmp_path))
    b = real_batch(sols, per_task=8, n_tasks=2, backend="cpu")
    levels = [t.level for t, _ in b.items]
    assert list(dict.fromkeys(levels)) == [1, 2]  # level 1's best task, then level 2's
    assert b.items[0][0].task_id == Task.from_code(fx.RELU_TASK, name="x", source="k").task_id  # 3 solutions > 2
    only2 = real_batch(sols, per_task=1, levels=(2,), backend="cpu")
    assert only2.tasks == 1 and only2.items[0][1].candidate_id == "s1-relu2-m1"
    src = real_batch(sols, per_task=8, sources=("s2",), backend="cpu")
    assert sorted(c.candidate_id for _, c in src.items) == ["s2-relu-m1", "s2-relu-m3"]


def test_pad_fills_short_tasks_with_identical_copies_counted_apart(tmp_path):
    sols = load_manifest(write_testbed(tmp_path))
    b = real_batch(sols, per_task=4, backend="cpu", pad=True)
    assert len(b.items) == 12 and b.copies == 12 - 6 and b.distinct == 6
    copies = [c for _, c in b.items if "#copy" in c.candidate_id]
    originals = {c.candidate_id: c.code for _, c in b.items if "#copy" not in c.candidate_id}
    assert len(copies) == b.copies and len({c.candidate_id for _, c in b.items}) == len(b.items)
    for c in copies:
        assert c.code == originals[c.candidate_id.split("#")[0]]


def test_manifest_errors_name_the_line_and_the_problem(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_manifest(tmp_path / "none.jsonl")
    m = write_testbed(tmp_path / "a", [{"id": "x", "source": "s1", "level": 1, "problem_file": "problems/s1/relu.py"}])
    with pytest.raises(InputError) as e:
        load_manifest(m)
    assert "line 8" in str(e.value) and "solution_file" in str(e.value)
    m = write_testbed(tmp_path / "b", [{"id": "x", "source": "s1", "level": 1, "problem_file": "problems/gone.py",
                                        "solution_file": "solutions/s1-mm-m1.py"}])
    with pytest.raises(InputError, match="problem_file problems/gone.py does not exist"):
        load_manifest(m)
    sols = load_manifest(write_testbed(tmp_path / "c"))
    with pytest.raises(InputError, match="no solution of nosuch"):
        real_batch(sols, sources=("nosuch",))
    with pytest.raises(InputError, match="per_task"):
        real_batch(sols, per_task=0)
    with pytest.raises(InputError, match="level"):
        real_batch(sols, levels=(3,))


def test_copies_are_verified_once_and_the_cost_counts_programs_once(tmp_path, shared_build_dir):
    """A real verification of a padded batch through the verify entry (cpu): copies get their program's verdict,
    and the verification cost (verifier/serve/cost.py, the benchmark's table) counts each program once."""
    from verifier.serve.cost import verification_cost
    from verifier.common.config import VerifyConfig
    from verifier.entry import VerifyStats, verify

    sols = load_manifest(write_testbed(tmp_path))
    b = real_batch(sols, per_task=2, n_tasks=1, backend="cpu", pad=True, levels=(2,))  # one solution + one copy
    assert len(b.items) == 2 and b.copies == 1
    cfg = VerifyConfig(**{k.split(".")[1]: v for k, v in FAST_VERIFY.items()}, build_dir=shared_build_dir)
    stats = VerifyStats()
    vs = verify(b.items, config=cfg, compile_workers=1, stats=stats)
    assert stats.reused == 1 and vs[0].status == vs[1].status == "pass"
    programs = {c.candidate_id: c.code for _, c in b.items}
    cost = verification_cost(vs, programs=programs, wall_s=36.0)
    assert cost.verdicts == 2 and cost.programs == 1 and cost.executed == 1
    assert cost.per_gpu_hour == pytest.approx(100.0)  # 1 program in 36 s of wall on one device
    assert cost.stage("execute").total_s == pytest.approx(vs[0].stage_seconds["execute"])
    # the verdicts file keeps the times a speedup comes from (which side moved between two runs)
    from bench.lib.real_report import real_row, write_real_verdicts

    rows = [real_row(c, v) for (_, c), v in zip(b.items, vs)]
    write_real_verdicts([{"per_task": 2, "rows": rows}], tmp_path / "v.jsonl")
    got = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [g["id"] for g in got] == [c.candidate_id for _, c in b.items]
    assert got[0]["runtime_us"] == vs[0].runtime_us > 0 and got[0]["eager_us"] == vs[0].eager_us > 0
    assert (got[0]["speedup_lo"], got[0]["speedup_hi"]) == (vs[0].speedup_lo, vs[0].speedup_hi)
    assert got[0]["stage_seconds"] == pytest.approx(vs[0].stage_seconds)  # where its seconds went, the child's parts too
    # the null subtracted and the resolution the interval took from it (cpu: a host clock, nothing subtracted)
    assert got[0]["null_us"] and got[0]["resolution_us"] == {"candidate": 0.0, "eager": 0.0} and got[0]["calls"] >= 1
    assert got[0]["stage_seconds"]["child_trial_forward"] > 0
    # whether the engine ran the job again (a set-up failure on the verifier's side; the memory gate to itself)
    assert got[0]["setup_retries"] == 0 and got[0]["memory_alone"] is False and got[0]["setup_failures"] == []
    # the harness's late brackets and the child's host-wait hint (cpu: no gate, no hint)
    assert got[0]["late"] == 0 and got[0]["host_waits"] is False and got[0]["host_waits_taken_back"] is False
    # what the task's reference timing held the device alone for (verifier/runs.py reference_hold), and its table
    ref = got[0]["reference"]
    assert ref["brackets"]["reference"] >= 1 and ref["brackets"]["null"] >= 1 and ref["late"]["reference"] == 0
    assert 0 < ref["held_s"]["reference_brackets"] <= ref["held_s"]["eager"], ref
    # and its child's seconds before the hold (the reference built; the lock's wait), which a task's first
    # candidates wait for
    assert ref["before_s"]["load"] > 0 and "lock_wait" in ref["before_s"], ref
    # and the harness's own seconds of its brackets inside that hold: its private draws and their wait for the RNG lock
    assert ref["harness_s"]["draw"] > 0 and ref["harness_s"]["draw_lock_wait"] >= 0, ref
    assert ref["harness_s"]["clock"] > 0, ref
    from bench.lib.real_report import reference_lines

    text = "\n".join(reference_lines({"rows": rows}))
    assert "(1 tasks;" in text and "| reference_brackets |" in text and "| null |" in text, text
    assert "| draw |" in text and "| draw_lock_wait |" in text, text
    assert "| load |" in text and "| lock_wait |" in text, text
    assert reference_lines({"rows": [dict(r, reference=None) for r in rows]}) == []
    # how busy the slots were and how long the timing held the device alone, from the same seconds
    from bench.lib.real_report import HELD_ALONE, slot_lines

    (line,) = slot_lines({"slots": 2, "wall_s": 36.0, "rows": rows})
    busy = vs[0].stage_seconds["execute"] / 72.0  # one program: its copy's seconds are not counted again
    alone = sum(vs[0].stage_seconds.get(k, 0.0) for k in HELD_ALONE)  # the copy has no execution of its own
    assert f"execution slots: 2, busy {busy:.2f}" in line and f"alone {alone:.1f} s" in line, line
    assert slot_lines({"wall_s": 36.0, "rows": rows}) == []  # an older record: no slot count, no line


def test_build_breakdown_reads_the_variant_and_the_failed_attempts_the_build_wrote(tmp_path):
    """bench/lib/build_breakdown.py reads what verifier/build/result.py writes per build (result.json through its own
    writer, a ``<variant>.log`` per fast variant tried, the one that built the module too): a module built light after a failed slim attempt is counted
    under light with the slim failure named, a failed build as failed, a build still running (no result) not at all."""
    from bench.lib.build_breakdown import read_builds, summarize, table
    from verifier.build.result import BuildResult, write_result

    for key, res, failed in [("a1", BuildResult(key="a1", ok=True, variant="slim", cpu_s=20.0, seconds=30.0), ["slim"]),
                             ("b2", BuildResult(key="b2", ok=True, variant="light", cpu_s=50.0, seconds=70.0), ["slim"]),
                             ("c3", BuildResult(key="c3", ok=False, cpu_s=8.0, seconds=9.0), ["slim", "light"])]:
        (tmp_path / key).mkdir()
        write_result(tmp_path / key, res)
        for v in failed:
            (tmp_path / key / f"{v}.log").write_text("error: ...\n")
    (tmp_path / "d4").mkdir()  # still building at the cut
    (tmp_path / "a1" / "slim").mkdir()  # the compile step's report of the variant that built it: its binding's form
    (tmp_path / "a1" / "slim" / "compile.json").write_text('{"ok": true, "binding": "boxed"}')
    rows = {r.key: r for r in read_builds(tmp_path)}
    assert (rows["a1"].binding, rows["b2"].binding) == ("boxed", "")
    assert set(rows) == {"a1", "b2", "c3"}
    assert (rows["a1"].variant, rows["a1"].failed_first) == ("slim", [])  # its own log is no failure
    assert (rows["b2"].variant, rows["b2"].failed_first) == ("light", ["slim"])
    assert (rows["c3"].variant, rows["c3"].failed_first) == ("failed", ["slim", "light"])
    summary = {s["variant"]: s for s in summarize(list(rows.values()))}
    assert summary["light"]["after_failed"] == 1 and summary["slim"]["after_failed"] == 0
    assert summary["light"]["cpu_total"] == 50.0
    assert any(line.startswith("| light | 1 | 1 (slim)") and line.endswith("| as written 1 |")
               for line in table(list(summary.values())))
    assert summary["slim"]["binding"] == {"boxed": 1}


def test_the_reference_hold_table_times_each_task_through_the_verifiers_path(tmp_path, shared_build_dir):
    """bench/lib/reference_hold.py (``python -m bench.lib.reference_hold``): each problem file's reference timing
    through the verifier's own path, one row per task with the parts of its exclusive hold and its brackets; a task
    the plan skips is a row that says why, not an error."""
    from bench.lib import reference_hold
    from verifier.common.config import VerifyConfig

    relu = tmp_path / "relu.py"
    relu.write_text(fx.RELU_TASK)
    broken = tmp_path / "no_inputs.py"
    broken.write_text(fx.RELU_TASK.replace("def get_inputs", "def get_inputs_gone"))
    cfg = VerifyConfig(**{k.split(".")[1]: v for k, v in FAST_VERIFY.items()}, build_dir=str(tmp_path / "b"))
    seen = []
    rows = reference_hold.measure([relu, broken], "cpu", lambda row, why: seen.append((row[0], why)), cfg=cfg)
    assert [r[0] for r in rows] == ["relu", "no_inputs"] and [s[0] for s in seen] == ["relu", "no_inputs"]
    head = dict(zip(reference_hold.HEAD, rows[0]))
    assert float(head["eager us"]) > 0 and float(head["held s"]) >= float(head["reference_brackets"]) > 0, head
    n_ref, n_null, _ = (int(x.split(" (")[0]) for x in head["brackets (late): reference, null, compiled"].split(", "))
    assert n_ref >= 1 and n_null >= 1, head
    assert "get_inputs" in rows[1][-2] and rows[1][1] == "-", rows[1]
    text = "\n".join(reference_hold.lines(rows, device="cpu", command="c", commit="abc", torch_version="t"))
    assert "| relu |" in text and "at abc" in text and text.count("\n|") == 4, text


def test_the_report_names_each_job_run_again_and_what_its_earlier_runs_failed_on():
    """A straggler's seconds spent on the engine's runs again (a set-up failure on the verifier's side) are read from
    the report: the candidates run again, how often, whether the last had the memory gate to itself, and each earlier
    run's failure line; a batch without any says 0."""
    from bench.lib.real_report import retry_lines

    rows = [{"id": "a", "status": "pass", "setup_retries": 0},
            {"id": "l2-p7", "status": "cheat", "setup_retries": 2, "memory_alone": True,
             "setup_failures": ["The execution process failed before your code ran: | CUDA error: out of memory",
                                "The verifier's timing harness failed on its own side"]}]
    lines = retry_lines({"rows": rows})
    assert lines[0].startswith("- jobs run again after a set-up failure on the verifier's side: 1 (2 runs again; "
                               "the last with the memory gate to itself: 1)")
    assert "l2-p7 (cheat): run 1: The execution process failed" in lines[1] and "run 2: The verifier's timing" in lines[1]
    assert retry_lines({"rows": rows[:1]}) == ["- jobs run again after a set-up failure on the verifier's side: 0"]
