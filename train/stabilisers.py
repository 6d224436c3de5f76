"""The three RL stabilisers of MusaCoder, as pure functions over plain numbers and tensors.

Each has an on/off switch (``enabled``) so an ablation is one config flag, and each rule has its own unit test
(tests/test_train_stabilisers.py). The GRPO pieces they act on (``group_advantages``, ``group_summary``,
``clipped_policy_loss``) are here too.

PrimeEcho: a multi-turn reward anchored on first-turn quality
-------------------------------------------------------------
A rollout is up to T turns: the model answers, the verifier scores it, and while the answer fails the verifier's
feedback comes back as the next user turn. With r1 the first turn's reward, rT the final turn's reward, c1 whether
the first turn was correct and r_pass the lowest reward a correct answer gets (so every correct answer has r >=
r_pass and every failing one r < r_pass):

    R = r1                                            if c1  (solved at once)
    R = r1 + lam * max(0, min(rT, r_pass) - r1)       otherwise, with 0 <= lam < 1   (prime_echo_reward)

Properties (each tested):
  * a sample that fails first can never score as high as one that succeeds first:
    R <= r1 + lam * (r_pass - r1) = (1 - lam) * r1 + lam * r_pass < r_pass <= any solved-at-once R;
  * repair is rewarded: for a fixed r1 < r_pass, R grows with rT (strictly, up to r_pass);
  * failing "better" pays: for a fixed rT, R grows with r1 (dR/dr1 = 1 - lam > 0), so the policy is never pushed
    toward a deliberately bad first answer;
  * a later turn that regresses below r1 costs nothing beyond r1 (max(0, .)).
Off (``enabled=False``) the reward is the naive final-turn reward R = rT, under which fail-then-fix ties with
solve-at-once (what PrimeEcho exists to prevent).

Buffered Dynamic Retry
----------------------
A GRPO group in which every sample failed has zero advantage everywhere and teaches nothing. Such groups become
repair prompts: the original conversation, the failed answer, and the verifier's feedback as a new user turn. They
wait in a FIFO buffer with a cap (oldest dropped first) and are mixed into later batches at a configured share, so
the model practises repairing its own failures on a later step (``RepairBuffer``, ``mix_counts``). Off: nothing
enters the buffer, batches are all fresh prompts.

MirrorPop
---------
Rollout-time log-probabilities (from the sampler, often a different kernel path, precision or engine) and the
trainer's recomputed log-probabilities of the same tokens drift apart. A sample whose per-sequence mean
|logp_rollout - logp_train| over its response tokens exceeds a threshold is dropped from the policy loss (its weight
is zero), and the dropped share is logged (``mirrorpop_filter``). Off: every sample is kept (the statistic is still
computed and logged).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

# ---------------------------------------------------------------------------- PrimeEcho


def prime_echo_reward(r1: float, r_final: float, first_correct: bool, *, lam: float = 0.5,
                      r_pass: float = 1.0, enabled: bool = True) -> float:
    """The multi-turn reward of one rollout (formula in the module docstring).

    Guarantees, for 0 <= lam < 1 and rewards where correct answers score >= r_pass and failing ones
    < r_pass: fail-first rollouts score strictly below r_pass; R is non-decreasing in r_final and
    increasing in r1. With ``enabled=False`` returns r_final. Raises ValueError for lam outside [0, 1)."""
    if not enabled:
        return float(r_final)
    if not 0.0 <= lam < 1.0:
        raise ValueError(f"PrimeEcho lam must be in [0, 1), got {lam}")
    if first_correct:
        return float(r1)
    return float(r1 + lam * max(0.0, min(r_final, r_pass) - r1))


# ---------------------------------------------------------------------------- Buffered Dynamic Retry


@dataclass
class RepairPrompt:
    """A feedback-conditioned repair prompt: the conversation so far ends with the feedback turn."""
    row: dict  # the RL corpus row the task came from (prompt, reference_code, ...)
    messages: list[dict]  # [{role, content}, ...] ending with the user feedback turn
    created_step: int = 0


@dataclass
class RepairBuffer:
    """FIFO of repair prompts with a cap; the oldest entry is dropped when a new one does not fit."""
    cap: int = 64
    enabled: bool = True
    items: deque = field(default_factory=deque)
    dropped: int = 0  # entries evicted by the cap, over the buffer's life

    def __len__(self) -> int:
        return len(self.items)

    def add_failed_group(self, row: dict, prompt_messages: list[dict], responses: list[str],
                         feedbacks: list[str], correct: list[bool], *, step: int = 0,
                         per_group: int = 1) -> int:
        """Turn an all-failed group into up to ``per_group`` repair prompts; returns how many were added.

        Adds nothing when disabled, when the group is empty, or when any sample was correct (that group
        already carries a learning signal)."""
        if not self.enabled or not responses or any(correct):
            return 0
        added = 0
        seen: set[str] = set()
        for resp, fb in zip(responses, feedbacks):
            if added >= per_group:
                break
            if resp in seen:  # identical failures make identical repair prompts
                continue
            seen.add(resp)
            msgs = [*prompt_messages, {"role": "assistant", "content": resp},
                    {"role": "user", "content": repair_instruction(fb)}]
            self.items.append(RepairPrompt(row=row, messages=msgs, created_step=step))
            added += 1
            while len(self.items) > self.cap:
                self.items.popleft()
                self.dropped += 1
        return added

    def take(self, n: int) -> list[RepairPrompt]:
        """Remove and return up to ``n`` of the oldest entries."""
        out = []
        while self.items and len(out) < n:
            out.append(self.items.popleft())
        return out

    def state(self) -> dict:
        return {"cap": self.cap, "enabled": self.enabled, "dropped": self.dropped,
                "items": [vars(it) for it in self.items]}

    @classmethod
    def from_state(cls, s: dict) -> "RepairBuffer":
        b = cls(cap=s["cap"], enabled=s["enabled"], dropped=s.get("dropped", 0))
        b.items.extend(RepairPrompt(**it) for it in s["items"])
        return b


def repair_instruction(feedback: str) -> str:
    """The user turn that carries verifier feedback into a repair attempt."""
    fb = feedback.strip() or "The kernel was rejected by the verifier."
    return f"The verifier rejected that answer:\n{fb}\nFix the kernel and reply with the full corrected code."


def mix_counts(batch_prompts: int, buffered: int, ratio: float, enabled: bool = True) -> tuple[int, int]:
    """(fresh, from_buffer) prompt counts for one batch.

    At most ``round(batch_prompts * ratio)`` come from the buffer, never more than it holds and never
    the whole batch (at least one fresh prompt keeps the task distribution moving)."""
    if not enabled or buffered <= 0 or ratio <= 0 or batch_prompts <= 1:
        return batch_prompts, 0
    k = min(buffered, int(round(batch_prompts * ratio)), batch_prompts - 1)
    return batch_prompts - k, k


# ---------------------------------------------------------------------------- MirrorPop


def mirrorpop_filter(logp_rollout: torch.Tensor, logp_train: torch.Tensor, mask: torch.Tensor, *,
                     threshold: float = 0.1, enabled: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Which sequences to keep, and each one's mean absolute log-ratio.

    All tensors are [batch, time]; ``mask`` is 1 on response tokens. Returns (keep: bool [batch],
    mean_abs_log_ratio: float [batch]); a sequence is dropped when its statistic exceeds
    ``threshold``. A sequence with no response tokens has statistic 0 and is kept. With
    ``enabled=False`` every sequence is kept. Does not touch gradients (inputs are detached)."""
    m = mask.to(logp_train.dtype)
    diff = (logp_rollout.detach() - logp_train.detach()).abs() * m
    stat = diff.sum(-1) / m.sum(-1).clamp(min=1.0)
    if not enabled:
        return torch.ones_like(stat, dtype=torch.bool), stat
    return stat <= threshold, stat


