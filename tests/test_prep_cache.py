"""Task preparation kept on disk (verifier/judge/prep_cache.py): the reference's timings, measured once per task,
device and settings, are read by later verifier processes instead of measured again; verdicts do not change.

Real verifier runs on the cpu backend (the relu task of bench/lib/fixtures.py, its honest candidate compiled once
for the module); the second and concurrent processes are real subprocesses. Whether a process measured is
counted by wrapping ``runs.measure_reference`` (the one function that starts the reference's child) in that
process, and read from the entry's own record of the process that measured it."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import engine
from verifier import runs
from verifier.judge import prep_cache
from verifier.engine import VerifyConfig, verify_batch
from verifier.common.contract import ChildReport, ModelTiming

ROOT = Path(__file__).resolve().parent.parent
RELU = Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)

# run in a fresh interpreter: verify the relu task (or only time its reference) and say whether it measured
SCRIPT = r'''
import json, os, sys
from bench.lib import fixtures as fx
from verifier import engine, runs
from verifier.engine import VerifyConfig
cfg = VerifyConfig(**json.loads(sys.argv[1]))
measured = []
real = runs.measure_reference
runs.measure_reference = lambda *a: (measured.append(1), real(*a))[1]
out = {"pid": os.getpid()}
if sys.argv[2] == "verify":
    from kernelmill.schema import Candidate, Task
    task = Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)
    v = engine.verify_batch([(task, Candidate(candidate_id="c", task_id=task.task_id, backend="cpu", generator="test",
                                           code=fx.HONEST_RELU))], config=cfg)[0]
    out.update(status=v.status, correct=v.correct, cheats=v.cheats, eager_us=v.eager_us)
else:
    plan = engine.task_plan(fx.RELU_TASK, "cpu", cfg)
    t = runs.reference_timing(plan, "cpu", cfg, cfg.build_root())
    out.update(eager=t.clocked.get("eager_s"), null=t.clocked.get("null"))
out["measured"] = len(measured)
print("RESULT " + json.dumps(out))
'''

# the precompiled header on, from the run's header directory (tests/conftest.py), passed to the second process too: the
# candidate's cold build in this test's own root is ~7 CPU-s with it and ~38 without
SETTINGS = dict(trials=5, timing_trials=3, warmup=1, time_torch_compile=False, run_timeout_s=25, memory_limit_gb=4,
                exec_workers=1, pch=True)


def _cfg(build_dir: Path, **kw) -> VerifyConfig:
    return VerifyConfig(build_dir=str(build_dir), **{**SETTINGS, **kw})


def _in_a_new_process(cfg: VerifyConfig, what: str) -> subprocess.Popen:
    given = {k: getattr(cfg, k) for k in (*SETTINGS, "build_dir", "prep_cache", "pch_dir")}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, json.dumps(given), what], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=600)
    lines = [x for x in out.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def _entries(build_dir: Path) -> list[Path]:
    return sorted((build_dir / prep_cache.DIR).glob("*.json"))


@pytest.fixture
def fresh_memo(monkeypatch):
    """This process's own memo of reference timings emptied, so that a call here looks as a new process would."""
    monkeypatch.setattr(runs, "_REF_TIMINGS", {})
    monkeypatch.setattr(runs, "_REF_LOCKS", {})


def test_a_second_process_reads_the_kept_timing_and_gives_the_same_verdict(tmp_path, fresh_memo):
    cfg = _cfg(tmp_path)
    first = verify_batch([(RELU, Candidate(candidate_id="c", task_id=RELU.task_id, backend="cpu", generator="test",
                                           code=fx.HONEST_RELU))], config=cfg)[0]
    assert first.status == "pass", first.feedback
    [entry] = _entries(tmp_path)
    kept = entry.read_bytes()
    assert json.loads(kept)["measured_by"]["pid"] == os.getpid()

    second = _result(_in_a_new_process(cfg, "verify"))
    assert second["measured"] == 0  # no reference child started in the second process
    assert (second["status"], second["correct"], second["cheats"]) == (first.status, first.correct, first.cheats)
    assert second["eager_us"] == first.eager_us  # the kept figures, not a new measurement
    assert _entries(tmp_path) == [entry] and entry.read_bytes() == kept


def test_two_processes_needing_the_same_task_measure_it_once(tmp_path):
    cfg = _cfg(tmp_path)
    procs = [_in_a_new_process(cfg, "time") for _ in range(2)]
    results = [_result(p) for p in procs]
    assert sum(r["measured"] for r in results) == 1
    assert results[0]["eager"] == results[1]["eager"]
    [entry] = _entries(tmp_path)
    assert json.loads(entry.read_text())["measured_by"]["pid"] in {r["pid"] for r in results}


