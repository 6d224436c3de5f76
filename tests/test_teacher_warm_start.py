"""The teacher's one bug catalogue (synth/teacher/bugs.py) and the repair warm start (bench/lib/teacher_warm_start.py):
bugs planted in compact teacher answers, one line each, deterministic; the writer's kinds from the same catalogue."""

import difflib
import json

from synth.teacher import bugs
from bench.lib.teacher_compact import answer
from bench.lib.task_families import generate_tasks
from bench.lib.teacher_warm_start import bugged_candidates, keep_only_dialogues
from synth.teacher.writer import BUG_KINDS, repair_response


def test_one_catalogue_holds_every_kind_once_with_its_explanation_and_way_of_planting():
    assert BUG_KINDS == bugs.WRITER_BUGS == ("off_by_one", "missing_bounds_check", "wrong_stride", "missing_sync",
                                             "forbidden_fallback")
    assert bugs.COMPACT_BUGS == ("dropped_op", "launch_floor", "mean_divisor")
    assert set(bugs.BUGS) == set(BUG_KINDS) | set(bugs.COMPACT_BUGS) and not set(BUG_KINDS) & set(bugs.COMPACT_BUGS)
    assert all(b.writer or b.compact for b in bugs.BUGS.values())
    assert len({b.explanation for b in bugs.BUGS.values()}) == len(bugs.BUGS)
    # the writer's repair turn explains the bug it planted from the catalogue
    ref = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n" \
          "        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.randn(100)]\n\n" \
          "def get_init_inputs():\n    return []\n"
    assert bugs.BUGS["wrong_stride"].explanation in repair_response(ref, "cpu", "wrong", "wrong_stride", 0)
    assert "re-derived every index" in repair_response(ref, "cpu", "wrong", "", 0)


def test_loop_bench_plants_one_real_bug_per_answer_deterministically():
    """plant_bug, the first turn of the warm start's repair dialogues: one named bug that changes exactly one line
    of the compact teacher's answer (cuda and cpu), the same one for the same key, and a bug for nearly every task
    (the verifier decides later which of them fail)."""
    for backend in ("cuda", "cpu"):
        planted = 0
        for i, ft in enumerate(generate_tasks(60, seed=2)):
            good = f"```python\n{answer(ft, backend)}```"
            bug, bad = bugs.plant_bug(good, f"task{i}")
            assert (bug, bad) == bugs.plant_bug(good, f"task{i}")
            if not bug:
                assert bad == good
                continue
            planted += 1
            assert bug in bugs.COMPACT_BUGS and bad != good
            changed = [d for d in difflib.ndiff(good.splitlines(), bad.splitlines()) if d[:2] in ("- ", "+ ")]
            assert 1 <= len(changed) <= 2, changed  # one line removed, or one line replaced
        assert planted >= 50, (backend, planted)


def test_bugged_candidates_carry_the_planted_bug_and_the_fenced_response():
    from kernelmill.schema import Task
    from bench.lib.task_families import task_code

    fts = generate_tasks(8, seed=3)
    tasks = [Task.from_code(task_code(ft), name=f"f{i}", source="teacher") for i, ft in enumerate(fts)]
    answers = {t.task_id: f"```python\n{answer(ft, 'cpu')}```" for t, ft in zip(tasks, fts)}
    cands, kinds = bugged_candidates(tasks, answers, "cpu")
    assert cands and set(kinds) == {c.candidate_id for c in cands}
    for c in cands:
        assert c.injected_bug == kinds[c.candidate_id] and c.response != answers[c.task_id]
        assert c.code.strip() in c.response and c.turn == 0 and c.generator == "teacher_bug"


def test_loop_bench_redo_sft_keeps_only_the_verified_repair_dialogues(tmp_path):
    """--redo-sft: the repair dialogues (minutes of verification on the device) stay, with their counts;
    m0, the SFT corpus and every arm go, so the next SFT runs with this call's settings."""
    for name in ("m0_bf16", "arms/rl/loop", "corpus/sft", "repair_sft/sft"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "f").write_text("x")
    state = {"repair_sft": {"planted": 48, "failed_and_kept": 32}, "sft": {"steps": 985}, "arms": {"rl": {"done": True}},
             "commands": ["call 1"]}
    kept = keep_only_dialogues(tmp_path, state, ("m0", "m0_bf16", "arms", "sft", "corpus"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repair_sft"]
    assert kept["repair_sft"] == state["repair_sft"] and "sft" not in kept and "arms" not in kept
    assert json.dumps(state["repair_sft"]) in kept["notes"][0]
    assert keep_only_dialogues(tmp_path, {}, ("m0",)) == {}  # nothing verified before: a plain fresh start