# ---------------------------------------------------------------------------- GRPO pieces


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Group-normalised advantages (R - mean_g) / (std_g + eps); a group with one sample or equal
    rewards gets zeros."""
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    for g in group_ids.unique():
        sel = group_ids == g
        r = rewards[sel].float()
        if r.numel() < 2:
            continue
        adv[sel] = (r - r.mean()) / (r.std(unbiased=False) + eps)
    return adv


def group_summary(rewards: torch.Tensor, group_ids: torch.Tensor, advantages: torch.Tensor,
                  solved: torch.Tensor, eps: float = 1e-6) -> dict:
    """What a batch of GRPO groups can teach, for the per-step log.

    ``rewards``, ``advantages`` (float) and ``solved`` (bool: the trajectory ended correct) are per
    trajectory, ``group_ids`` names each one's group. Returns: ``groups``; ``zero_adv_groups`` and
    ``zero_adv_share`` (groups whose advantages are all below ``eps`` in magnitude: equal rewards, no
    gradient); ``all_pass_groups`` / ``all_fail_groups`` / ``mixed_groups`` by ``solved``;
    ``reward_std`` over all trajectories and ``group_reward_std_mean`` (mean within-group std, the
    spread GRPO normalises away). Says nothing about whether a non-zero advantage is signal or noise
    (timing rewards of equally correct answers differ by noise)."""
    out = {"groups": 0, "zero_adv_groups": 0, "all_pass_groups": 0, "all_fail_groups": 0, "mixed_groups": 0}
    stds = []
    for g in group_ids.unique():
        sel = group_ids == g
        out["groups"] += 1
        out["zero_adv_groups"] += int(bool((advantages[sel].abs() < eps).all()))
        s = solved[sel]
        key = "all_pass_groups" if bool(s.all()) else "all_fail_groups" if not bool(s.any()) else "mixed_groups"
        out[key] += 1
        stds.append(float(rewards[sel].float().std(unbiased=False)))
    out["zero_adv_share"] = out["zero_adv_groups"] / out["groups"] if out["groups"] else 0.0
    out["reward_std"] = float(rewards.float().std(unbiased=False)) if rewards.numel() else 0.0
    out["group_reward_std_mean"] = sum(stds) / len(stds) if stds else 0.0
    return out


def clipped_policy_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, *, clip_eps: float = 0.2) -> tuple[torch.Tensor, dict]:
    """PPO/GRPO clipped surrogate, averaged over all unmasked tokens of the batch.

    logp_* and mask are [batch, time], advantages [batch]. Returns (loss, stats) where stats holds
    ratio mean/max, the clipped-token share and the k3 KL estimate between old and new policy."""
    m = mask.to(logp_new.dtype)
    ntok = m.sum().clamp(min=1.0)
    log_ratio = logp_new - logp_old.detach()
    ratio = log_ratio.exp()
    adv = advantages[:, None].to(logp_new.dtype)
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv
    loss = -(torch.minimum(unclipped, clipped) * m).sum() / ntok
    with torch.no_grad():
        lr = log_ratio.detach()
        clip_frac = (((ratio - 1).abs() > clip_eps).to(m.dtype) * m).sum() / ntok
        kl = ((lr.exp() - 1 - lr) * m).sum() / ntok  # k3 estimator of KL(old || new)
        rmax = (ratio.detach() * m).max() if m.sum() > 0 else torch.tensor(1.0)
        stats = {"ratio_mean": float((ratio.detach() * m).sum() / ntok), "ratio_max": float(rmax),
                 "clip_frac": float(clip_frac), "approx_kl": float(kl)}
    return loss, stats
