"""The tiered training corpus and tier screening (bench/lib/family_corpus.py, bench/lib/train_tiers.py): how SFT is thinned per
tier, which tiers become the RL and evaluation mix, how the held-out rows are split per tier, and how an RL arm's
logged steps are summed up and read (train/evaluate.py)."""

import json

import pyarrow.parquet as pq
import pytest

from kernelmill import store
from kernelmill.errors import InputError
from kernelmill.schema import Message, RLRow, SFTRow
from train.evaluate import diagnose, summarise_steps
from bench.lib.family_corpus import keep_share, read_families, write_family_corpus, write_sft_corpus
from bench.lib.train_tiers import choose_tiers, round_robin, split_by_tier


def test_choose_tiers_takes_the_band_else_the_nearest_tier():
    assert choose_tiers({1: 0.95, 2: 0.6, 3: 0.35, 4: 0.1}, 0.3, 0.7) == [2, 3]
    assert choose_tiers({1: 0.95, 2: 0.9, 3: 0.8, 4: 0.75}, 0.3, 0.7) == [4]  # all too easy: the hardest-looking
    assert choose_tiers({1: 0.2, 2: 0.1, 3: 0.0, 4: 0.0}, 0.3, 0.7) == [1]  # all too hard: the easiest
    assert choose_tiers({2: 0.8, 3: 0.2}, 0.3, 0.7) == [3]  # equally far: the harder tier
    assert choose_tiers({}, 0.3, 0.7) == []


def test_held_out_rows_split_per_tier_into_screen_eval_and_rl_prompts():
    """Per tier in task-id order: the screened tasks, then the evaluation pool, then RL prompts; the evaluation
    set is taken in turn from the chosen tiers; RL prompts leave out screened tasks the model always solved."""
    rows = [{"task_id": f"t{i:02d}", "tier": 1 + i % 2} for i in range(20)]
    split = split_by_tier(list(reversed(rows)), lambda r: r["tier"], 2, 3)
    assert [r["task_id"] for r in split.screen[1]] == ["t00", "t02"]
    assert [r["task_id"] for r in split.eval_pool[2]] == ["t05", "t07", "t09"]
    assert [r["task_id"] for r in split.rl_pool[1]] == ["t10", "t12", "t14", "t16", "t18"]
    assert split.screen[3] == [] and split.rl_pool[4] == []
    assert [r["task_id"] for r in split.eval_set([1, 2], 4)] == ["t04", "t05", "t06", "t07"]
    prompts = [r["task_id"] for r in split.rl_prompts([2], {"t01"})]
    assert prompts == ["t03", "t11", "t13", "t15", "t17", "t19"]
    assert round_robin([[1, 2, 3], [], [4]], 10) == [1, 4, 2, 3] and round_robin([[1, 2]], 1) == [1]


def test_write_sft_corpus_keeps_each_tiers_share_and_the_whole_rl_table(tmp_path):
    src = tmp_path / "corpus"
    fams, sft, rl = {}, [], []
    for i in range(400):
        tid, tier = f"t{i:04d}", 1 + i % 4
        fams[tid] = {"sig": f"ew:op{i % 7}", "tier": tier}
        sft.append(SFTRow(id="s" + tid, task_id=tid, source="teacher", generator="teacher_compact", backend="cpu",
                          level=1, num_turns=1, final_reward=1.0,
                          messages=[Message("user", "u"), Message("assistant", "a")]))
        rl.append(RLRow(id="r" + tid, task_id=tid, prompt="p", reference_code="r", test_spec={}, level=1,
                        difficulty=1.0, pass_rate=1.0, n_samples=1, backend="cpu"))
    store.write_records(src, "sft", sft)
    store.write_records(src, "rl", rl)
    (src / "families.json").write_text(json.dumps(fams))
    out = tmp_path / "sft_corpus"
    kept = write_sft_corpus(src, out, read_families(src), {1: 1.0, 2: 0.5, 3: 0.0})
    assert kept[1] == 100 and 30 < kept[2] < 70 and kept[3] == 0 and kept[4] == 0  # tier 4 not named: none
    ids = pq.read_table(list((out / "sft").glob("*.parquet"))).column("task_id").to_pylist()
    assert len(ids) == sum(kept.values()) and {fams[t]["tier"] for t in ids} == {1, 2}
    assert all(keep_share(t, 0.5) for t in ids if fams[t]["tier"] == 2)  # the same tasks on every run
    assert sum(pq.read_table(f).num_rows for f in (out / "rl").glob("*.parquet")) == 400
    # again into the same directory: replaced, not appended
    assert write_sft_corpus(src, out, read_families(src), {1: 1.0}) == {1: 100, 2: 0, 3: 0, 4: 0}
    assert sum(pq.read_table(f).num_rows for f in (out / "sft").glob("*.parquet")) == 100
    # a corpus made before tiers: signatures only, all tier 1
    (src / "families.json").write_text(json.dumps({"t0000": "ew:relu"}))
    assert read_families(src) == {"t0000": {"sig": "ew:relu", "tier": 1}}


def test_a_family_corpus_whose_programs_share_a_task_id_is_refused(tmp_path):
    with pytest.raises(InputError, match="1 task programs share a task_id"):
        write_family_corpus(tmp_path / "c", {"sft": []}, {"a": {"sig": "x", "tier": 1}}, 2)
    assert not (tmp_path / "c").exists()


def step(n, *, zero, mixed, passed, failed, added=0, drawn=0, size=0, dropped=0, signal=0, repair=None):
    return {"step": n, "step_s": 10.0, "pass_rate": 0.5, "reward_mean": 0.5, "reward_std": 0.4,
            "zero_adv_share": zero, "groups": mixed + passed + failed, "mixed_groups": mixed,
            "all_pass_groups": passed, "all_fail_groups": failed, "buffer_added": added, "buffer_drawn": drawn,
            "buffer_size": size, "repair_pass_rate": repair, "mirrorpop_dropped": dropped, "trajectories": 24,
            "signal_tokens": signal, "sampled_tokens": 1000}


def test_summarise_steps_and_diagnosis_say_why_from_the_logged_groups():
    recs = [step(1, zero=0.5, mixed=3, passed=2, failed=1, added=1, size=1, signal=400),
            step(2, zero=1.0, mixed=0, passed=4, failed=2, added=2, drawn=1, size=2, dropped=3, repair=0.25)]
    s = summarise_steps(recs)
    assert (s["steps"], s["groups"], s["mixed_groups"], s["all_pass_groups"], s["all_fail_groups"]) == (2, 12, 3, 6, 3)
    assert s["zero_adv_share"] == 0.75 and s["buffer_added"] == 3 and s["buffer_drawn"] == 1 and s["buffer_max"] == 2
    assert s["repair_pass_rate"] == 0.25 and s["mirrorpop_dropped"] == 3 and s["signal_tokens"] == 400
    assert s["trajectories"] == 48 and s["sampled_tokens"] == 2000
    text = diagnose("arm", s, (0.05, -0.1, 0.2))
    assert "3 mixed, 6 all-pass, 3 all-fail" in text and "75% of groups" in text and "400 of 2000" in text
    assert "includes 0" in text and "+0.050 [-0.100, +0.200]" in text
    assert "excludes 0" in diagnose("arm", s, (0.2, 0.05, 0.35))
    assert summarise_steps([]) == {} and diagnose("arm", {}, None) == "arm: no RL step ran."


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_keep_share_extremes(share):
    assert all(keep_share(f"t{i}", share) == (share == 1.0) for i in range(50))
