"""Multi-turn repair: verifier feedback becomes the next user turn, up to N turns, stopping at success.

``run_dialogues`` walks tasks in chunks. For every task of a chunk it asks the generator for
``samples_per_task`` first-turn responses (one dialogue each), verifies every open dialogue's latest
candidate of the chunk in one ``verifier.api.verify_batch`` call (compile and execution overlap
across tasks), appends the feedback of each failure as a user turn, asks for the next response,
and repeats until each dialogue is solved or has ``max_turns`` turns. Then, per task, it calls
``on_task_done(result)`` with the task's candidates, verdicts and dialogues, so a killed run loses
at most the chunk in flight.

Records: each turn is one Candidate (turn = 0-based index, parent_id = the previous turn's
candidate, dialogue_id, prompt = the user turn it answers, the raw response, the reasoning, the
teacher's injected_bug) and one Verdict; each sample is one Dialogue with every message, one
TurnVerdict per turn, first_turn_reward, final_reward (the last turn's), num_turns and solved.
Candidates are built by synth.generate.generators.make_candidate (one extractor, one id rule); dialogue ids
are content hashes of (task, backend, generator, sample index), so re-running a task yields the
same ids (the store drops duplicates).

Repair tasks: when every first-turn sample of a task fails, the task also yields one
feedback-conditioned repair task: a dict with the original prompt, the best failing response and
the verifier's feedback as the final user turn (``messages``), plus task_id, backend, candidate_id,
status and reward. They travel on ``result.repair_tasks`` and their count is in the stats; the
repair stage (orchestrator/stages.py) also writes them to ``<run_dir>/repair_tasks.jsonl``.

A "solved" dialogue is one whose last verdict is ``correct`` (the reward's top tiers also need
speed; correctness is what ends the repair loop).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kernelmill.schema import Candidate, Dialogue, Message, Task, TurnVerdict, Verdict, content_hash
from synth.generate.generators import dialogue_id_for, is_declined, make_candidate
from synth.generate.prompts import build_prompt, build_repair_turn, reasoning_of_response
from synth.generate.reasoning import trace_for


@dataclass
class TaskResult:
    task: Task
    candidates: list[Candidate] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    dialogues: list[Dialogue] = field(default_factory=list)
    repair_tasks: list[dict] = field(default_factory=list)
    declined: int = 0


@dataclass
class _Open:
    """One dialogue in progress."""
    task: Task
    sample: int
    dialogue_id: str
    messages: list[Message]
    candidates: list[Candidate] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return bool(self.verdicts) and self.verdicts[-1].correct


def _candidate(d: _Open, response: str, generator, backend: str, reasoning: str) -> Candidate:
    # an LLM's own reasoning wins; the teacher's first turn gets the task's annotated trace
    own = reasoning_of_response(response)
    use_own = getattr(generator, "is_llm", False) or d.candidates
    return make_candidate(d.task.task_id, backend, generator, response, dialogue_id=d.dialogue_id,
                          turn=len(d.candidates), parent_id=d.candidates[-1].candidate_id if d.candidates else None,
                          prompt=d.messages[-1].content, reasoning=(own or reasoning) if use_own else reasoning)


def _verify(items: list[tuple[Task, Candidate]], verify_config) -> list[Verdict]:
    # verifier.api imports torch (about 2 s): kept out of the import of the stage list and the CLI
    from verifier.api import verify_batch

    verdicts = verify_batch(items, config=verify_config)
    for (task, cand), v in zip(items, verdicts):
        v.task_id = v.task_id or task.task_id
        v.backend = v.backend or cand.backend
    return verdicts


def _dialogue(d: _Open, backend: str, generator) -> Dialogue:
    tv = [TurnVerdict(candidate_id=v.candidate_id, stage_reached=v.stage_reached, status=v.status,
                      correct=v.correct, reward=v.reward, speedup_eager=v.speedup_eager) for v in d.verdicts]
    return Dialogue(dialogue_id=d.dialogue_id, task_id=d.task.task_id, backend=backend, generator=generator.name,
                    messages=list(d.messages), turn_verdicts=tv,
                    first_turn_reward=d.verdicts[0].reward if d.verdicts else 0.0,
                    final_reward=d.verdicts[-1].reward if d.verdicts else 0.0,
                    num_turns=len(d.verdicts), solved=d.done)


def _repair_task(task: Task, backend: str, opened: list[_Open]) -> dict:
    best = max(opened, key=lambda d: d.verdicts[0].reward)
    first_prompt = best.messages[:2]
    response = best.candidates[0].response
    fb = build_repair_turn(best.verdicts[0], backend)
    msgs = first_prompt + [Message("assistant", response), fb]
    return {"repair_task_id": "r" + content_hash(task.task_id, backend, best.candidates[0].candidate_id),
            "task_id": task.task_id, "backend": backend, "candidate_id": best.candidates[0].candidate_id,
            "status": best.verdicts[0].status, "reward": best.verdicts[0].reward,
            "feedback": best.verdicts[0].feedback,
            "messages": [{"role": m.role, "content": m.content} for m in msgs]}


def run_dialogues(tasks: list[Task], generator, *, backend: str, samples_per_task: int, max_turns: int,
                  verify_config, on_task_done=None, task_batch: int = 4) -> dict:
    """Generate, verify and repair; see the module docstring for what is produced and guaranteed.

    Returns stats: tasks, dialogues, turns, solved, solved_first_turn, repaired (solved after turn 1),
    repaired_at_turn ({k: share of dialogues solved at turn k}), declined (teacher samples without a
    candidate), repair_tasks (count)."""
    if samples_per_task < 1 or max_turns < 1:
        raise ValueError("samples_per_task and max_turns must be at least 1")
    stats = {"tasks": 0, "dialogues": 0, "turns": 0, "solved": 0, "solved_first_turn": 0, "repaired": 0,
             "declined": 0, "repair_tasks": 0}
    solved_at: dict[int, int] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, int(getattr(generator, "concurrency", 1))))
    try:
        for start in range(0, len(tasks), max(1, task_batch)):
            chunk = tasks[start:start + task_batch]
            results = {t.task_id: TaskResult(task=t) for t in chunk}
            traces = dict(zip([t.task_id for t in chunk],
                              pool.map(lambda t: trace_for(t, backend, generator), chunk)))
            prompts = [build_prompt(t, backend) for t in chunk]
            firsts = list(pool.map(lambda p: generator.generate(p, samples_per_task), prompts))
            opened: list[_Open] = []
            for t, prompt, responses in zip(chunk, prompts, firsts):
                for i, resp in enumerate(responses):
                    if is_declined(generator, resp):
                        results[t.task_id].declined += 1
                        continue
                    did = dialogue_id_for(t.task_id, backend, generator.name, i)
                    d = _Open(task=t, sample=i, dialogue_id=did, messages=list(prompt))
                    d.candidates.append(_candidate(d, resp, generator, backend, traces[t.task_id]))
                    d.messages.append(Message("assistant", resp))
                    opened.append(d)
            active = list(opened)
            for turn in range(1, max_turns + 1):
                if not active:
                    break
                verdicts = _verify([(d.task, d.candidates[-1]) for d in active], verify_config)
                for d, v in zip(active, verdicts):
                    d.verdicts.append(v)
                    if v.correct:
                        solved_at[turn] = solved_at.get(turn, 0) + 1
                failing = [d for d in active if not d.done]
                if turn == max_turns or not failing:
                    break
                for d in failing:
                    d.messages.append(build_repair_turn(d.verdicts[-1], backend))
                nexts = list(pool.map(lambda d: generator.generate(d.messages, 1)[0], failing))
                active = []
                for d, resp in zip(failing, nexts):
                    if is_declined(generator, resp):
                        d.messages.pop()  # the dialogue ends on its last verified turn
                        continue
                    d.candidates.append(_candidate(d, resp, generator, backend, traces[d.task.task_id]))
                    d.messages.append(Message("assistant", resp))
                    active.append(d)
            for d in opened:
                d.candidates = d.candidates[:len(d.verdicts)]  # an unverified last response is not kept
                if len(d.messages) > 2 + 2 * len(d.verdicts) - 1:
                    d.messages = d.messages[:2 + 2 * len(d.verdicts) - 1]
                r = results[d.task.task_id]
                r.candidates += d.candidates
                r.verdicts += d.verdicts
                r.dialogues.append(_dialogue(d, backend, generator))
            for t in chunk:
                r = results[t.task_id]
                mine = [d for d in opened if d.task.task_id == t.task_id]
                if mine and not any(d.verdicts[0].correct for d in mine):
                    r.repair_tasks.append(_repair_task(t, backend, mine))
                stats["tasks"] += 1
                stats["dialogues"] += len(r.dialogues)
                stats["turns"] += sum(dl.num_turns for dl in r.dialogues)
                stats["solved"] += sum(dl.solved for dl in r.dialogues)
                stats["solved_first_turn"] += sum(dl.solved and dl.num_turns == 1 for dl in r.dialogues)
                stats["declined"] += r.declined
                stats["repair_tasks"] += len(r.repair_tasks)
                if on_task_done is not None:
                    on_task_done(r)
    finally:
        pool.shutdown(wait=True)
    stats["repaired"] = stats["solved"] - stats["solved_first_turn"]
    n = stats["dialogues"]
    stats["repaired_at_turn"] = {k: round(solved_at.get(k, 0) / n, 4) if n else 0.0 for k in range(1, max_turns + 1)}
    return stats
