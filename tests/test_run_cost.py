"""What verifying a run cost (verifier/serve/cost.py): candidates per GPU-hour and seconds per candidate by stage, shown by
`kernelmill metrics RUN`, the run report and the dataset card. A real small run on cpu (the flows fixtures' relu
task and candidates, one of them sent twice as a model's identical samples are) through the real verify stage; every
number is checked against the verdict rows it must follow from."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from verifier.common.config import VerifyConfig
from verifier.serve.cost import program_keys, run_cost, verification_cost
from flows_fixtures import FAST_VERIFY, make_candidates, relu_task, run_kernelmill
from kernelmill import store
from kernelmill.schema import Verdict


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run directory: the relu task, three distinct candidates (two honest kernels, one answer with no ModelNew)
    and an identical copy of the honest one, verified by the verify stage (the one entry: the copy gets the honest
    program's verdict)."""
    from kernelmill.config import load_settings
    from orchestrator import stages

    run_dir = tmp_path_factory.mktemp("cost-run")
    cands = [dataclasses.replace(c, prompt="Write ModelNew for the relu task.")
             for c in make_candidates(["honest", "honest_named"])]
    copy = dataclasses.replace(cands[0], candidate_id="c-copy-of-honest", dialogue_id="second-sample")
    cands.append(dataclasses.replace(cands[0], candidate_id="c-no-model", code="import torch\n"))
    store.write_records(run_dir, "tasks", [relu_task()])
    store.write_records(run_dir, "candidates", [*cands, copy])
    # the default build root, the session's (tests/conftest.py): the honest extension is built once per session
    counts = stages.verify(run_dir, load_settings(overrides={**FAST_VERIFY, "run.backend": "cpu"}))
    assert counts["verified"] == 4 and counts["reused"] == 1
    return run_dir


def _distinct_rows(run_dir) -> list[Verdict]:
    """The rows of the three distinct programs, found here by candidate id (the copy is the one left out)."""
    return [v for v in store.read_records(run_dir, "verdicts") if v.candidate_id != "c-copy-of-honest"]


def test_the_cost_of_a_run_follows_from_its_verdict_rows(run):
    cost = run_cost(run)
    rows = _distinct_rows(run)
    assert cost.verdicts == 4 and cost.programs == 3  # the copy was verified once and counts once
    executed = [v for v in rows if "execute" in v.stage_seconds]
    assert cost.executed == len(executed) and 1 <= len(executed) < 3  # the answer without ModelNew never ran
    assert cost.basis == "execution" and cost.backends == ("cpu",) and "cpu backend" in cost.unit
    execute_s = sum(v.stage_seconds["execute"] for v in executed)
    assert cost.gpu_hours == pytest.approx(execute_s / 3600)
    assert cost.per_gpu_hour == pytest.approx(3 / (execute_s / 3600))
    for key in ("compile", "compile_cpu", "execute", "execute_prepare", "execute_child", "child_trials", "total"):
        vals = [float(v.stage_seconds[key]) for v in rows if key in v.stage_seconds]
        s = cost.stage(key)
        assert s is not None and s.programs == len(vals), key
        assert s.median_s == pytest.approx(statistics.median(vals)) and s.total_s == pytest.approx(sum(vals))
        assert s.per_program_s == pytest.approx(sum(vals) / 3)
        assert s.kind == ("cpu" if key == "compile_cpu" else "wall")
    assert cost.stage("compile_cached") is None  # a flag, not seconds
    # slots sharing a GPU divide its hours; a measured wall replaces the execution basis
    assert run_cost(run, slots_per_gpu=2).per_gpu_hour == pytest.approx(2 * cost.per_gpu_hour)
    walled = verification_cost(store.read_records(run, "verdicts"),
                               programs=program_keys(store.read_records(run, "candidates")), wall_s=5400.0, gpus=2)
    assert walled.basis == "wall" and walled.gpu_hours == pytest.approx(3.0) and walled.per_gpu_hour == pytest.approx(1.0)


