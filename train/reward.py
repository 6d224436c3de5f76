"""The reward interface of RL: a reward function scores a batch of (RL row, model response) pairs
(``RewardFn``, ``Score``); the verifier's (Task, Candidate) pairs of such a batch (``reward_pairs``) and an
answer's Score from its verdict (``score_of``), shared by the in-process reward (train/rollout.py) and the
verifier service's (train/trl_reward.py), so an answer gets the same candidate id and Score either way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kernelmill.schema import Task, Verdict


@dataclass
class Score:
    reward: float
    correct: bool
    feedback: str = ""
    stage: str = ""
    verdict: Verdict | None = None  # the verifier's whole verdict (None for rewards that come from elsewhere)


RewardFn = Callable[[list[tuple[dict, str]]], list[Score]]


@dataclass(frozen=True)
class Policy:
    """The generator a policy's answers are recorded under: ``make_candidate`` reads its ``name`` and
    ``injected_bug`` (the trainer samples the answers itself; a policy plants no bug)."""

    name: str = "policy"

    def injected_bug(self, response: str) -> str:
        return ""


def _verify_config(verify_cfg):
    """A VerifyConfig from the [verify] settings (a VerifyConfig, a dict of its keys, or None for its defaults)."""
    from kernelmill.settings import parse_section

    if verify_cfg is None or isinstance(verify_cfg, dict):
        return parse_section("verify", verify_cfg or {}, "verify_cfg")
    return verify_cfg


def reward_pairs(items: list[tuple[dict, str]], backend: str) -> list:
    """The verifier's (Task, Candidate) pairs of a reward batch, each answer a Candidate made by ``make_candidate``
    as the generate stage makes them (the verifier's extraction, content-hash ids; sample ``n`` of a task in a
    batch opens dialogue ``dialogue_id_for(task, backend, "policy", n)``). The in-process reward and the service
    reward (train/trl_reward.py) send the same pairs, so an answer gets the same candidate id either way."""
    from synth.generate.generators import dialogue_id_for, make_candidate

    policy = Policy()
    pairs, seen = [], {}
    for row, resp in items:
        task = Task.from_code(row["reference_code"], name=row.get("task_id", "task"), source="teacher",
                              level=int(row.get("level", 0) or 0))
        n = seen[task.task_id] = seen.get(task.task_id, -1) + 1
        pairs.append((task, make_candidate(task.task_id, backend, policy, resp,
                                           dialogue_id=dialogue_id_for(task.task_id, backend, policy.name, n))))
    return pairs


def score_of(v: Verdict) -> Score:
    """An answer's Score from its verdict (a verifier or task fault has reward 0.0: verifier/judge/reward.py)."""
    return Score(float(v.reward), bool(v.correct), v.feedback or "", v.stage_reached, v)
