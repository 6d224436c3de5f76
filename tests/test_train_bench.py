"""The training benchmark's own decisions (bench/bench_train_gpu.py): which tiers become the RL and
evaluation mix, how SFT is thinned per tier, and how an arm's logged RL steps are summed up and read.
The GPU run itself is dry-run on cpu at tiny sizes (bench/results/train_cpu.md); the report lives in bench/train_report.py."""

import json

import pyarrow.parquet as pq
import pytest

from bench.train_report import choose_tiers, diagnose, summarise_steps
from bench.train_corpus import keep_share, read_families, write_sft_corpus
from kernelmill import store
from kernelmill.schema import Message, RLRow, SFTRow


def test_choose_tiers_takes_the_band_else_the_nearest_tier():
    assert choose_tiers({1: 0.95, 2: 0.6, 3: 0.35, 4: 0.1}, 0.3, 0.7) == [2, 3]
    assert choose_tiers({1: 0.95, 2: 0.9, 3: 0.8, 4: 0.75}, 0.3, 0.7) == [4]  # all too easy: the hardest-looking
    assert choose_tiers({1: 0.2, 2: 0.1, 3: 0.0, 4: 0.0}, 0.3, 0.7) == [1]  # all too hard: the easiest
    assert choose_tiers({2: 0.8, 3: 0.2}, 0.3, 0.7) == [3]  # equally far: the harder tier
    assert choose_tiers({}, 0.3, 0.7) == []


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


def test_a_policy_packed_for_the_next_device_call_comes_back_with_the_same_weights(tmp_path, monkeypatch):
    """--save-state / --load-state: the SFT policy rounded to bf16 values, packed into parts under the device
    tool's 16 MiB per file, unpacks to an fp32 model directory with exactly those weights and the tokenizer."""
    import torch

    import bench.common as common
    from train.model import build_tiny_model, build_tokenizer, load_pretrained

    tok = build_tokenizer(["def forward(self, x): return torch.relu(x)"] * 50, vocab_size=300)
    model = build_tiny_model(len(tok), n_layer=1, d_model=32, n_head=2, pad_id=tok.pad_token_id)
    common.round_to_bf16(model)
    assert all(torch.equal(p, p.bfloat16().float()) for p in model.parameters())
    monkeypatch.setattr(common, "PART_BYTES", 20_000)  # several parts from a small model
    parts = common.pack_policy(model, tok, tmp_path / "state")
    assert len(parts) > 1 and all(p.stat().st_size <= 20_000 for p in parts)
    assert next(model.parameters()).dtype == torch.float32  # the caller's model is left in fp32
    back, tok2 = load_pretrained(common.unpack_policy(tmp_path / "state", tmp_path / "policy"))
    assert next(back.parameters()).dtype == torch.float32
    want = model.state_dict()
    for k, v in back.state_dict().items():
        assert torch.equal(v, want[k]), k
    assert tok2("return torch.relu(x)")["input_ids"] == tok("return torch.relu(x)")["input_ids"]
    with pytest.raises(SystemExit, match="no policy.tar"):
        common.unpack_policy(tmp_path / "empty", tmp_path / "p2")


def test_loop_bench_plants_one_real_bug_per_answer_deterministically():
    """bench/loop_data.plant_bug, the first turn of the loop bench's repair dialogues: one named bug that
    changes exactly one line of the teacher's answer (cuda and cpu), the same one for the same key, and a bug
    for nearly every task (the verifier decides later which of them fail)."""
    import difflib

    from bench.loop_data import BUGS, plant_bug
    from synth.teacher.compact import answer
    from synth.teacher.task_families import generate_tasks

    for backend in ("cuda", "cpu"):
        planted = 0
        for i, ft in enumerate(generate_tasks(60, seed=2)):
            good = f"```python\n{answer(ft, backend)}```"
            bug, bad = plant_bug(good, f"task{i}")
            assert (bug, bad) == plant_bug(good, f"task{i}")
            if not bug:
                assert bad == good
                continue
            planted += 1
            assert bug in BUGS and bad != good
            changed = [d for d in difflib.ndiff(good.splitlines(), bad.splitlines()) if d[:2] in ("- ", "+ ")]
            assert 1 <= len(changed) <= 2, changed  # one line removed, or one line replaced
        assert planted >= 50, (backend, planted)


def test_loop_bench_redo_sft_keeps_only_the_verified_repair_dialogues(tmp_path):
    """--redo-sft: the repair dialogues (minutes of verification on the device) stay, with their counts;
    m0, the SFT corpus and every arm go, so the next SFT runs with this call's settings."""
    from bench.bench_loop_gpu import keep_repair_dialogues

    for name in ("m0_bf16", "arms/rl/loop", "corpus/sft", "repair_sft/sft"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "f").write_text("x")
    state = {"repair_sft": {"planted": 48, "failed_and_kept": 32}, "sft": {"steps": 985}, "arms": {"rl": {"done": True}},
             "commands": ["call 1"]}
    kept = keep_repair_dialogues(tmp_path, state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repair_sft"]
    assert kept["repair_sft"] == state["repair_sft"] and "sft" not in kept and "arms" not in kept
    assert keep_repair_dialogues(tmp_path, {}) == {}  # nothing verified before: a plain fresh start


def test_loop_bench_arm_run_again_under_a_tag_has_the_arms_settings():
    """``--arms rl@b``: arm rl again under its own name (a before/after pair on one m0), with rl's settings."""
    import argparse

    from bench.bench_loop_gpu import ARMS, arm_base, arm_settings

    assert arm_base("rl@b") == "rl" and arm_base("rl_no_retry") == "rl_no_retry" and "rl@b" not in ARMS
    args = argparse.Namespace(server="local", k=2, pool_tasks=2, eval_tasks=2, rl_steps=1, group=2, prompts=1,
                              fail_share=0.25, max_len=64, rft_steps=1, rft_lr=1e-4, turns=1, max_new_tokens=8,
                              temperature=0.8, rl_lr=1e-5, dynamic_rounds=0, concurrency=1, trials=5, timing_trials=3,
                              compile_workers=1, exec_workers=1, repair_turns=1, rft_per_task=1)
    a = arm_settings(args, arm_base("rl_no_retry@b"), "m0", "cpu", 10.0)
    b = arm_settings(args, "rl_no_retry", "m0", "cpu", 10.0)
    assert a == b and a.train.retry is False and a.train.prime_echo is True
