"""Rewards from the verifier service (`kernelmill serve-verifier`) for TRL's GRPOTrainer and for kernelmill's own RL.

TRL calls a reward function once per generation batch as ``reward(prompts=..., completions=..., completion_ids=...,
**columns)``, where ``columns`` are the dataset's other columns, one value per completion, plus TRL's own keywords
(``log_extra`` and ``log_metric`` among them). So a dataset with a ``reference_code`` column (the rl corpus has one:
``datasets.load_dataset(run_dir, "rl")``), or a ``task_id`` column naming tasks the server already holds, is all
:class:`VerifierReward` needs:

    from trl import GRPOConfig, GRPOTrainer
    from train.trl_reward import VerifierReward
    reward = VerifierReward("http://127.0.0.1:8770")
    GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=rl_rows, args=GRPOConfig(...)).train()

A completion is a string, or (a conversational dataset) a list of chat messages: the verifier reads the content of
the last assistant message (text parts joined: ``completion_text``). Each call is one request to the server,
whatever the batch holds (each reference program sent once); the reward is ``Verdict.reward`` (the verifier's
hierarchical reward), and None for a verdict that is the verifier's or the task's fault (``verifier_error``,
``task_error``: no sample of the model), which TRL leaves out of the group's baseline. The verdict's status goes to
the completions table (``log_extra``) and the share of passes to the logged metrics (``verifier/pass_rate``). A
missing column, or a column whose length is not the batch's, is an InputError. A server that stays unreachable
raises (the client retries first): a training step without its rewards is not one to take.

kernelmill's own RL (train/rl.py, the loop's RL rounds, `kernelmill train rl`) takes its rewards from the same
service when ``train.verifier_url`` names one (:func:`service_reward_fn`, picked by train/rollout.py
``rl_reward``): the same Candidates as the in-process reward, so the same verdicts. ``auto`` starts a server for the
RL run (:func:`local_verifier_service`) with the run's [verify] settings and stops it after; a named server is
checked first (:func:`check_service`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from kernelmill.errors import InputError
from kernelmill.schema import task_id_for
from verifier.serve.client import ServiceError, VerifierClient, VerifyItem, VerifyResponse
from verifier.common.config import VerifyConfig

if TYPE_CHECKING:
    from train.reward import Score

ROOT = Path(__file__).resolve().parent.parent  # `python -m flows.cli` runs from the checkout


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


def service_reward_fn(client: VerifierClient | str, backend: str = "", *,
                      setting: str = "train.verifier_url") -> Callable:
    """kernelmill's own RL reward (train.rollout.RewardFn: (rl row, response) pairs -> Score) from the service,
    so that the RL loop scores answers through the same server a TRL run uses. With ``backend`` named, the
    answers are the Candidates ``train.rollout.reward_pairs`` makes (the in-process reward's: same candidate ids,
    so the same Score and verdict row for the same answers, apart from what timing measures); with "" the
    server's backend and its content ids. ``Score.verdict`` is the server's whole verdict.

    A server that stays unreachable or refuses the batch (after the client's retries) raises InputError naming
    ``setting`` and the URL: a step without its rewards is not one to take, and never a silent 0 reward."""
    from train.reward import reward_pairs, score_of

    client = VerifierClient(client) if isinstance(client, str) else client

    def score(batch: list[tuple[dict, str]]) -> list[Score]:
        if not batch:
            return []
        if backend:
            pairs = reward_pairs(batch, backend)
            items = [VerifyItem(completion=resp, task_id=task.task_id, candidate_id=cand.candidate_id)
                     for (task, cand), (_, resp) in zip(pairs, batch)]
            tasks = {task.task_id: task.reference_code for task, _ in pairs}
        else:
            tasks = {task_id_for(row["reference_code"]): row["reference_code"] for row, _ in batch}
            items = [VerifyItem(completion=resp, task_id=task_id_for(row["reference_code"])) for row, resp in batch]
        try:
            verdicts = client.verify(items, tasks=tasks, backend=backend).verdicts
        except ServiceError as e:
            raise InputError(f"{setting} = {client.url}", f"the verifier service gave no rewards for a batch of "
                                                         f"{len(items)} answers: {e}") from None
        if len(verdicts) != len(items):
            raise InputError(f"{setting} = {client.url}", f"answered {len(verdicts)} verdicts for {len(items)} answers")
        return [score_of(v) for v in verdicts]

    return score


def check_service(client: VerifierClient | str, *, setting: str = "train.verifier_url") -> dict:
    """The service's /health, or InputError naming ``setting`` and the URL when it does not answer (after the
    client's retries): an RL run finds a missing service before it loads a model, not at its first reward."""
    client = VerifierClient(client) if isinstance(client, str) else client
    try:
        return client.health()
    except ServiceError as e:
        raise InputError(f"{setting} = {client.url}", f"the verifier service does not answer: {e}") from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_verifier_command(verify_cfg: VerifyConfig, *, port: int, backend: str, ray=None) -> list[str]:
    """The `kernelmill serve-verifier` command line that serves exactly ``verify_cfg`` (every [verify] key as a
    --set, so that the server judges as this process would) on ``ray`` (a verifier.entry.RayTarget) or locally."""
    cmd = [sys.executable, "-m", "flows.cli", "serve-verifier", "--host", "127.0.0.1", "--port", str(port),
           "--backend", backend or "auto"]
    if ray is not None:
        cmd += ["--ray", ray.address, "--set", f"flows.ray_workers={int(ray.workers)}"]
    for f in dataclasses.fields(VerifyConfig):
        cmd += ["--set", f"verify.{f.name}={json.dumps(getattr(verify_cfg, f.name))}"]  # JSON scalars are TOML
    return cmd


@contextlib.contextmanager
def local_verifier_service(verify_cfg: VerifyConfig, *, backend: str, log_path: str | Path, ray=None,
                           start_timeout_s: float = 300.0, setting: str = "train.verifier_url") -> Iterator[str]:
    """A `kernelmill serve-verifier` subprocess on a free 127.0.0.1 port for the ``with`` block; yields its URL
    once /health answers, and stops it (SIGTERM, then SIGKILL after 30 s) when the block ends, however it ends.
    Its output goes to ``log_path``. InputError naming ``setting`` when it exits or stays silent for
    ``start_timeout_s`` (importing torch and fastapi takes a while on a busy machine).

    Not guarded: the port is free when chosen, and another process could take it before the server binds it
    (the server then exits and this raises)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    with log_path.open("w") as out:
        proc = subprocess.Popen(serve_verifier_command(verify_cfg, port=port, backend=backend, ray=ray), cwd=ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for_health(proc, url, log_path, start_timeout_s, setting)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for_health(proc: subprocess.Popen, url: str, log_path: Path, timeout_s: float, setting: str) -> None:
    client = VerifierClient(url, timeout_s=5.0, retries=0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise InputError(f"{setting} = auto", f"serve-verifier exited with {proc.returncode} before answering "
                                                  f"at {url} (log {log_path}):\n{_tail(log_path)}")
        try:
            if client.health().get("status") == "ok":
                return
        except ServiceError:
            time.sleep(0.5)
    raise InputError(f"{setting} = auto", f"serve-verifier did not answer {url}/health in {timeout_s:.0f} s "
                                          f"(log {log_path}):\n{_tail(log_path)}")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
