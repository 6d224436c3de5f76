"""Rewards from the verifier service (`kernelmill serve-verifier`) for TRL's GRPOTrainer and for kernelmill's own RL.

TRL calls a reward function once per generation batch as ``reward(prompts=..., completions=...,
completion_ids=..., **columns)`` where ``columns`` are the dataset's other columns, one value per
completion, plus ``trainer_state``, ``log_extra`` and ``log_metric`` (trl 1.16's GRPOTrainer). So a dataset
with a ``reference_code`` column (the rl corpus has one: ``datasets.load_dataset(run_dir, "rl")``), or a
``task_id`` column naming tasks the server already holds, is all it needs:

    from trl import GRPOConfig, GRPOTrainer
    from train.trl_reward import VerifierReward
    reward = VerifierReward("http://127.0.0.1:8770")
    GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=rl_rows, args=GRPOConfig(...)).train()

A completion is a string, or (a conversational dataset) a list of chat messages: the verifier reads the
content of the last assistant message (text parts joined). Each call is one request to the server,
whatever the batch holds; the reward is ``Verdict.reward`` (the verifier's hierarchical reward, README of
verifier/), and None for a verdict that is the verifier's or the task's fault (``verifier_error``,
``task_error``: no sample of the model), which TRL leaves out of the group's baseline. The verdict's status
goes to the completions table (``log_extra``) and the share of passes to the logged metrics
(``verifier/pass_rate``). A server that stays unreachable raises (the client retries first): a training step
without its rewards is not one to take.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kernelmill.errors import InputError
from kernelmill.schema import task_id_for
from verifier.client import VerifierClient, VerifyItem, VerifyResponse


def completion_text(completion: Any) -> str:
    """The answer text of a TRL completion: a string as it is; of chat messages, the last assistant message's
    content (a list of parts: their text joined), else every message's content joined."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if not isinstance(completion, (list, tuple)):
        raise InputError("completions", "expected a string or a list of chat messages, got "
                                        f"{type(completion).__name__}")
    msgs = [m for m in completion if isinstance(m, dict)]
    mine = [m for m in msgs if m.get("role") == "assistant"]
    return _content(mine[-1]) if mine else "\n".join(_content(m) for m in msgs)


def _content(message: dict) -> str:
    c = message.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)
    return "" if c is None else str(c)


class VerifierReward:
    """A GRPOTrainer reward function backed by the verifier service. ``history`` keeps every response, in
    call order (verdicts in completion order)."""

    def __init__(self, client: VerifierClient | str, *, backend: str = "", reference_column: str = "reference_code",
                 task_id_column: str = "task_id", name: str = "kernelmill_verifier"):
        self.client = VerifierClient(client) if isinstance(client, str) else client
        self.backend = backend
        self.reference_column = reference_column
        self.task_id_column = task_id_column
        self.__name__ = name  # TRL names the reward's logged metrics after it: rewards/<name>/mean
        self.history: list[VerifyResponse] = []

    def __call__(self, prompts: Sequence | None = None, completions: Sequence | None = None,
                 **kwargs) -> list[float | None]:
        if completions is None:
            raise InputError("completions", "TRL passes the batch's completions; none were given")
        texts = [completion_text(c) for c in completions]
        refs = kwargs.get(self.reference_column)
        ids = kwargs.get(self.task_id_column)
        if refs is None and ids is None:
            raise InputError(f"dataset columns {self.reference_column!r} / {self.task_id_column!r}",
                             "the dataset needs one of them (the task program, or a task id the server knows)")
        for col, values in ((self.reference_column, refs), (self.task_id_column, ids)):
            if values is not None and len(values) != len(texts):
                raise InputError(f"dataset column {col!r}", f"{len(values)} values for {len(texts)} completions")
        tasks: dict[str, str] = {}
        items = []
        for i, text in enumerate(texts):
            if refs is not None and refs[i]:
                tid = task_id_for(refs[i])
                tasks[tid] = refs[i]  # each program once per request, however many completions it has
            else:
                tid = str(ids[i]) if ids is not None else ""
            items.append(VerifyItem(completion=text, task_id=tid))
        response = self.client.verify(items, tasks=tasks, backend=self.backend)
        self.history.append(response)
        verdicts = response.verdicts
        if callable(kwargs.get("log_extra")):
            kwargs["log_extra"]("verifier_status", [v.status for v in verdicts])
        if callable(kwargs.get("log_metric")):
            kwargs["log_metric"]("verifier/pass_rate", sum(v.correct for v in verdicts) / len(verdicts))
        return [float(v.reward) if v.judged else None for v in verdicts]


def service_reward_fn(client: VerifierClient | str, backend: str = "") -> Callable:
    """kernelmill's own RL reward (train.rollout.RewardFn: (rl row, response) pairs -> Score) from the service,
    so that the RL loop scores answers through the same server a TRL run uses. A verifier or task fault scores
    0.0 there, as ``verifier_reward_fn`` does."""
    from train.rollout import Score

    client = VerifierClient(client) if isinstance(client, str) else client

    def score(batch: list[tuple[dict, str]]) -> list[Score]:
        if not batch:
            return []
        tasks = {task_id_for(row["reference_code"]): row["reference_code"] for row, _ in batch}
        items = [VerifyItem(completion=resp, task_id=task_id_for(row["reference_code"])) for row, resp in batch]
        verdicts = client.verify(items, tasks=tasks, backend=backend).verdicts
        return [Score(float(v.reward) if v.judged else 0.0, bool(v.correct), v.feedback or "", v.stage_reached)
                for v in verdicts]

    return score
