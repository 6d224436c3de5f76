"""The rules of PrimeEcho, Buffered Dynamic Retry and MirrorPop, and the GRPO pieces, each with its switch."""

import itertools

import pytest
import torch

from train.stabilisers import (RepairBuffer, clipped_policy_loss, group_advantages, group_summary, mirrorpop_filter,
                               mix_counts, prime_echo_reward)

# verifier/judge/reward.py's table: failing outcomes score below 1.0, correct ones 1.0 .. 4.0
FAIL_REWARDS = [-1.0, -0.5, 0.0, 0.1, 0.2, 0.25, 0.3]
PASS_REWARDS = [1.0, 1.5, 2.0, 4.0]


# ---------------------------------------------------------------------------- PrimeEcho

@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, 0.9])
def test_prime_echo_fail_then_repair_never_beats_solving_at_once(lam):
    best_fail_first = max(prime_echo_reward(r1, rT, False, lam=lam, r_pass=1.0)
                          for r1 in FAIL_REWARDS for rT in FAIL_REWARDS + PASS_REWARDS)
    worst_first_pass = min(prime_echo_reward(r1, r1, True, lam=lam, r_pass=1.0) for r1 in PASS_REWARDS)
    assert best_fail_first < 1.0 <= worst_first_pass


def test_prime_echo_rewards_repair_and_better_first_attempts():
    # repair pays: same first answer, a better final answer scores higher (up to r_pass)
    r1 = 0.0
    finals = [0.0, 0.1, 0.2, 1.0]
    scores = [prime_echo_reward(r1, rT, False, lam=0.5) for rT in finals]
    assert scores == sorted(scores) and scores[-1] > scores[0]
    # a better failing first attempt always scores higher for the same final answer (no incentive to fail badly)
    for rT in [0.2, 1.0, 4.0]:
        seq = [prime_echo_reward(a, rT, False, lam=0.5) for a in FAIL_REWARDS]
        assert all(x < y for x, y in zip(seq, seq[1:]))
    # regressing after the first answer costs nothing beyond r1
    assert prime_echo_reward(0.2, -0.5, False, lam=0.5) == pytest.approx(0.2)
    # exact formula: r1 + lam * (min(rT, r_pass) - r1)
    assert prime_echo_reward(0.0, 3.0, False, lam=0.5, r_pass=1.0) == pytest.approx(0.5)


def test_prime_echo_switch_off_is_final_turn_reward_and_bad_lambda_is_refused():
    for r1, rT in itertools.product(FAIL_REWARDS, PASS_REWARDS):
        assert prime_echo_reward(r1, rT, False, enabled=False) == rT
    # off, fail-then-fix ties solve-at-once: the failure mode PrimeEcho removes
    assert prime_echo_reward(-0.5, 1.0, False, enabled=False) == prime_echo_reward(1.0, 1.0, True, enabled=False)
    with pytest.raises(ValueError):
        prime_echo_reward(0.0, 1.0, False, lam=1.0)


# ---------------------------------------------------------------------------- Buffered Dynamic Retry

ROW = {"task_id": "t1", "prompt": "write relu", "reference_code": "..."}
MSGS = [{"role": "user", "content": "write relu"}]


def test_retry_buffer_takes_only_all_failed_groups_and_builds_feedback_prompts():
    b = RepairBuffer(cap=8)
    assert b.add_failed_group(ROW, MSGS, ["a", "b"], ["fb a", "fb b"], [False, True]) == 0
    assert len(b) == 0
    assert b.add_failed_group(ROW, MSGS, ["a", "a", "b"], ["fb a", "fb a", "fb b"], [False] * 3, per_group=3) == 2
    rp = b.take(1)[0]
    assert [m["role"] for m in rp.messages] == ["user", "assistant", "user"]
    assert rp.messages[1]["content"] == "a" and "fb a" in rp.messages[2]["content"]
    assert rp.row is ROW and len(b) == 1


def test_retry_buffer_is_fifo_with_cap_and_round_trips_its_state():
    b = RepairBuffer(cap=3)
    for i in range(5):
        b.add_failed_group(ROW, MSGS, [f"r{i}"], [f"f{i}"], [False], step=i)
    assert len(b) == 3 and b.dropped == 2
    restored = RepairBuffer.from_state(b.state())
    assert [rp.messages[1]["content"] for rp in restored.take(10)] == ["r2", "r3", "r4"]


def test_retry_switch_off_keeps_buffer_empty_and_batches_fresh():
    b = RepairBuffer(cap=3, enabled=False)
    assert b.add_failed_group(ROW, MSGS, ["x"], ["f"], [False]) == 0 and len(b) == 0
    assert mix_counts(8, 10, 0.5, enabled=False) == (8, 0)


