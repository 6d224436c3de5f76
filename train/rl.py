"""RL, GRPO-style, with multi-turn verifier feedback and the three MusaCoder stabilisers.

One step, in order (each line is a call below):

    1. choose prompts        fresh RL rows (held-out tasks excluded) + repair prompts from the
                             Buffered Dynamic Retry buffer (``retry_ratio`` of the batch at most)
    2. roll out              G = ``group_size`` trajectories per prompt, up to ``turns`` answers each,
                             the verifier's feedback as the user turn between answers (under bf16
                             autocast with ``rollout_bf16``: a sampler of lower precision than the
                             trainer, the mismatch MirrorPop exists for)
    2b. dynamic sampling     a fresh group whose samples all pass or all fail (no signal) is replaced by
                             the next prompt's group, up to ``dynamic_max_rounds`` extra rollouts (DAPO)
    3. reward                PrimeEcho R(r1, rT) per trajectory (or rT when switched off)
    4. advantages            (R - mean_group) / std_group
    5. retry buffer          groups where every trajectory failed -> repair prompts -> FIFO buffer
    6. trainer log-probs     recomputed on the sampled tokens (no grad): the "old" policy
    7. MirrorPop             drop trajectories whose mean |logp_rollout - logp_train| > threshold
    8. policy update         clipped surrogate over the sampled tokens of kept trajectories,
                             ``ppo_epochs`` passes, gradient clipped at 1.0
    9. log + checkpoint      one JSON line per step in metrics.jsonl (and to ``on_step``): rewards, the
                             groups (how many had zero advantage, all passed, all failed, were mixed;
                             ``mixed_share_first`` before and ``mixed_share`` after replacement),
                             the retry buffer (size, added, drawn, evicted; ``repair_pass_rate``: the
                             share of repair-prompt trajectories whose first answer was correct), sequences MirrorPop
                             dropped; where the step's time went (sampling, the reward, the update);
                             ckpt-* with optimizer, buffer, and prompt cursor, so a resumed run
                             continues where it stopped

Not handled: a KL penalty against a frozen reference model (the approx. KL between the rollout
policy and the updated one is logged instead); value functions; multiple GPUs. The policy learns
from every answer it sampled in a trajectory (the feedback turns are context, not targets).
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Callable

import torch

from kernelmill.errors import InputError
from kernelmill.settings import TrainSettings
from train import data as D
from train.model import latest_checkpoint, load_pretrained, load_trainer_state, resolve_model_dir, save_checkpoint
from train.rollout import RewardFn, Trajectory, context_limit, multi_turn_rollouts, rl_reward
from train.sft import MetricsLog, stream_indices
from train.stabilisers import (RepairBuffer, clipped_policy_loss, group_advantages, group_summary, mirrorpop_filter,
                               mix_counts, prime_echo_reward)
from verifier.common.config import resolve_backend

log = logging.getLogger("kernelmill.train")


def trainer_logps(model, ids: torch.Tensor, att: torch.Tensor, temperature: float) -> torch.Tensor:
    """log p(token_t | tokens_<t) at the sampling temperature, [B, T] (position 0 gets 0)."""
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float() / temperature
    lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)


def pad_trajectories(trajs: list[Trajectory], pad_id: int):
    """Right-padded ids, attention mask, sampled-token mask and rollout log-probs."""
    T = max(len(t.ids) for t in trajs)
    B = len(trajs)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    att = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T))
    lpr = torch.zeros((B, T))
    for i, t in enumerate(trajs):
        n = len(t.ids)
        ids[i, :n] = torch.tensor(t.ids)
        att[i, :n] = 1
        mask[i, :n] = torch.tensor(t.mask, dtype=torch.float)
        lpr[i, :n] = torch.tensor(t.logp_rollout)
    return ids, att, mask, lpr


def is_flat_group(trajs: list[Trajectory]) -> bool:
    """A group whose trajectories all had the same outcome: every first answer correct, or every
    trajectory failed to the end, or every one failed first and was repaired (DAPO's all-pass /
    all-fail, turn by turn). Such a group has equal rewards up to timing noise."""
    return len({(t.correct[0], t.solved) for t in trajs}) <= 1


def trajectory_reward(t: Trajectory, *, prime_echo: bool, lam: float, r_pass: float) -> float:
    return prime_echo_reward(t.rewards[0], t.rewards[-1], t.correct[0], lam=lam, r_pass=r_pass, enabled=prime_echo)


def train_rl(corpus_dir: str | Path, out_dir: str | Path, *, init: str, reward_fn: RewardFn | None = None,
             backend: str = "cpu", verify_cfg=None, verify_ray=None, steps: int = TrainSettings.rl_steps,
             prompts_per_step: int = TrainSettings.prompts_per_step, group_size: int = TrainSettings.group_size,
             turns: int = TrainSettings.turns, max_new_tokens: int = TrainSettings.max_new_tokens,
             temperature: float = TrainSettings.temperature, lr: float = TrainSettings.rl_lr,
             clip_eps: float = TrainSettings.clip_eps, ppo_epochs: int = TrainSettings.ppo_epochs,
             micro_batch: int = TrainSettings.micro_batch, heldout_frac: float = TrainSettings.heldout_frac,
             split_seed: int = TrainSettings.split_seed, seed: int = TrainSettings.seed,
             device: str = TrainSettings.device, prime_echo: bool = TrainSettings.prime_echo,
             prime_echo_lambda: float = TrainSettings.prime_echo_lambda, r_pass: float = TrainSettings.r_pass,
             retry: bool = TrainSettings.retry, retry_cap: int = TrainSettings.retry_cap,
             retry_ratio: float = TrainSettings.retry_ratio, retry_per_group: int = TrainSettings.retry_per_group,
             mirrorpop: bool = TrainSettings.mirrorpop,
             mirrorpop_threshold: float = TrainSettings.mirrorpop_threshold,
             dynamic_sampling: bool = TrainSettings.dynamic_sampling,
             dynamic_max_rounds: int = TrainSettings.dynamic_max_rounds,
             save_every: int = TrainSettings.rl_save_every, resume: bool = True, rows: list[dict] | None = None,
             max_seconds: float = 0.0, on_step: Callable[[dict], None] | None = None,
             rollout_bf16: bool = TrainSettings.rollout_bf16,
             verifier_url: str = TrainSettings.verifier_url) -> dict:
    """GRPO on the rl corpus config; returns a summary dict and writes checkpoints + metrics.jsonl.

    ``init`` is the policy to start from (an SFT output directory or a model directory).
    ``reward_fn`` defaults to the real verifier on ``backend`` with ``verify_cfg`` (verifier.entry, on the Ray
    cluster ``verify_ray`` names when given), in this process or, with ``verifier_url`` (train.verifier_url), through
    the verifier service: a running one at that URL, or with "auto" one started for this call and stopped when it
    returns (train.rollout.rl_reward; the same scores for the same answers). ``rows`` overrides the corpus rows
    (already split; used by benchmarks that pick their own tasks). ``max_seconds`` > 0 stops early,
    with a checkpoint, before a step that would end past it (judged by the mean step time so far; the
    first step always runs, and a step slower than the mean can still overrun). ``on_step`` gets each step's metrics record as
    soon as it is written (benchmarks flush it where a cut-off run still leaves it)."""
    out_dir = Path(out_dir)
    dev = torch.device(resolve_backend(device, "train.device", device_index=True))
    torch.manual_seed(seed)
    stack = contextlib.ExitStack()
    if reward_fn is None:  # the verifier here or its service (train.verifier_url), checked before the model loads
        reward_fn = stack.enter_context(rl_reward(backend, verify_cfg, ray=verify_ray, verifier_url=verifier_url,
                                                  log_dir=out_dir))
    with stack:  # a serve-verifier started for this run (verifier_url = "auto") stops when the run ends
        ck = latest_checkpoint(out_dir) if resume else None
        state: dict = {}
        if ck is not None:
            model, tok = load_pretrained(ck)
            state = load_trainer_state(ck)
        elif init:
            model, tok = load_pretrained(resolve_model_dir(init))
        else:
            raise InputError("train rl --init", "RL needs a starting policy (an SFT output or a model directory)")
        model.to(dev).train()
        limit = context_limit(model)  # contexts (prompt, answers, feedback) never run past the model's positions
        if rows is None:
            rows, _held = D.split_rows(D.rows_of(D.load_corpus(corpus_dir, "rl")), heldout_frac, split_seed)
        if not rows:
            raise InputError(f"corpus {corpus_dir} (rl)", "has no training rows after holding out tasks")
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
        if state.get("optimizer"):
            opt.load_state_dict(state["optimizer"])
        buffer = RepairBuffer.from_state(state["buffer"]) if state.get("buffer") else RepairBuffer(cap=retry_cap, enabled=retry)
        if "rng" in state:
            torch.set_rng_state(state["rng"])
        cursor = int(state.get("cursor", 0))
        start = int(state.get("step", 0))
        metrics = MetricsLog(out_dir / "metrics.jsonl", "rl", start)
        t0 = time.time()
        last: dict = {}
        for step in range(start, steps):
            ts = time.time()
            # 1. prompts: fresh rows + buffered repair prompts
            n_fresh, n_buf = mix_counts(prompts_per_step, len(buffer), retry_ratio, retry)
            fresh = [rows[i] for i in stream_indices(cursor, n_fresh, len(rows), seed)]
            cursor += n_fresh
            starts = [(row, D.prompt_messages(row), g, False) for g, row in enumerate(fresh)]
            # a buffered repair prompt needs room for its answer in the model's positions; one without is dropped
            taken = buffer.take(n_buf)
            fits = [rp for rp in taken if limit is None
                    or len(D.encode_chat(tok, rp.messages, add_generation_prompt=True)[0]) + max_new_tokens <= limit]
            too_long = len(taken) - len(fits)
            starts += [(rp.row, rp.messages, n_fresh + j, True) for j, rp in enumerate(fits)]
            # 2. multi-turn rollouts with verifier feedback (the reward's share of the time measured apart)
            reward_s = [0.0]

            def timed_reward(items, _s=reward_s):
                t = time.time()
                try:
                    return reward_fn(items)
                finally:
                    _s[0] += time.time() - t

            def roll(group_starts):
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=rollout_bf16):
                    return multi_turn_rollouts(model, tok, [x for st in group_starts for x in [st] * group_size],
                                               timed_reward, turns=turns, max_new_tokens=max_new_tokens,
                                               temperature=temperature, max_context=limit)

            def bdr(new_trajs, groups) -> int:
                """5. Buffered Dynamic Retry: all-failed fresh groups become repair prompts."""
                n = 0
                for g in groups:
                    grp = [t for t in new_trajs if t.group == g]
                    n += buffer.add_failed_group(grp[0].row, grp[0].prompt_messages, [t.responses[0] for t in grp],
                                                 [t.feedbacks[0] for t in grp], [t.solved for t in grp], step=step + 1,
                                                 per_group=retry_per_group)
                return n

            trajs = roll(starts)
            added = bdr(trajs, range(n_fresh))
            flat_first = [g for g in range(n_fresh) if is_flat_group([t for t in trajs if t.group == g])]
            # dynamic sampling (DAPO): a fresh group whose samples all pass or all fail teaches nothing; it is
            # replaced by the group of the next prompt in the stream, up to dynamic_max_rounds extra rollouts
            flat, replaced, rounds = flat_first, 0, 0
            while dynamic_sampling and flat and rounds < dynamic_max_rounds:
                rounds += 1
                new_rows = [rows[i] for i in stream_indices(cursor, len(flat), len(rows), seed)]
                cursor += len(flat)
                new = roll([(row, D.prompt_messages(row), g, False) for g, row in zip(flat, new_rows)])
                added += bdr(new, flat)
                gone = set(flat)
                trajs = [t for t in trajs if t.group not in gone] + new
                replaced += len(flat)
                flat = [g for g in flat if is_flat_group([t for t in trajs if t.group == g])]
            rollout_s = time.time() - ts
            # 3-4. PrimeEcho rewards and group-normalised advantages
            R = torch.tensor([trajectory_reward(t, prime_echo=prime_echo, lam=prime_echo_lambda, r_pass=r_pass)
                              for t in trajs])
            gids = torch.tensor([t.group for t in trajs])
            adv = group_advantages(R, gids)
            # 6. trainer log-probs of the sampled tokens, before the update ("old" policy)
            chunks = [list(range(i, min(i + micro_batch, len(trajs)))) for i in range(0, len(trajs), micro_batch)]
            padded = [pad_trajectories([trajs[i] for i in c], tok.pad_token_id) for c in chunks]
            with torch.no_grad():
                old = [trainer_logps(model, ids.to(dev), att.to(dev), temperature).cpu() for ids, att, _, _ in padded]
            # 7. MirrorPop: drop sequences whose rollout and trainer log-probs disagree
            keeps, stats = [], []
            for (ids, att, mask, lpr), lp_old in zip(padded, old):
                k, s = mirrorpop_filter(lpr, lp_old, mask, threshold=mirrorpop_threshold, enabled=mirrorpop)
                keeps.append(k)
                stats.append(s)
            keep_all = torch.cat(keeps)
            stat_all = torch.cat(stats)
            # 8. clipped policy update over kept sampled tokens
            tok_total = sum(float((m * k[:, None]).sum()) for (_, _, m, _), k in zip(padded, keeps))
            pol: dict = {"ratio_mean": 1.0, "ratio_max": 1.0, "clip_frac": 0.0, "approx_kl": 0.0}
            loss_v = 0.0
            gnorm = 0.0
            if tok_total > 0 and float(adv.abs().sum()) > 0:
                for _epoch in range(ppo_epochs):
                    opt.zero_grad(set_to_none=True)
                    acc: dict = {}
                    loss_v = 0.0
                    for c, (ids, att, mask, _), lp_old, k in zip(chunks, padded, old, keeps):
                        m = (mask * k[:, None]).to(dev)
                        ntok = float(m.sum())
                        if ntok == 0:
                            continue
                        lp_new = trainer_logps(model, ids.to(dev), att.to(dev), temperature)
                        loss, st = clipped_policy_loss(lp_new, lp_old.to(dev), adv[c].to(dev), m, clip_eps=clip_eps)
                        w = ntok / tok_total
                        (loss * w).backward()
                        loss_v += float(loss.detach()) * w
                        for key, val in st.items():
                            acc[key] = max(acc.get(key, val), val) if key == "ratio_max" else acc.get(key, 0.0) + val * w
                    gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
                    opt.step()
                    pol = acc or pol
            # 9. metrics and checkpoint
            fresh_t = [t for t in trajs if not t.from_buffer]
            buf_t = [t for t in trajs if t.from_buffer]
            groups = group_summary(R, gids, adv, torch.tensor([t.solved for t in trajs]))
            signal_tok = sum(float((m * k[:, None] * (adv[c].abs() > 1e-6)[:, None]).sum())
                             for c, (_, _, m, _), k in zip(chunks, padded, keeps))
            last = {
                "step": step + 1, "reward_mean": float(R.mean()), "reward_first_mean": _mean([t.rewards[0] for t in trajs]),
                "reward_final_mean": _mean([t.rewards[-1] for t in trajs]),
                "pass_rate": _mean([t.correct[0] for t in fresh_t]),  # first-turn pass rate on fresh prompts
                "pass_rate_final": _mean([t.solved for t in fresh_t]),
                "repair_pass_rate": _mean([t.correct[0] for t in buf_t]) if buf_t else None,
                "mean_turns": _mean([len(t.responses) for t in trajs]),
                "buffer_size": len(buffer), "buffer_added": added, "buffer_drawn": len(taken), "buffer_evicted": buffer.dropped,
                "buffer_trajectories": len(buf_t), "fresh_prompts": n_fresh, **groups,
                # the model's positions: buffered repair prompts dropped for want of room, repair turns not sampled
                "buffer_too_long": too_long, "context_full": sum(t.context_full for t in trajs),
                # dynamic sampling: fresh groups that were all-pass / all-fail when first rolled out, how many were
                # replaced, and the share of fresh groups with mixed outcomes after replacement
                "flat_groups_first": len(flat_first), "replaced_groups": replaced, "dynamic_rounds": rounds,
                "mixed_share_first": 1.0 - len(flat_first) / n_fresh if n_fresh else 0.0,
                "mixed_share": 1.0 - len(flat) / n_fresh if n_fresh else 0.0,
                "repair_solved": sum(t.solved for t in buf_t),
                "mirrorpop_dropped": int((~keep_all).sum()), "mirrorpop_dropped_share": float((~keep_all).float().mean()),
                "mirrorpop_stat_mean": float(stat_all.mean()), "mirrorpop_stat_max": float(stat_all.max()),
                "loss": loss_v, "grad_norm": gnorm, **pol, "trajectories": len(trajs), "sampled_tokens": int(tok_total),
                "signal_tokens": int(signal_tok),  # kept sampled tokens with a non-zero advantage: what the update used
                "answers": sum(len(t.responses) for t in trajs),
                "distinct_answers": len({(t.row.get("task_id"), r) for t in trajs for r in t.responses}),
                "sample_s": round(rollout_s - reward_s[0], 3), "reward_s": round(reward_s[0], 3),
                "update_s": round(time.time() - ts - rollout_s, 3), "step_s": round(time.time() - ts, 3),
            }
            metrics.write(last)
            if on_step is not None:
                on_step(last)
            log.info("rl step %d/%d reward %.3f pass %.3f buffer %d mirrorpop %.2f", step + 1, steps,
                     last["reward_mean"], last["pass_rate"], len(buffer), last["mirrorpop_dropped_share"])
            # stop before a step that would not fit, judged by the mean step time so far (a budget is a promise)
            spent = time.time() - t0
            out_of_time = max_seconds > 0 and spent + spent / (step + 1 - start) > max_seconds
            if (save_every and (step + 1) % save_every == 0) or step + 1 == steps or out_of_time:
                save_checkpoint(out_dir, step + 1, model, tok, {"optimizer": opt.state_dict(), "stage": "rl",
                                                                 "buffer": buffer.state(), "cursor": cursor,
                                                                 "rng": torch.get_rng_state()})
            if out_of_time:
                break
        return {"stage": "rl", "steps": steps, "steps_done": int(last.get("step", start)), "resumed_from": start,
                "last": last,
                "checkpoint": str(latest_checkpoint(out_dir)), "seconds": round(time.time() - t0, 2)}


def screen_prompts(rows: list[dict], correct: list[int], n: int, *, fail_share: float = 0.25) -> tuple[list[dict], dict]:
    """RL prompts that can teach something, from ``correct[i]`` passes out of ``n`` samples of the
    current policy on ``rows[i]`` (dynamic sampling, as in DAPO).

    A prompt the policy always solves gives a group of equal rewards: zero advantage, no gradient. Kept:
    every prompt with mixed outcomes (0 < c < n), then prompts it never solves (c = 0: Buffered Dynamic
    Retry turns those into repair prompts) up to ``fail_share`` of the result, in the input order.
    Returns (kept rows, counts of mixed / all_pass / all_fail prompts among the screened ones)."""
    if len(rows) != len(correct):
        raise ValueError(f"{len(rows)} rows but {len(correct)} pass counts")
    if not 0.0 <= fail_share < 1.0:
        raise ValueError(f"fail_share must be in [0, 1), got {fail_share}")
    mixed = [r for r, c in zip(rows, correct) if 0 < c < n]
    failing = [r for r, c in zip(rows, correct) if c <= 0]
    n_fail = min(len(failing), int(fail_share * len(mixed) / (1.0 - fail_share))) if mixed else len(failing)
    keep_ids = {id(r) for r in mixed + failing[:n_fail]}
    kept = [r for r in rows if id(r) in keep_ids]
    stats = {"screened": len(rows), "mixed": len(mixed), "all_pass": sum(c >= n for c in correct),
             "all_fail": len(failing), "kept": len(kept)}
    return kept, stats


def _mean(xs) -> float:
    xs = [float(x) for x in xs]
    return sum(xs) / len(xs) if xs else 0.0
