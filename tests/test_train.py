"""The training stage end to end on real Parquet corpora, a real tokenizer and a real tiny Llama.

Rewards: the RL mechanics tests use a cheap deterministic reward (a stand-in for the verifier,
which compiles C++ per distinct answer and would make these tests minutes long); the CLI smoke run
at the bottom uses the real cpu verifier through ``kernelmill train rl`` and ``train eval``.
"""

import json
from pathlib import Path

import pytest
import torch

from kernelmill import store
from kernelmill.errors import InputError
from kernelmill.schema import Message, RFTRow, RLRow, SFTRow, task_id_for
from train import data as D
from train.model import build_tokenizer, latest_checkpoint, load_pretrained, load_trainer_state
from train.rollout import Score, multi_turn_rollouts
from train.sft import lr_at, read_metrics, train_sft

ROOT = Path(__file__).resolve().parent.parent
SEEDS = sorted((ROOT / "data" / "seed_tasks").glob("*/*.py"))
TINY = dict(vocab_size=400, n_layer=1, d_model=32, n_head=2, max_len=256)


def answer_for(name: str) -> str:
    return f"```python\nclass ModelNew:\n    # {name} kernel\n    pass\n```"


def build_corpus(root: Path) -> Path:
    """sft / rft / rl tables written by the store, one row per seed task."""
    sft, rft, rl = [], [], []
    for i, f in enumerate(SEEDS):
        code = f.read_text()
        tid = task_id_for(code)
        prompt = f"Write ModelNew for {f.stem}:\n{code[:200]}"
        sft.append(SFTRow(id=f"s{i}", task_id=tid, source="seed", generator="teacher", backend="cpu", level=1,
                          num_turns=1, final_reward=1.0,
                          messages=[Message("system", "You write kernels."), Message("user", prompt),
                                    Message("assistant", answer_for(f.stem))]))
        rft.append(RFTRow(id=f"f{i}", task_id=tid, prompt=prompt, completion=answer_for(f.stem), candidate_id=f"c{i}",
                          generator="teacher", backend="cpu", level=1, correct=i % 3 != 0, stage_reached="timing",
                          reward=1.0))
        rl.append(RLRow(id=f"r{i}", task_id=tid, prompt=prompt, reference_code=code, test_spec={"trials": 2}, level=1,
                        difficulty=0.1, pass_rate=0.5, n_samples=2, backend="cpu"))
    for name, rows in (("sft", sft), ("rft", rft), ("rl", rl)):
        store.write_records(root, name, rows)
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def sft_out(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sft")
    train_sft(corpus, out, steps=6, batch_size=4, save_every=3, **TINY)
    return out


# ---------------------------------------------------------------------------- data


def test_load_corpus_reads_parquet_with_and_without_a_dataset_card(corpus, tmp_path):
    ds = D.load_corpus(corpus, "sft")
    assert len(ds) == len(SEEDS) and ds[0]["messages"][2]["role"] == "assistant"
    carded = build_corpus(tmp_path / "carded")
    from curation.corpus import write_card

    write_card(carded)
    ds2 = D.load_corpus(carded, "rl")  # through datasets.load_dataset(dir, "rl")
    assert sorted(ds2["task_id"]) == sorted(r["task_id"] for r in D.rows_of(D.load_corpus(corpus, "rl")))
    assert D.row_test_spec(ds2[0]) == {"trials": 2}
    with pytest.raises(InputError, match="no rft/"):
        D.load_corpus(tmp_path, "rft")
    with pytest.raises(InputError, match="must be one of"):
        D.load_corpus(corpus, "dpo")


def test_heldout_split_is_by_task_and_deterministic(corpus):
    rows = D.rows_of(D.load_corpus(corpus, "rl"))
    tr, held = D.split_rows(rows, 0.3, seed=1)
    assert {r["task_id"] for r in tr}.isdisjoint({r["task_id"] for r in held})
    assert D.split_rows(rows, 0.3, seed=1) == (tr, held)
    assert D.split_rows(rows, 0.0)[1] == []


def test_chat_encoding_masks_assistant_turns_only(corpus):
    tok = build_tokenizer(D.corpus_texts(corpus), vocab_size=400)
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "make relu"},
            {"role": "assistant", "content": "A1 ok"}, {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "A2 ok"}]
    ids, mask = D.encode_chat(tok, msgs)
    assert len(ids) == len(mask)
    trained = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert trained == "A1 ok<|end|>A2 ok<|end|>"
    assert tok.decode(ids, skip_special_tokens=True) == "sys\n\nmake reluA1 okfix itA2 ok"  # system folded into user
    p_ids, p_mask = D.encode_chat(tok, msgs[:2], add_generation_prompt=True)
    assert ids[: len(p_ids)] == p_ids and sum(p_mask) == 0  # generation starts exactly where the answer does
    with pytest.raises(InputError):
        D.encode_chat(tok, [{"role": "tool", "content": "x"}])


