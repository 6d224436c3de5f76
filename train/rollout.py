"""Sampling and multi-turn rollouts with verifier feedback, and the reward interface.

A reward function scores a batch of (RL row, model response) pairs:

    RewardFn = Callable[[list[tuple[dict, str]]], list[Score]]     Score(reward, correct, feedback)

:func:`verifier_reward_fn` is the real one: each batch of responses goes through the verifier's one
entry (``verifier.entry.verify``: extract, static legality, compile, correctness, ...) against the row's
reference program, as the verify stage's candidates do; identical programs of a batch are verified once
(the entry's reuse), which matters because every distinct kernel is compiled. Nothing is cached across
batches: the same answer in a later step is judged again. :func:`rl_reward` picks it, or the same judgement
through the verifier service (``train.verifier_url``: train/trl_reward.py's ``service_reward_fn``).

A rollout (:func:`multi_turn_rollouts`) samples an answer for every context in one batched
``generate`` call, scores the answers, and for each answer that failed appends the verifier's
feedback as a user turn and samples again, up to ``turns`` answers. Each trajectory keeps its token
ids, a mask that is 1 exactly on the tokens the policy sampled, and the log-probabilities the
sampler assigned to them (the rollout-time log-probs MirrorPop compares with the trainer's).

Contexts stay inside the model's position table (:func:`context_limit`): a repair turn whose context
plus ``max_new_tokens`` would not fit is not sampled, the trajectory ends at its last answer and is
marked ``context_full`` (the H100 loop run of session 10 sent repair contexts of 617-1581 tokens, plus
320 new, to a model with 1024 positions). An opening prompt is sampled as it is (train/rl.py drops
buffered repair prompts without room). Not handled: stop strings other than the end-of-turn token.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from train import data as D
from train.reward import Policy, RewardFn, Score, _verify_config, reward_pairs, score_of  # noqa: F401 (re-exported)
from train.stabilisers import repair_instruction

log = logging.getLogger("kernelmill.train")


def verifier_reward_fn(backend: str = "cpu", verify_cfg=None, ray=None) -> RewardFn:
    """A RewardFn backed by the real verifier: every batch of answers is one call of the one entry
    (``verifier.entry.verify``) on :func:`reward_pairs`. So the reward judges an answer exactly as the verify
    stage judges the same response: identical programs of one batch verified once, locally or on ``ray`` (a
    verifier.entry.RayTarget, the loop's ``flows.ray_address``). ``Score.verdict`` is the full verdict.
    ``verify_cfg``: the [verify] settings (a VerifyConfig, or a dict of its keys), None for its defaults.

    Raises ModuleNotFoundError when the verifier is not in this checkout."""
    # here: the trainer runs without the verifier (and the generators) when rewards come from elsewhere
    from verifier.entry import verify

    config = _verify_config(verify_cfg)

    def score(items: list[tuple[dict, str]]) -> list[Score]:
        verdicts = verify(reward_pairs(items, backend), config=config, ray=ray)
        return [score_of(v) for v in verdicts]

    return score


@contextlib.contextmanager
def rl_reward(backend: str = "cpu", verify_cfg=None, ray=None, *, verifier_url: str = "",
              log_dir: str | Path | None = None) -> Iterator[RewardFn]:
    """The RL reward that ``train.verifier_url`` names, for the ``with`` block: "" the verifier's entry in this
    process (:func:`verifier_reward_fn`); an http(s) URL the running `kernelmill serve-verifier` there (its
    /health checked first); "auto" a serve-verifier started for the block with these [verify] settings and
    ``ray`` (log: ``log_dir/serve-verifier.log``) and stopped after it. The service's scores are those of the
    in-process path for the same answers (the same candidates, the same verifier). A service that does not
    answer raises InputError naming train.verifier_url and the URL (train/trl_reward.py)."""
    if not verifier_url:
        yield verifier_reward_fn(backend, verify_cfg, ray=ray)
        return
    from train.trl_reward import check_service, local_verifier_service, service_reward_fn

    if verifier_url != "auto":
        check_service(verifier_url)
        yield service_reward_fn(verifier_url, backend)
        return
    log_path = Path(log_dir or tempfile.gettempdir()) / "serve-verifier.log"
    with local_verifier_service(_verify_config(verify_cfg), backend=backend, ray=ray, log_path=log_path) as url:
        log.info("rl reward: serve-verifier at %s (log %s)", url, log_path)
        yield service_reward_fn(url, backend)


# ---------------------------------------------------------------------------- sampling


@dataclass
class Sampled:
    ids: list[int]  # sampled tokens, up to and including the end token when one was sampled
    logps: list[float]  # sampler log-probs of those tokens (at the sampling temperature)
    closed: bool  # ended with the end-of-turn token (else cut by max_new_tokens)


def sample(model, tok, contexts: list[list[int]], *, max_new_tokens: int, temperature: float = 1.0,
           greedy: bool = False) -> list[Sampled]:
    """One continuation per context, batched (left-padded). Log-probs are those of the distribution
    actually sampled from: softmax(logits / temperature) with no top-k/top-p truncation."""

    dev = next(model.parameters()).device
    pad, end = tok.pad_token_id, tok.convert_tokens_to_ids(D.END)
    L = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), L), pad, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, c in enumerate(contexts):
        ids[i, L - len(c):] = torch.tensor(c)
        att[i, L - len(c):] = 1
    was_training = model.training
    model.eval()
    with torch.no_grad():
        kw = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        out = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), max_new_tokens=max_new_tokens,
                             pad_token_id=pad, eos_token_id=end, output_logits=True, return_dict_in_generate=True, **kw)
    model.train(was_training)
    new = out.sequences[:, L:].cpu()
    logits = torch.stack(out.logits, dim=1).float().cpu()  # [B, new, V] raw logits
    t = 1.0 if greedy else temperature
    lp = torch.log_softmax(logits / t, dim=-1).gather(-1, new[:, : logits.size(1), None]).squeeze(-1)
    res = []
    for i in range(len(contexts)):
        row = new[i].tolist()
        n = row.index(end) + 1 if end in row else len(row)
        res.append(Sampled(ids=row[:n], logps=lp[i, :n].tolist(), closed=end in row[:n]))
    return res


def context_limit(model) -> int | None:
    """The most tokens (context and continuation) the model has positions for; None when it does not say."""
    n = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(n) if n else None


def decode_response(tok, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=True)


# ---------------------------------------------------------------------------- multi-turn rollouts


@dataclass
class Trajectory:
    row: dict
    group: int
    prompt_messages: list[dict]
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # 1 on policy-sampled tokens
    logp_rollout: list[float] = field(default_factory=list)  # aligned with ids; 0 where mask is 0
    responses: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    feedbacks: list[str] = field(default_factory=list)
    from_buffer: bool = False
    context_full: bool = False  # a repair turn was due but its context would not fit the model's positions

    @property
    def solved(self) -> bool:
        return bool(self.correct) and self.correct[-1]


def multi_turn_rollouts(model, tok, starts: list[tuple[dict, list[dict], int, bool]], reward_fn: RewardFn, *,
                        turns: int = 2, max_new_tokens: int = 256, temperature: float = 1.0,
                        max_context: int | None = None) -> list[Trajectory]:
    """Roll out every (row, opening messages, group id, from_buffer) start for up to ``turns`` answers.

    After an answer fails, the verifier's feedback becomes the next user turn; a correct answer or
    the last turn ends the trajectory. Every answer is scored, so ``rewards[0]`` is the first turn's
    reward and ``rewards[-1]`` the final one. A repair turn whose context plus ``max_new_tokens`` exceeds
    ``max_context`` (default: the model's :func:`context_limit`) is not sampled: the trajectory ends there,
    ``context_full`` set."""
    limit = max_context if max_context is not None else context_limit(model)
    trajs = []
    for row, msgs, gid, buf in starts:
        ids, _ = D.encode_chat(tok, msgs, add_generation_prompt=True)
        trajs.append(Trajectory(row=row, group=gid, prompt_messages=msgs, ids=ids, mask=[0] * len(ids),
                                logp_rollout=[0.0] * len(ids), from_buffer=buf))
    active = list(range(len(trajs)))
    for t in range(turns):
        if not active:
            break
        outs = sample(model, tok, [trajs[i].ids for i in active], max_new_tokens=max_new_tokens, temperature=temperature)
        texts = [decode_response(tok, o.ids) for o in outs]
        scores = reward_fn([(trajs[i].row, txt) for i, txt in zip(active, texts)])
        still = []
        for i, o, txt, s in zip(active, outs, texts, scores):
            tr = trajs[i]
            tr.ids += o.ids
            tr.mask += [1] * len(o.ids)
            tr.logp_rollout += o.logps
            tr.responses.append(txt)
            tr.rewards.append(float(s.reward))
            tr.correct.append(bool(s.correct))
            tr.feedbacks.append(s.feedback)
            if not s.correct and t + 1 < turns:
                suffix = D.turn_suffix(tok, repair_instruction(s.feedback), o.closed)
                if limit is not None and len(tr.ids) + len(suffix) + max_new_tokens > limit:
                    tr.context_full = True
                    continue
                tr.ids += suffix
                tr.mask += [0] * len(suffix)
                tr.logp_rollout += [0.0] * len(suffix)
                still.append(i)
        active = still
    return trajs