def test_a_changed_program_setting_or_device_is_another_entry(tmp_path, fresh_memo):
    cfg = _cfg(tmp_path)
    base = prep_cache.entry_key(fx.RELU_TASK, "cpu", "cpu (x, 2 threads)", cfg, runs.EAGER)
    assert base == prep_cache.entry_key(fx.RELU_TASK, "cpu", "cpu (x, 2 threads)", _cfg(tmp_path), runs.EAGER)
    others = [prep_cache.entry_key(fx.MATMUL_TASK, "cpu", "cpu (x, 2 threads)", cfg, runs.EAGER),
              prep_cache.entry_key(fx.RELU_TASK + "\n", "cpu", "cpu (x, 2 threads)", cfg, runs.EAGER),
              prep_cache.entry_key(fx.RELU_TASK, "cuda", "cpu (x, 2 threads)", cfg, runs.EAGER),
              prep_cache.entry_key(fx.RELU_TASK, "cpu", "cpu (x, 4 threads)", cfg, runs.EAGER),
              prep_cache.entry_key(fx.RELU_TASK, "cpu", "cpu (x, 2 threads)", cfg, runs.COMPILED)]
    for change in ({"timing_trials": 4}, {"warmup": 2}, {"time_torch_compile": True}, {"eval_mode": True},
                   {"gap_probes": 3}, {"timed_brackets": 4}, {"hide_launch_us": 0.0}, {"device_lock": False}):
        changed = dataclasses.replace(cfg, **change)
        others.append(prep_cache.entry_key(fx.RELU_TASK, "cpu", "cpu (x, 2 threads)", changed, runs.EAGER))
    assert len({base, *others}) == len(others) + 1
    # settings the reference's timing never sees share the entry
    assert base == prep_cache.entry_key(fx.RELU_TASK, "cpu", "cpu (x, 2 threads)", dataclasses.replace(cfg, trials=9),
                                        runs.EAGER)

    # and on disk: the same task under another warmup is measured and kept beside the first
    for c in (cfg, dataclasses.replace(cfg, warmup=2)):
        runs.reference_timing(engine.task_plan(fx.RELU_TASK, "cpu", c), "cpu", c, c.build_root())
    assert len(_entries(tmp_path)) == 2


def _plant(cfg: VerifyConfig, eager_s: float) -> Path:
    """An entry under the relu task's key with figures no measurement gives."""
    key = prep_cache.entry_key(fx.RELU_TASK, "cpu", runs.device_name("cpu"), cfg, runs.EAGER)
    report = ChildReport(kind="reference", eager=ModelTiming(launch_us=[7.0] * 3), timing_exclusive=True)
    return prep_cache.write(cfg.build_root(), key, report, {"eager_s": eager_s, "null": {"1": 1e-4, "8": 2e-4}})


def test_a_kept_entry_is_read_and_prep_cache_false_bypasses_it(tmp_path, fresh_memo):
    cfg = _cfg(tmp_path)
    # a task's preparation warms the processes of a reference child only where one will run
    assert runs.timing_to_measure(fx.RELU_TASK, "cpu", cfg, cfg.build_root())
    entry = _plant(cfg, 123.456)
    assert not runs.timing_to_measure(fx.RELU_TASK, "cpu", cfg, cfg.build_root())
    t = runs.reference_timing(engine.task_plan(fx.RELU_TASK, "cpu", cfg), "cpu", cfg, cfg.build_root())
    assert t.clocked["eager_s"] == 123.456 and t.null() == {1: 1e-4, 8: 2e-4}

    off = dataclasses.replace(cfg, prep_cache=False)
    assert runs.timing_to_measure(fx.RELU_TASK, "cpu", off, off.build_root())
    t = runs.reference_timing(engine.task_plan(fx.RELU_TASK, "cpu", off), "cpu", off, off.build_root())
    assert not runs.timing_to_measure(fx.RELU_TASK, "cpu", off, off.build_root())  # timed in this process
    assert t.clocked["eager_s"] and t.clocked["eager_s"] != 123.456
    assert json.loads(entry.read_text())["clocked"]["eager_s"] == 123.456  # left as it was
    assert _entries(tmp_path) == [entry]


@pytest.mark.parametrize("damage", ["not json {", json.dumps({"schema": prep_cache.SCHEMA - 1}), "truncated"])
def test_a_corrupt_or_old_entry_is_ignored_and_rewritten(tmp_path, fresh_memo, damage):
    cfg = _cfg(tmp_path)
    entry = _plant(cfg, 123.456)
    if damage == "truncated":
        damage = entry.read_text()[:-20]
    elif damage.startswith("{"):
        damage = json.dumps({**json.loads(entry.read_text()), "schema": prep_cache.SCHEMA - 1})
    entry.write_text(damage)
    t = runs.reference_timing(engine.task_plan(fx.RELU_TASK, "cpu", cfg), "cpu", cfg, cfg.build_root())
    assert t.clocked["eager_s"] and t.clocked["eager_s"] != 123.456
    kept = json.loads(entry.read_text())
    assert kept["schema"] == prep_cache.SCHEMA and kept["measured_by"]["pid"] == os.getpid()
    assert kept["clocked"] == t.clocked


def test_only_a_clean_exclusive_timing_is_kept_and_it_holds_no_seed():
    good = ChildReport(kind="reference", eager=ModelTiming(launch_us=[5.0]), timing_exclusive=True)
    clocked = {"eager_s": 5e-6, "null": {"1": 1e-4}}
    assert prep_cache.keepable(good, clocked)
    for bad in (dataclasses.replace(good, timing_error="Traceback ..."), dataclasses.replace(good, setup_error="x"),
                dataclasses.replace(good, compile_error="x"), dataclasses.replace(good, timing_exclusive=False)):
        assert not prep_cache.keepable(bad, clocked)
    assert not prep_cache.keepable(good, {"null": {"1": 1e-4}})  # no eager time clocked
    assert not prep_cache.keepable(good, {"eager_s": 5e-6})  # no null bracket to subtract


def test_an_entry_holds_timings_and_no_seed_or_input(tmp_path):
    report = ChildReport(kind="reference", eager=ModelTiming(launch_us=[5.0]), timing_exclusive=True,
                         events=["input digest 0xabc"], trials=[])
    path = prep_cache.write(tmp_path, "k" * 64, report, {"eager_s": 5e-6, "null": {"1": 1e-4}})
    d = json.loads(path.read_text())
    assert set(d["report"]) == set(prep_cache.KEPT)
    assert "seed" not in path.read_text() and "digest" not in path.read_text()
    assert prep_cache.read(tmp_path, "k" * 64)[1] == {"eager_s": 5e-6, "null": {"1": 1e-4}}
    assert prep_cache.read(tmp_path, "j" * 64) is None  # another key's file name, not found
