"""The repair stage end to end on the cpu backend: the generate stage's teacher writes first turns (and
plants bugs), the verify stage judges them with the real verifier (compile, execute, judge), and the
repair stage reads the failed ones and their verdicts from the store, sends the feedback as the next
turn and verifies the answer through the verify stage's function; every record goes to real Parquet
tables. Compiles two extensions (the ReLU kernel and its bug variant) in the session's build dir
(tests/conftest.py's shared_build_dir), which the other modules' honest fixtures share."""

import json

import pytest

from kernelmill import store
from kernelmill.config import load_settings
from kernelmill.schema import Dialogue, Task
from orchestrator.pipeline import run_stages
from synth.teacher.writer import choose_bug
from bench.lib.fixtures import RELU_TASK

RELU = RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(64, 500)")


@pytest.fixture(scope="module")
def build_dir(shared_build_dir):
    return shared_build_dir  # the session's (tests/conftest.py): the ReLU kernel is built once per session


@pytest.fixture(scope="module")
def task():
    return Task.from_code(RELU, name="relu", source="seed", level=1)


def _seed_for(bug: str) -> int:
    """A seed whose one planted bug (of 2 samples at bug_rate 0.5) is ``bug``."""
    for s in range(50):
        if {choose_bug(RELU, "cpu", i, 2, 0.5, s) for i in range(2)} == {"", bug}:
            return s
    raise AssertionError(f"no seed plants {bug}")


def settings_for(build_dir: str, **over):
    base = {"run.backend": "cpu", "generate.samples_per_task": 2, "generate.bug_rate": 0.5,
            "generate.bug_seed": _seed_for("off_by_one"), "repair.max_turns": 3, "verify.trials": 5,
            "verify.timing_trials": 3, "verify.warmup": 1, "verify.time_torch_compile": False,
            "verify.other_shape": True, "verify.build_dir": build_dir, "verify.compile_workers": 2}
    return load_settings(None, {**base, **over})