def test_mix_counts_respects_ratio_buffer_size_and_keeps_one_fresh_prompt():
    assert mix_counts(8, 10, 0.25) == (6, 2)
    assert mix_counts(8, 1, 0.5) == (7, 1)
    assert mix_counts(4, 10, 1.0) == (1, 3)
    assert mix_counts(4, 0, 0.5) == (4, 0)


# ---------------------------------------------------------------------------- MirrorPop

def test_mirrorpop_drops_sequences_over_threshold_counting_response_tokens_only():
    lp_train = torch.zeros(3, 4)
    lp_roll = torch.tensor([[9.0, 0.01, 0.01, 0.0],   # big gap on a prompt token only -> kept
                            [0.0, 0.5, 0.5, 0.0],     # mean |gap| 0.5 over 2 response tokens -> dropped
                            [0.0, 0.05, 0.15, 0.0]])  # mean 0.1 -> kept (threshold inclusive)
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0]])
    keep, stat = mirrorpop_filter(lp_roll, lp_train, mask, threshold=0.1)
    assert keep.tolist() == [True, False, True]
    assert stat.tolist() == pytest.approx([0.01, 0.5, 0.1])
    # the absolute value matters: a negative gap counts the same
    keep2, _ = mirrorpop_filter(-lp_roll, lp_train, mask, threshold=0.1)
    assert keep2.tolist() == keep.tolist()


def test_mirrorpop_switch_off_keeps_all_but_still_reports_the_statistic():
    lp = torch.tensor([[0.0, 2.0]])
    keep, stat = mirrorpop_filter(lp, torch.zeros(1, 2), torch.tensor([[0, 1]]), threshold=0.1, enabled=False)
    assert keep.tolist() == [True] and stat.item() == pytest.approx(2.0)


# ---------------------------------------------------------------------------- GRPO pieces

def test_group_advantages_are_normalised_within_each_group():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 5.0, 5.0, 2.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    a = group_advantages(r, g)
    assert a[:4].mean().abs() < 1e-6 and a[:4].std(unbiased=False) == pytest.approx(1.0, abs=1e-4)
    assert a[0] > 0 > a[1]
    assert a[4:].abs().max() == 0  # equal rewards, and a group of one, carry no signal


def test_clipped_policy_loss_stops_gradient_outside_the_trust_region():
    old = torch.zeros(2, 3)
    mask = torch.tensor([[0, 1, 1], [0, 1, 1]])
    adv = torch.tensor([1.0, -1.0])
    new = torch.zeros(2, 3, requires_grad=True)
    loss, st = clipped_policy_loss(new, old, adv, mask, clip_eps=0.2)
    loss.backward()
    # ratio 1: loss is -mean(A) over tokens, gradient -A/ntok on response tokens, none on prompt tokens
    assert loss.item() == pytest.approx(0.0)
    assert new.grad[0, 1:].tolist() == pytest.approx([-0.25, -0.25]) and new.grad[:, 0].abs().sum() == 0
    assert st["ratio_mean"] == pytest.approx(1.0) and st["clip_frac"] == 0
    far = torch.full((2, 3), 0.5, requires_grad=True)  # ratio e^0.5 > 1.2
    loss2, st2 = clipped_policy_loss(far, old, adv, mask, clip_eps=0.2)
    loss2.backward()
    assert far.grad[0].abs().sum() == 0  # A > 0 and ratio above 1 + eps: clipped, no push further
    assert far.grad[1, 1:].abs().sum() > 0  # A < 0: the unclipped (pessimistic) term still pulls back
    assert st2["clip_frac"] == pytest.approx(1.0) and st2["approx_kl"] > 0


def test_group_summary_counts_groups_without_signal_and_by_outcome():
    # group 0: all solved, equal rewards; group 1: all failed, equal; group 2: mixed; group 3: all solved at
    # different speeds (non-zero advantages from the speed-up part of the reward alone)
    R = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.2, 1.0, 2.5])
    gids = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    solved = torch.tensor([True, True, False, False, True, False, True, True])
    s = group_summary(R, gids, group_advantages(R, gids), solved)
    assert s["groups"] == 4 and s["zero_adv_groups"] == 2 and s["zero_adv_share"] == 0.5
    assert (s["all_pass_groups"], s["all_fail_groups"], s["mixed_groups"]) == (2, 1, 1)
    assert s["group_reward_std_mean"] == pytest.approx((0 + 0 + 0.4 + 0.75) / 4)
    assert s["reward_std"] == pytest.approx(float(R.std(unbiased=False)))
    empty = group_summary(torch.zeros(0), torch.zeros(0, dtype=torch.long), torch.zeros(0), torch.zeros(0, dtype=torch.bool))
    assert empty["groups"] == 0 and empty["zero_adv_share"] == 0.0
