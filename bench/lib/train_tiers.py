"""Tier screening: which tiers of a tiered corpus (bench/lib/family_corpus.py) a model should be reinforced and
evaluated on, chosen from its own samples on tasks that are never evaluated.

    split = split_by_tier(held_rows, tier_of, screen_per_tier, eval_tasks)   per tier: screen / eval pool / rl pool
    screen = screen_tiers(model, tok, split.screen, reward_fn, samples, lo, hi, ...)
    split.eval_set(screen.chosen, n), split.rl_prompts(screen.chosen, screen.always)

RL learns only from groups whose answers differ, so the mix is the tiers where the model passes about half of its
samples (``lo`` to ``hi``), else the one nearest the band's middle. A screened task the model always solved is left
out of the RL prompts (its group would be all-pass). Evaluation tasks are disjoint from the screened ones, so the
choice uses no evaluation outcome. Deterministic: rows are taken in task-id order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


def choose_tiers(rates: dict[int, float], lo: float, hi: float) -> list[int]:
    """The tiers whose screening pass rate is in [lo, hi]; else the one nearest (lo + hi) / 2 (the harder
    one on a tie). Tiers with no rate (not screened) are never chosen."""
    inside = sorted(k for k, r in rates.items() if lo <= r <= hi)
    if inside or not rates:
        return inside
    mid = (lo + hi) / 2
    return [min(rates, key=lambda k: (abs(rates[k] - mid), -k))]


def round_robin(pools: list[list], n: int) -> list:
    """Up to ``n`` items taken from ``pools`` in turn (the first of each, then the second of each, ...)."""
    pools = [list(p) for p in pools]
    out: list = []
    while any(pools) and len(out) < n:
        for p in pools:
            if p and len(out) < n:
                out.append(p.pop(0))
    return out


@dataclass
class TierSplit:
    """Held-out rows per tier, in task-id order: the first ``screen_per_tier`` screened, the next ``eval_tasks``
    the evaluation pool, the rest RL prompts."""

    screen: dict[int, list[dict]]
    eval_pool: dict[int, list[dict]]
    rl_pool: dict[int, list[dict]]

    def eval_set(self, chosen: list[int], n: int) -> list[dict]:
        """``n`` evaluation tasks taken in turn from the chosen tiers."""
        return round_robin([self.eval_pool[k] for k in chosen], n)

    def rl_prompts(self, chosen: list[int], always: set[str]) -> list[dict]:
        """The chosen tiers' screened tasks the model did not always solve, then their unscreened RL pool."""
        return ([x for k in chosen for x in self.screen[k] if x["task_id"] not in always]
                + [x for k in chosen for x in self.rl_pool[k]])


def split_by_tier(rows: list[dict], tier_of: Callable[[dict], int], screen_per_tier: int, eval_tasks: int,
                  tiers=(1, 2, 3, 4)) -> TierSplit:
    """:class:`TierSplit` of held-out ``rows`` (each row's tier from ``tier_of``)."""
    held = {k: sorted((r for r in rows if tier_of(r) == k), key=lambda r: r["task_id"]) for k in tiers}
    a, b = screen_per_tier, screen_per_tier + eval_tasks
    return TierSplit({k: v[:a] for k, v in held.items()}, {k: v[a:b] for k, v in held.items()},
                     {k: v[b:] for k, v in held.items()})


@dataclass
class TierScreen:
    """What screening found: each screened tier's sample pass rate, the tiers chosen, the tasks always solved."""

    rates: dict[int, float] = field(default_factory=dict)
    chosen: list[int] = field(default_factory=list)
    always: set[str] = field(default_factory=set)


def screen_tiers(model, tok, screen: dict[int, list[dict]], reward_fn, samples: int, lo: float, hi: float, *,
                 temperature: float, max_new_tokens: int, batch: int) -> TierScreen:
    """Sample ``samples`` answers of ``model`` for every screened task (train.evaluate.evaluate_rows, not greedy),
    score them with ``reward_fn``, and choose the tiers (:func:`choose_tiers` over [lo, hi])."""
    from train.evaluate import evaluate_rows

    pool = [x for k in sorted(screen) for x in screen[k]]
    res = evaluate_rows(model, tok, pool, reward_fn, n=samples, greedy=False, temperature=temperature,
                        max_new_tokens=max_new_tokens, batch=batch)
    per = {p["task_id"]: p["correct"] for p in res["per_task"]}
    rates = {}
    for k in sorted(screen):
        got = [per[x["task_id"]] for x in screen[k] if x["task_id"] in per]
        if got:
            rates[k] = sum(got) / (len(got) * samples)
    return TierScreen(rates, choose_tiers(rates, lo, hi), {tid for tid, c in per.items() if c >= samples})
