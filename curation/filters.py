"""Rejection filtering: which run records become sft, rft and rl rows, and why the rest do not.

Each function takes plain records (kernelmill.schema) and returns the corpus rows it keeps plus a ``Counter`` of
removed items by reason, so the corpus report can say what was removed and why. Near-duplicate removal is not done
here (it needs the code of every row): curation/corpus.py calls these first and then curation/dedup.py.

Corpus definitions:
- **sft** (:func:`filter_sft`): one row per dialogue that is ``solved`` and whose last turn verdict is correct
  (optionally with ``speedup_eager >= min_speedup``). ``messages`` is the whole multi-turn repair dialogue (system /
  user prompt, every assistant attempt, every verifier-feedback user turn), cut after the last assistant message so
  it ends on the correct answer: a repaired dialogue teaches repair (failed answer, the verifier's feedback as the
  next user turn, the fix). A correct first-turn answer whose dialogue has no record yet (generate and verify ran,
  repair did not) is a one-turn row with the same id its dialogue's row will have. A trainer that wants single-turn
  data takes the first user message and the last assistant message.
- **prompts** are the ones stored with the candidates (``Candidate.prompt``, the user turn the generate stage sent;
  the system message is the same for every task): a first-turn candidate stored without one stops the curation with
  an error rather than being given a rebuilt prompt. rft and rl rows carry the prompt as one user turn
  (:func:`render_prompt`: the system message folded in, as train/data.py reads it).
- **rft** (:func:`filter_rft`): correct verified candidates (any turn), best first (reward, then speedup); the
  per-task cap and near-copy removal are applied in corpus.py.
- **rl** (:func:`filter_rl`): one row per (task, backend) with the task's prompt, reference program, test spec
  (:func:`rl_test_spec`) and the generator's measured first-turn pass rate (first-turn samples are candidates
  without a parent); ``difficulty = 1 - pass_rate``. Tasks every sample solves (pass rate 1) or none solves (0) are
  left out unless ``keep_trivial``: they give a policy-gradient learner no signal.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

from kernelmill.errors import InputError
from kernelmill.schema import (Candidate, Dialogue, Message, RFTRow, RLRow, SFTRow, Task, TurnVerdict, Verdict,
                               content_hash)
from synth.generate.prompts import first_turn_messages

# Tolerances the verifier uses when a task does not name its own (DESIGN.md, stage 4).
DEFAULT_TOLERANCES = {"float32": {"atol": 1e-4, "rtol": 1e-4}, "float16": {"atol": 1e-2, "rtol": 1e-2},
                      "bfloat16": {"atol": 1e-2, "rtol": 1e-2}}


def _clean_dtype(dtype: str) -> str:
    return dtype.replace("torch.", "")


def final_turn(dialogue: Dialogue) -> TurnVerdict | None:
    return dialogue.turn_verdicts[-1] if dialogue.turn_verdicts else None


def trim_to_last_answer(messages: list[Message]) -> list[Message]:
    """The messages up to and including the last assistant message (drops trailing feedback)."""
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    return list(messages[:last + 1])


def assistant_text(messages: Iterable[Message]) -> str:
    """All assistant turns joined: what near-copy detection compares for sft rows."""
    return "\n".join(m.content for m in messages if m.role == "assistant")


def filter_sft(dialogues: Iterable[Dialogue], tasks: dict[str, Task], candidates: Iterable[Candidate] = (),
               verdicts: dict[str, Verdict] | None = None, *,
               min_speedup: float = 0.0) -> tuple[list[SFTRow], Counter]:
    """SFT rows from solved dialogues whose final answer is correct, and from correct first-turn
    candidates whose dialogue has no Dialogue record (generate + verify without repair); see the
    module docstring. Both kinds of row of one dialogue have the same id, so a first-turn answer
    curated before repair ran is the same row after it."""
    rows: list[SFTRow] = []
    removed: Counter = Counter()
    dialogues = list(dialogues)
    for d in dialogues:
        last = final_turn(d)
        task = tasks.get(d.task_id)
        if task is None:
            removed["unknown_task"] += 1
            continue
        if not d.solved:
            removed["unsolved"] += 1
            continue
        if last is None or not last.correct:
            removed["final_incorrect"] += 1
            continue
        if min_speedup > 0 and (last.speedup_eager is None or last.speedup_eager < min_speedup):
            removed["below_min_speedup"] += 1
            continue
        messages = trim_to_last_answer(d.messages)
        if not messages:
            removed["no_answer"] += 1
            continue
        rows.append(SFTRow(id="s" + content_hash(d.dialogue_id), task_id=d.task_id, messages=messages,
                           source=task.source, generator=d.generator, backend=d.backend, level=task.level,
                           num_turns=d.num_turns or len(d.turn_verdicts), final_reward=d.final_reward,
                           speedup_eager=last.speedup_eager, dialogue_id=d.dialogue_id))
    in_dialogues = {d.dialogue_id for d in dialogues}
    verdicts = verdicts or {}
    for c in candidates:
        if c.parent_id or c.turn or c.dialogue_id in in_dialogues:
            continue  # a repair turn, or a first turn its Dialogue record already stands for
        task, v = tasks.get(c.task_id), verdicts.get(c.candidate_id)
        if task is None or v is None or not v.correct or v.cheats:
            continue  # unknown, unverified or failed first turns are the rft / rl filters' to count
        if min_speedup > 0 and (v.speedup_eager is None or v.speedup_eager < min_speedup):
            removed["below_min_speedup"] += 1
            continue
        did = c.dialogue_id or c.candidate_id
        rows.append(SFTRow(id="s" + content_hash(did), task_id=c.task_id,
                           messages=first_turn_messages(stored_prompt(c)) + [Message("assistant", c.response or completion_text(c))],
                           source=task.source, generator=c.generator, backend=c.backend, level=task.level,
                           num_turns=1, final_reward=v.reward, speedup_eager=v.speedup_eager, dialogue_id=did))
    return rows, removed


def stored_prompt(c: Candidate) -> str:
    """The user turn a candidate answered, as stored by the stage that wrote it; a candidate stored
    without one is an error (its prompt is not rebuilt: the task or the prompt code may have changed)."""
    if not c.prompt:
        raise InputError(f"candidate {c.candidate_id} (task {c.task_id}, turn {c.turn})",
                         "was stored without the prompt it answers; curate uses the stored prompt and rebuilds none")
    return c.prompt


def completion_text(c: Candidate) -> str:
    """What the model said: its raw response when recorded, else the code as a fenced block."""
    return c.response if c.response.strip() else f"```python\n{c.code.strip()}\n```"


def filter_rft(candidates: Iterable[Candidate], verdicts: dict[str, Verdict], tasks: dict[str, Task],
               prompts: dict[tuple[str, str], str]) -> tuple[list[tuple[RFTRow, str]], Counter]:
    """Correct verified candidates as (RFTRow, code) pairs, best first within each task.

    Order: reward desc, speedup desc, candidate id (deterministic). Candidates with no verdict
    are not verified and are left out (reason ``unverified``)."""
    kept: list[tuple[RFTRow, str]] = []
    removed: Counter = Counter()
    for c in candidates:
        v = verdicts.get(c.candidate_id)
        task = tasks.get(c.task_id)
        if task is None:
            removed["unknown_task"] += 1
            continue
        if v is None:
            removed["unverified"] += 1
            continue
        if not v.correct or v.cheats:
            removed["incorrect"] += 1
            continue
        prompt = prompts.get((c.task_id, c.backend)) or stored_prompt(c)
        row = RFTRow(id="r" + content_hash(c.candidate_id), task_id=c.task_id, prompt=prompt,
                     completion=completion_text(c), candidate_id=c.candidate_id, generator=c.generator,
                     backend=c.backend, level=task.level, correct=True, stage_reached=v.stage_reached,
                     reward=v.reward, speedup_eager=v.speedup_eager)
        kept.append((row, c.code))
    kept.sort(key=lambda rc: (rc[0].task_id, -rc[0].reward, -(rc[0].speedup_eager or 0.0), rc[0].candidate_id))
    return kept, removed


def rl_test_spec(task: Task) -> dict:
    """What a verifier needs to score a sample for this task: inputs, outputs, tolerances."""
    ann = task.annotations or {}
    tol = ann.get("tolerances") or ann.get("tolerance")
    if not tol:
        dtypes = sorted({_clean_dtype(s.dtype) for s in task.output_specs} or {"float32"})
        tol = {d: DEFAULT_TOLERANCES.get(d, DEFAULT_TOLERANCES["float32"]) for d in dtypes}
    return {
        "input_specs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in task.input_specs],
        "output_specs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in task.output_specs],
        "init_inputs": task.init_inputs,
        "tolerances": tol,
    }


def first_turn_outcomes(candidates: Iterable[Candidate], verdicts: dict[str, Verdict]) -> dict[tuple[str, str], list[bool]]:
    """(task_id, backend) -> correctness of each verified first-turn sample (no parent)."""
    out: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for c in candidates:
        if c.parent_id:
            continue
        v = verdicts.get(c.candidate_id)
        if v is not None and v.judged:  # a verifier or task fault is no sample of the candidate: not in a pass rate
            out[(c.task_id, c.backend)].append(bool(v.correct and not v.cheats))
    return out


def filter_rl(tasks: dict[str, Task], candidates: Iterable[Candidate], verdicts: dict[str, Verdict],
              prompts: dict[tuple[str, str], str], *, keep_trivial: bool = False) -> tuple[list[RLRow], Counter]:
    """RL rows: tasks with test spec and measured pass rate (see module docstring)."""
    rows: list[RLRow] = []
    removed: Counter = Counter()
    outcomes = first_turn_outcomes(candidates, verdicts)
    sampled_tasks = {tid for tid, _ in outcomes}
    removed["no_samples"] = sum(1 for tid in tasks if tid not in sampled_tasks)
    for (tid, backend), results in sorted(outcomes.items()):
        task = tasks.get(tid)
        if task is None:
            removed["unknown_task"] += 1
            continue
        n = len(results)
        rate = sum(results) / n
        if not keep_trivial and rate in (0.0, 1.0):
            removed["none_pass" if rate == 0.0 else "all_pass"] += 1
            continue
        prompt = prompts.get((tid, backend), "")
        spec = rl_test_spec(task)
        rows.append(RLRow(id="l" + content_hash(tid, backend), task_id=tid, prompt=prompt,
                          reference_code=task.reference_code, test_spec=spec, level=task.level,
                          difficulty=round(1.0 - rate, 6), pass_rate=round(rate, 6), n_samples=n, backend=backend))
    return rows, +removed


def render_prompt(prompt) -> str:
    """A prompt as one string: a str as is; chat messages (system + user) joined by blank lines.

    Trainers put rft / rl prompts in a single user turn, so the system message's text is kept
    at the top rather than dropped."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join((m.content if hasattr(m, "content") else m["content"]) for m in prompt
                       if (m.role if hasattr(m, "role") else m["role"]) in ("system", "user"))


def prompt_map(candidates: Iterable[Candidate]) -> dict[tuple[str, str], str]:
    """(task_id, backend) -> the first-turn prompt the generator was sent, as one string (system and
    user, ``render_prompt``): the prompt stored on the task's first-turn candidates (the smallest
    candidate id's when two differ). A first-turn candidate without a stored prompt is an error."""
    out: dict[tuple[str, str], str] = {}
    for c in sorted(candidates, key=lambda c: c.candidate_id):
        if c.parent_id or c.turn:
            continue
        out.setdefault((c.task_id, c.backend), render_prompt(first_turn_messages(stored_prompt(c))))
    return out