@pytest.fixture(scope="module")
def repaired_run(task, build_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    store.write_records(run_dir, "tasks", [task])
    result = run_stages(run_dir, settings_for(build_dir), ["generate", "verify", "repair"])
    return result["repair"], result, run_dir


def test_buggy_sample_is_repaired_on_turn_two(repaired_run, task):
    stats, result, run_dir = repaired_run
    assert result["generate"]["candidates_written"] == 2 and result["verify"]["verified"] == 2
    assert stats["new_turns"] == 1 and stats["verify"]["verified"] == 1  # through the verify stage's function
    assert stats["dialogues"] == 2 and stats["solved"] == 2 and stats["turns"] == 3
    assert stats["repaired_at_turn"] == {1: 0.5, 2: 0.5, 3: 0.0}
    assert stats["repaired"] == 1 and stats["repair_tasks"] == 0
    dialogues = sorted(store.read_records(run_dir, "dialogues"), key=lambda d: d.num_turns)
    clean, fixed = dialogues
    assert isinstance(clean, Dialogue) and clean.num_turns == 1 and clean.solved
    assert [m.role for m in clean.messages] == ["system", "user", "assistant"]
    assert fixed.num_turns == 2 and fixed.solved
    assert [m.role for m in fixed.messages] == ["system", "user", "assistant", "user", "assistant"]
    first, second = fixed.turn_verdicts
    # the unwritten last element holds the poison pattern: an honest indexing bug, judged wrong (not C06)
    assert not first.correct and first.status == "wrong" and second.correct
    assert fixed.first_turn_reward == first.reward < fixed.final_reward == second.reward
    # the feedback turn quotes the verifier, and the teacher's answer refers to it
    verdicts = {v.candidate_id: v for v in store.read_records(run_dir, "verdicts")}
    feedback = verdicts[first.candidate_id].feedback
    assert feedback and feedback.strip().splitlines()[0] in fixed.messages[3].content
    assert "The verifier reported" in fixed.messages[4].content


def test_every_turn_is_a_candidate_with_lineage(repaired_run):
    _, _, run_dir = repaired_run
    cands = {c.candidate_id: c for c in store.read_records(run_dir, "candidates")}
    verdicts = {v.candidate_id for v in store.read_records(run_dir, "verdicts")}
    assert len(cands) == 3 and set(cands) == verdicts
    turn1 = [c for c in cands.values() if c.turn == 1]
    assert len(turn1) == 1
    parent = cands[turn1[0].parent_id]
    assert parent.turn == 0 and parent.injected_bug == "off_by_one" and parent.dialogue_id == turn1[0].dialogue_id
    assert turn1[0].injected_bug == "" and "Verifier feedback" in turn1[0].prompt
    assert all(c.reasoning.startswith("## Reasoning") for c in cands.values() if c.turn == 0)
    assert all("class ModelNew" in c.code and c.generator == "teacher" for c in cands.values())


def test_rerun_is_idempotent(repaired_run, build_dir):
    _, _, run_dir = repaired_run
    before = {t: sorted(store.stored_ids(run_dir, t)) for t in ("candidates", "verdicts", "dialogues")}
    again = run_stages(run_dir, settings_for(build_dir), ["generate", "verify", "repair"])
    assert again["generate"]["candidates_written"] == 0 and again["verify"]["candidates"] == 0
    assert again["repair"]["dialogues"] == 0 and again["repair"]["new_turns"] == 0
    for t, ids in before.items():
        assert sorted(store.stored_ids(run_dir, t)) == ids


def test_all_failed_group_yields_a_repair_task(task, build_dir, tmp_path):
    store.write_records(tmp_path, "tasks", [task])
    res = run_stages(tmp_path, settings_for(build_dir, **{"generate.bug_rate": 1.0, "repair.max_turns": 1}),
                     ["generate", "verify", "repair"])
    stats = res["repair"]
    assert stats["solved"] == 0 and stats["dialogues"] == 2 and stats["repair_tasks"] == 1
    assert stats["repaired_at_turn"] == {1: 0.0} and stats["new_turns"] == 0
    (rt,) = [json.loads(line) for line in (tmp_path / "repair_tasks.jsonl").read_text().splitlines()]
    assert rt["task_id"] == task.task_id and rt["backend"] == "cpu"
    assert [m["role"] for m in rt["messages"]] == ["system", "user", "assistant", "user"]
    assert rt["feedback"] and rt["feedback"].strip().splitlines()[0] in rt["messages"][-1]["content"]


def test_repair_stage_verifies_first_turns_the_verify_stage_has_not(task, build_dir, tmp_path):
    """generate then repair (no verify stage in between): repair judges the first turns itself,
    through the same function, and samples none of them again."""
    store.write_records(tmp_path, "tasks", [task])
    res = run_stages(tmp_path, settings_for(build_dir), ["generate", "repair"])
    assert res["repair"]["verify"]["verified"] == 3 and res["repair"]["new_turns"] == 1
    assert sorted(c.turn for c in store.read_records(tmp_path, "candidates")) == [0, 0, 1]


def test_repair_cli_writes_dialogues(task, build_dir, tmp_path, capsys):
    from flows.cli import main

    run_dir = tmp_path / "run"
    store.write_records(run_dir, "tasks", [task])
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[run]\nbackend = "cpu"\n[generate]\nsamples_per_task = 1\nbug_rate = 0.0\n[repair]\nmax_turns = 2\n'
                   f'[verify]\ntiming_trials = 3\nwarmup = 1\ntime_torch_compile = false\n'
                   f'build_dir = "{build_dir}"\n')
    assert main(["--config", str(cfg), "generate", str(run_dir)]) == 0
    capsys.readouterr()
    assert main(["--config", str(cfg), "repair", str(run_dir)]) == 0
    out = json.loads(capsys.readouterr().out)["repair"]  # the CLI prints each stage's counts
    assert out["dialogues"] == 1 and out["solved"] == 1 and out["backend"] == "cpu"
    assert len(store.read_records(run_dir, "dialogues")) == 1
    assert main(["--config", str(cfg), "repair", str(tmp_path / "nope")]) == 2


def test_repair_progress_advances_per_verified_turn(task, build_dir, tmp_path):
    """The repair stage's progress counts turns as their verdicts arrive, not dialogues as they close (a
    `kernelmill run` bar sat at 0/6 for 46 s): generate then repair, two dialogues whose first turns both
    fail, up to 2 turns each, so repair verifies the 2 first turns and the 2 repair answers."""
    store.write_records(tmp_path, "tasks", [task])
    calls = []
    res = run_stages(tmp_path, settings_for(build_dir, **{"generate.bug_rate": 1.0, "repair.max_turns": 2}),
                     ["generate", "repair"], progress=lambda stage, done, total: calls.append((stage, done, total)))
    got = [(done, total) for stage, done, total in calls if stage == "repair"]
    verified = res["repair"]["verify"]["verified"]
    assert verified == 4 and res["repair"]["new_turns"] == 2
    assert got[0] == (0, 4)  # 2 first turns to verify, 1 repair turn possible per dialogue
    dones = [d for d, _ in got]
    assert dones == sorted(dones) and all(d <= t for d, t in got)
    # the first turns were verified one at a time (distinct code: one verdict each), before any repair answer
    assert {1, 2} <= set(dones) and dones.index(2) < dones.index(verified)
    assert got[-1] == (verified, verified)