def test_copies_count_once_only_where_the_candidates_say_they_are_copies():
    st = {"execute": 2.0, "compile": 1.0, "compile_cpu": 3.0, "compile_cached": False}
    a = Verdict(candidate_id="a", task_id="t", backend="cuda", status="pass", stage_seconds=dict(st))
    b = dataclasses.replace(a, candidate_id="b")  # what the entry hands a copy
    c = Verdict(candidate_id="c", task_id="t", backend="cuda", status="compile_error",
                stage_seconds={"compile": 4.0, "compile_cpu": 5.0})
    with_map = verification_cost([a, b, c], programs={"a": "p1", "b": "p1", "c": "p2"})
    assert (with_map.programs, with_map.executed, with_map.gpu_hours) == (2, 1, pytest.approx(2.0 / 3600))
    assert with_map.stage("compile_cpu").total_s == 8.0 and with_map.stage("compile").median_s == 2.5
    assert with_map.unit == "GPU-hour" and with_map.per_gpu_hour == pytest.approx(2 * 3600 / 2.0)
    without = verification_cost([a, b, c])
    assert without.programs == 3 and without.stage("execute").total_s == 4.0
    nothing_ran = verification_cost([c])
    assert nothing_ran.per_gpu_hour is None and nothing_ran.gpu_hours == 0.0
    with pytest.raises(ValueError, match="gpus"):
        verification_cost([a], gpus=0)
    assert type(with_map).from_dict(json.loads(json.dumps(with_map.as_dict()))) == with_map


def test_metrics_the_report_and_the_card_state_the_cost(run):
    from curation.corpus import build_corpora

    cost = run_cost(run)
    r = run_kernelmill("metrics", str(run), "--json")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)["verification_cost"]
    assert shown["programs"] == 3 and shown["per_gpu_hour"] == pytest.approx(cost.per_gpu_hour)
    # the configured [verify] exec_workers, automatic by default: this machine's count for a cpu run
    assert shown["slots_per_gpu"] == VerifyConfig().exec_slots("cpu")
    r = run_kernelmill("metrics", str(run), "--slots", "2")
    assert r.returncode == 0, r.stderr
    assert f"{2 * cost.per_gpu_hour:.0f} candidates per device-hour" in r.stdout and "compile_cpu" in r.stdout
    stats = build_corpora(run, run, cfg={})
    assert stats["verification_cost"] == cost.as_dict()
    card = (run / "README.md").read_text()
    report = (run / "report" / "report.md").read_text()
    for text in (card, report):
        assert "## Verification cost" in text
        assert f"Verification cost: {cost.per_gpu_hour:.0f} candidates per" in text
        assert f"| {cost.stage('compile_cpu').median_s:.3f} |" in text


def test_seconds_table_counts_only_executed_verdicts_past_compile_and_exec_breakdown_means():
    from verifier.serve.cost import SECONDS, exec_breakdown, seconds_table
    ran = Verdict(candidate_id="a", task_id="t", backend="cuda", status="pass",
                  stage_seconds={"compile": 1.0, "execute": 3.0, "execute_prepare": 1.0, "execute_child": 1.5})
    built_only = Verdict(candidate_id="b", task_id="t", backend="cuda", status="compile_error",
                         stage_seconds={"compile": 3.0})
    rows = dict(seconds_table([ran, built_only]))
    assert len(rows) == len(SECONDS)
    assert rows["s per candidate: compile: build process, per candidate (CPU-bound, pool of cores)"] == "2.00 (max 3.00)"
    # the judge's share: execute - prepare - child, of the one verdict that executed
    assert rows["s per candidate: judge: outputs compared, float64 reference on the trial inputs"] == "0.50 (max 0.50)"
    assert exec_breakdown([ran, built_only]).startswith("execute_prepare 0.50, ")
    assert exec_breakdown([]).startswith("execute_prepare nan, ")