# ---------------------------------------------------------------------------- SFT / RFT


def test_sft_learns_and_resume_gives_the_same_weights(corpus, sft_out, tmp_path):
    recs = read_metrics(sft_out / "metrics.jsonl", "sft")
    assert [r["step"] for r in recs] == list(range(1, 7))
    # a run stopped at step 3 and resumed ends where the uninterrupted run ended
    part = tmp_path / "part"
    train_sft(corpus, part, steps=3, batch_size=4, save_every=3, **TINY)
    res = train_sft(corpus, part, steps=6, batch_size=4, save_every=3, **TINY)
    assert res["resumed_from"] == 3
    assert [r["step"] for r in read_metrics(part / "metrics.jsonl", "sft")] == list(range(1, 7))
    a, _ = load_pretrained(latest_checkpoint(sft_out))
    b, _ = load_pretrained(latest_checkpoint(part))
    for (n, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.allclose(p, q, atol=1e-6), n
    # and longer training on this tiny corpus drives the assistant-token loss down
    long = train_sft(corpus, tmp_path / "long", steps=40, batch_size=4, lr=3e-3, save_every=0, **TINY)
    first = read_metrics(tmp_path / "long" / "metrics.jsonl", "sft")[0]["loss"]
    assert long["final_loss"] < 0.6 * first


def test_rft_trains_on_correct_completions_of_training_tasks_only(corpus, sft_out, tmp_path):
    res = train_sft(corpus, tmp_path / "rft", config="rft", init=str(sft_out), steps=2, batch_size=2, **TINY)
    rows = D.rows_of(D.load_corpus(corpus, "rft"))
    train_rows, _ = D.split_rows(rows, 0.2)
    assert res["examples"] == sum(bool(r["correct"]) for r in train_rows) < len(rows)


# ---------------------------------------------------------------------------- RL mechanics

def starts_with_fn_reward(items):
    """Deterministic stand-in for the verifier: correct iff the answer starts with 'class'."""
    return [Score(reward=1.0 if r.startswith("class") else -0.5, correct=r.startswith("class"),
                  feedback=f"FEEDBACK-{len(r)}: answer must start with class") for _row, r in items]


def never_correct(items):
    return [Score(reward=0.0, correct=False, feedback="compile error: x") for _ in items]


def test_multi_turn_rollout_feeds_back_verifier_text_and_logs_matching_logprobs(sft_out):
    from train.rl import trainer_logps, pad_trajectories

    model, tok = load_pretrained(latest_checkpoint(sft_out))
    row = {"task_id": "t", "prompt": "write relu", "reference_code": ""}
    trajs = multi_turn_rollouts(model, tok, [(row, D.prompt_messages(row), 0, False)] * 3, never_correct,
                                turns=3, max_new_tokens=8)
    for t in trajs:
        assert len(t.responses) == 3 and t.rewards == [0.0, 0.0, 0.0]
        text = tok.decode(t.ids, skip_special_tokens=False)
        assert text.count("compile error: x") == 2  # feedback after answers 1 and 2, not after the last
        sampled = tok.decode([i for i, m in zip(t.ids, t.mask) if m], skip_special_tokens=True)
        assert sampled == "".join(t.responses)
    ids, att, mask, lpr = pad_trajectories(trajs, tok.pad_token_id)
    with torch.no_grad():
        lpt = trainer_logps(model, ids, att, 1.0)
    # the sampler's log-probs are the trainer's on the same tokens (fp32, left vs right padding)
    assert ((lpr - lpt).abs() * mask).max() < 1e-4


def test_repair_turn_that_would_not_fit_the_model_positions_is_not_sampled(sft_out):
    """A repair turn whose context plus max_new_tokens passes the model's positions ends the trajectory
    (context_full) instead of sampling past them; with room, the same rollout runs every turn."""
    from train.rollout import context_limit

    model, tok = load_pretrained(latest_checkpoint(sft_out))
    assert context_limit(model) == TINY["max_len"]
    row = {"task_id": "t", "prompt": "write relu", "reference_code": ""}
    start = (row, D.prompt_messages(row), 0, False)
    n_prompt = len(D.encode_chat(tok, D.prompt_messages(row), add_generation_prompt=True)[0])
    tight = multi_turn_rollouts(model, tok, [start] * 2, never_correct, turns=3, max_new_tokens=8,
                                max_context=n_prompt + 8 + 4)  # the first answer fits, the feedback turn does not
    assert [len(t.responses) for t in tight] == [1, 1] and all(t.context_full for t in tight)
    roomy = multi_turn_rollouts(model, tok, [start] * 2, never_correct, turns=3, max_new_tokens=8)
    assert [len(t.responses) for t in roomy] == [3, 3] and not any(t.context_full for t in roomy)


def long_feedback(items):
    return [Score(reward=0.0, correct=False, feedback="compile error: " + "x y z " * 200) for _ in items]


def test_rl_drops_repair_prompts_longer_than_the_model_positions(corpus, sft_out, tmp_path):
    """Feedback of ~600 tokens against a model of 256 positions: no repair turn is sampled (context_full on
    every trajectory) and every buffered repair prompt is dropped when drawn (buffer_too_long), not sampled."""
    run_rl(corpus, sft_out, tmp_path / "rl", long_feedback, steps=2, prompts_per_step=4, retry_ratio=0.5)
    recs = read_metrics(tmp_path / "rl" / "metrics.jsonl", "rl")
    assert all(r["context_full"] == r["trajectories"] > 0 and r["mean_turns"] == 1.0 for r in recs)
    assert recs[0]["buffer_added"] > 0 and recs[1]["buffer_drawn"] == recs[1]["buffer_too_long"] == 2
    assert recs[1]["buffer_trajectories"] == 0 and recs[1]["groups"] == recs[1]["fresh_prompts"]


def run_rl(corpus, init, out, reward_fn, **kw):
    from train.rl import train_rl

    args = dict(init=str(init), reward_fn=reward_fn, steps=3, prompts_per_step=2, group_size=2, turns=2,
                max_new_tokens=6, lr=1e-3, save_every=0)
    args.update(kw)
    return train_rl(corpus, out, **args)


def test_rl_logs_metrics_and_retry_buffer_feeds_later_batches(corpus, sft_out, tmp_path):
    res = run_rl(corpus, sft_out, tmp_path / "rl", never_correct, steps=3, prompts_per_step=4, retry_ratio=0.5)
    recs = read_metrics(tmp_path / "rl" / "metrics.jsonl", "rl")
    assert [r["step"] for r in recs] == [1, 2, 3]
    for key in ("reward_mean", "pass_rate", "mirrorpop_dropped_share", "buffer_size", "ratio_mean", "approx_kl"):
        assert key in recs[0]
    # every fresh group fails throughout: BDR buffers it, dynamic sampling replaces it by another task's group,
    # which fails throughout and is buffered too (one repair prompt per group rolled out); repair groups are
    # never replaced
    assert recs[0]["replaced_groups"] == 4 and recs[0]["buffer_added"] == 4 + 4 and recs[0]["buffer_drawn"] == 0
    assert recs[1]["buffer_drawn"] == 2  # half of the 4 prompts of step 2 are repair prompts
    assert recs[1]["replaced_groups"] == 2 and recs[1]["buffer_size"] == 8 - 2 + 2 + 2  # 2 taken, 2 + 2 added
    assert res["last"]["pass_rate"] == 0.0 and Path(res["checkpoint"]).is_dir()
    # the groups say why nothing was learnt: every group failed, so every advantage was zero
    assert all(r["zero_adv_share"] == 1.0 and r["all_fail_groups"] == r["groups"] and r["signal_tokens"] == 0
               for r in recs)
    assert recs[1]["groups"] == 4 and recs[1]["fresh_prompts"] == 2 and recs[1]["buffer_trajectories"] == 2 * 2
    off = run_rl(corpus, sft_out, tmp_path / "rl_off", never_correct, steps=2, prompts_per_step=4, retry=False)
    assert off["last"]["buffer_size"] == 0 and off["last"]["buffer_drawn"] == 0


def test_mirrorpop_threshold_filters_samples_and_switch_keeps_them(corpus, sft_out, tmp_path):
    before, _ = load_pretrained(latest_checkpoint(sft_out))
    res = run_rl(corpus, sft_out, tmp_path / "mp", starts_with_fn_reward, steps=1, mirrorpop_threshold=-1.0)
    assert res["last"]["mirrorpop_dropped_share"] == 1.0 and res["last"]["sampled_tokens"] == 0
    after, _ = load_pretrained(latest_checkpoint(tmp_path / "mp"))
    for p, q in zip(before.parameters(), after.parameters()):
        assert torch.equal(p, q)  # every sample dropped: no update
    res2 = run_rl(corpus, sft_out, tmp_path / "mp_off", starts_with_fn_reward, steps=1, mirrorpop_threshold=-1.0,
                  mirrorpop=False)
    assert res2["last"]["mirrorpop_dropped_share"] == 0.0 and res2["last"]["sampled_tokens"] > 0


def test_bf16_rollouts_disagree_with_the_fp32_trainer_and_mirrorpop_sees_it(corpus, sft_out, tmp_path):
    # fp32 sampler and trainer agree to rounding; a bf16 sampler (an engine of lower precision) does not
    same = run_rl(corpus, sft_out, tmp_path / "fp32", starts_with_fn_reward, steps=1)["last"]
    low = run_rl(corpus, sft_out, tmp_path / "bf16", starts_with_fn_reward, steps=1, rollout_bf16=True,
                 mirrorpop_threshold=2e-5)["last"]
    assert same["mirrorpop_stat_max"] < 2e-5 and same["mirrorpop_dropped"] == 0
    assert low["mirrorpop_stat_mean"] > 10 * max(same["mirrorpop_stat_mean"], 1e-6)
    assert low["mirrorpop_dropped"] == low["trajectories"]


def test_rl_updates_the_policy_and_resumes(corpus, sft_out, tmp_path):
    # a reward that differs across a group gives a non-zero advantage, so the weights move
    def length_reward(items):
        return [Score(reward=float(len(r) % 3), correct=False, feedback="f") for _row, r in items]

    before, _ = load_pretrained(latest_checkpoint(sft_out))
    seen = []
    run_rl(corpus, sft_out, tmp_path / "r", length_reward, steps=2, save_every=1, group_size=4, on_step=seen.append)
    recs = read_metrics(tmp_path / "r" / "metrics.jsonl", "rl")
    assert [r["step"] for r in seen] == [1, 2] and seen[-1]["reward_mean"] == recs[-1]["reward_mean"]
    assert any(r["grad_norm"] > 0 for r in recs)
    assert any(r["signal_tokens"] > 0 and r["zero_adv_share"] < 1.0 for r in recs)
    after, _ = load_pretrained(latest_checkpoint(tmp_path / "r"))
    assert any(not torch.equal(p, q) for p, q in zip(before.parameters(), after.parameters()))
    res = run_rl(corpus, sft_out, tmp_path / "r", length_reward, steps=3, save_every=1, group_size=4)
    assert res["resumed_from"] == 2
    assert [r["step"] for r in read_metrics(tmp_path / "r" / "metrics.jsonl", "rl")] == [1, 2, 3]


def test_screen_prompts_keeps_mixed_groups_and_a_bounded_share_of_unsolved_ones():
    from train.rl import screen_prompts

    rows = [{"task_id": f"t{i}"} for i in range(10)]
    correct = [4, 2, 0, 1, 4, 0, 3, 0, 4, 0]  # of n = 4 samples each
    kept, st = screen_prompts(rows, correct, 4, fail_share=0.25)
    assert st == {"screened": 10, "mixed": 3, "all_pass": 3, "all_fail": 4, "kept": 4}
    ids = [r["task_id"] for r in kept]
    assert {"t1", "t3", "t6"} <= set(ids) and not {"t0", "t4", "t8"} & set(ids)  # always-solved: no signal
    assert ids == sorted(ids, key=lambda t: int(t[1:]))  # input order kept
    assert sum(correct[int(t[1:])] == 0 for t in ids) == 1  # 1 unsolved: 25% of the kept prompts
    # nothing mixed: the unsolved prompts are all that can teach (through repair turns)
    kept, st = screen_prompts(rows[:3], [4, 0, 0], 4)
    assert [r["task_id"] for r in kept] == ["t1", "t2"] and st["mixed"] == 0
    assert screen_prompts(rows[:2], [4, 4], 4)[0] == []
    with pytest.raises(ValueError):
        screen_prompts(rows, correct[:3], 4)


def test_bootstrap_intervals_resample_tasks_and_pair_two_models():
    from train.evaluate import bootstrap_ci, paired_bootstrap_diff, per_task_pass1

    vals = [1.0] * 20 + [0.0] * 20
    lo, hi = bootstrap_ci(vals, seed=1)
    assert lo < 0.5 < hi and 0.3 < lo and hi < 0.7  # about +-0.15 for 40 tasks at 0.5
    assert bootstrap_ci(vals, seed=1) == (lo, hi)  # deterministic for a seed
    assert bootstrap_ci([1.0] * 5) == (1.0, 1.0) and bootstrap_ci([0.25]) == (0.25, 0.25)
    # more tasks, narrower interval
    lo2, hi2 = bootstrap_ci(vals * 10, seed=1)
    assert hi2 - lo2 < (hi - lo) / 2
    # pairing: model b solves the same tasks as a plus 4 more; the interval of the difference excludes 0
    a = [1.0] * 16 + [0.0] * 24
    b = [1.0] * 20 + [0.0] * 20
    d, dlo, dhi = paired_bootstrap_diff(a, b)
    assert d == pytest.approx(0.1) and 0 < dlo <= d <= dhi
    same = paired_bootstrap_diff(a, a)
    assert same == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        paired_bootstrap_diff(a, b[:3])
    with pytest.raises(ValueError):
        bootstrap_ci([])
    res = {"per_task": [{"task_id": "t1", "n": 4, "correct": 1}, {"task_id": "t2", "n": 1, "correct": 1}]}
    assert per_task_pass1(res) == {"t1": 0.25, "t2": 1.0}


def test_pass_at_k_estimator():
    from train.evaluate import pass_at_k

    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


# ---------------------------------------------------------------------------- CLI smoke run, real cpu verifier


def test_cli_smoke_sft_then_rl_then_eval_with_the_real_cpu_verifier(corpus, tmp_path, capsys):
    """SFT, then 2 RL steps (1 prompt, G=2, 2 turns), then pass@1 on one held-out task, all through
    ``kernelmill train`` with rewards from verifier.engine on the cpu backend. A tiny random model
    writes no valid kernel, so every answer stops at the verifier's extract stage (no compile):
    this proves the loop runs end to end with the real verifier, not that the model learns."""
    from flows.cli import main

    sft, rl = tmp_path / "sft", tmp_path / "rl"
    env_tiny = ["--steps", "3", "--batch-size", "2"]
    assert main(["train", "sft", "--corpus", str(corpus), "--out", str(sft), *env_tiny]) == 0
    assert main(["train", "rl", "--corpus", str(corpus), "--out", str(rl), "--init", str(sft), "--backend", "cpu",
                 "--steps", "2", "--group-size", "2", "--prompts-per-step", "1", "--turns", "2",
                 "--max-new-tokens", "8"]) == 0
    recs = read_metrics(rl / "metrics.jsonl", "rl")
    assert [r["step"] for r in recs] == [1, 2]
    # verifier rewards: an answer with no code block is an extract_error, -0.5 in verifier/judge/reward.py
    assert all(r["reward_first_mean"] == -0.5 and r["pass_rate"] == 0.0 for r in recs)
    # dynamic sampling: step 1's fresh group failed throughout, so BDR buffered it and it was replaced by
    # the next task's group, which failed throughout too and was buffered as well: 2 repair prompts, one per
    # task rolled out (retry_per_group 1); the buffer is never drawn (one prompt per step keeps it fresh)
    assert [(r["flat_groups_first"], r["replaced_groups"], r["all_fail_groups"]) for r in recs] == [(1, 1, 1)] * 2
    assert [(r["buffer_added"], r["buffer_size"], r["buffer_drawn"]) for r in recs] == [(2, 2, 0), (2, 4, 0)]
    buffered = load_trainer_state(latest_checkpoint(rl))["buffer"]["items"]
    assert [it["created_step"] for it in buffered] == [1, 1, 2, 2]
    assert len({it["row"]["task_id"] for it in buffered}) == 4  # a replacement is another task, never re-buffered
    capsys.readouterr()
    assert main(["train", "eval", "--corpus", str(corpus), "--model", str(rl), "--backend", "cpu",
                 "--max-tasks", "1", "--max-new-tokens", "8"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["pass@1"] == 0.0 and res["tasks"] == 1 and res["per_task"][0]["stages"] == ["extract"]
    assert main(["train", "plot", "--out", str(rl)]) == 0 and (rl / "metrics.png").stat().st_size > 0


def test_time_budgeted_sft_decays_the_learning_rate_within_its_budget(corpus, tmp_path, monkeypatch):
    """lr_by_time: a run stopped by max_seconds long before ``steps`` still ends its cosine decay. The trainer's
    clock is a fake one that moves 0.02 s a reading, so how many steps fit the budget does not depend on how fast
    (or how loaded) the machine is."""
    import types

    import train.sft as sft

    now = [1000.0]

    def tick() -> float:
        now[0] += 0.02
        return now[0]

    monkeypatch.setattr(sft, "time", types.SimpleNamespace(time=tick))
    res = train_sft(corpus, tmp_path / "t", steps=100_000, batch_size=2, lr=1e-3, warmup=2, save_every=0,
                    max_seconds=1.5, lr_by_time=True, **TINY)
    recs = read_metrics(tmp_path / "t" / "metrics.jsonl", "sft")
    assert res["steps_done"] < 100_000 and len(recs) == res["steps_done"] > 3
    assert recs[0]["lr"] < recs[1]["lr"] == pytest.approx(1e-3)  # warm-up first
    assert all(a["lr"] >= b["lr"] for a, b in zip(recs[1:], recs[2:]))  # then a monotone decay
    assert recs[-1]["time_s"] >= 1.5 - 1e-3 and recs[-2]["time_s"] <= 1.5  # stopped by the budget
    # the learning rate follows the elapsed share of the budget, not step / 100_000 (which would leave it at ~1e-3)
    frac = max(0.0, recs[-2]["time_s"] - 1e-3) / 1.5
    assert recs[-1]["lr"] <= lr_at(2 + int(frac * (100_000 - 2)), 100_000, 1e-3, 2) + 1e-12
    assert recs[-1]["lr"] < 0.2e-3  # near the floor (10% of base) at the end of the budget


def test_train_stage_fine_tunes_on_the_runs_corpus(corpus, tmp_path, capsys):
    """`kernelmill train-run RUN_DIR --kind sft` (the stage of the list): the run's corpus (here a corpus
    directory passed as curate.out) into RUN_DIR/train/sft, with the [train] section's values."""
    from flows.cli import main

    run = tmp_path / "run"
    run.mkdir()
    sets = ["--set", f"curate.out={corpus}", "--set", "train.sft_steps=2", "--set", "train.batch_size=2",
            "--set", "train.save_every=0", "--set", "train.device=cpu"]
    sets += [a for k, v in TINY.items() for a in ("--set", f"train.{k}={v}")]
    assert main(["train-run", str(run), "--kind", "sft", *sets]) == 0
    out = json.loads(capsys.readouterr().out)["train"]
    assert out["steps_done"] == 2
    assert (run / "train" / "sft" / "metrics.jsonl").is_file()
    assert main(["train-run", str(run), "--kind", "bogus", *sets]) == 2  # a checked setting
