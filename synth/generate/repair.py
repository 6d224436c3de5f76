"""Multi-turn repair over stored dialogues: verifier feedback becomes the next user turn, up to N turns.

The generate stage opens one dialogue per first-turn sample (a Candidate with turn 0 and a ``dialogue_id``); the
verify stage judges it. ``repair_dialogues`` continues every dialogue whose latest turn failed: it rebuilds the chat
from the stored candidates (``dialogue_messages``: the system message, each candidate's stored ``prompt`` as a user
turn, its ``response`` as the assistant turn), appends the feedback of the latest verdict (``build_repair_turn``),
asks the same generator for one response, turns it into a Candidate with ``make_candidate`` (turn k, parent = the
previous turn), and hands the new candidates of a round to ``verify``: the caller's verification function, in the
pipeline the verify stage's own. It repeats until each dialogue is solved, has ``max_turns`` turns, or the generator
declines; then the Dialogue record goes to ``on_closed``. Nothing here samples a first turn.

Records: each turn is one Candidate (turn = 0-based index, parent_id = the previous turn's candidate, dialogue_id,
prompt = the user turn it answers, the raw response, the reasoning) and one Verdict; each dialogue is one Dialogue
(``make_dialogue``) with every message, one TurnVerdict per turn, first_turn_reward, final_reward (the last turn's),
num_turns and solved. Dialogue ids are the generate stage's (``dialogue_id_for``), so re-running yields the same ids
(the store drops copies).

Repair tasks (``repair_task``): when every first-turn sample of a task failed, the task also yields one
feedback-conditioned repair task: the original prompt, the best failing response (highest reward) and the verifier's
feedback as the final user turn (``messages``), plus repair_task_id, task_id, backend, candidate_id, status, reward
and feedback (the repair stage writes them to ``<run_dir>/repair_tasks.jsonl``).

A "solved" dialogue is one whose last verdict is ``correct`` (the reward's top tiers also need speed; correctness is
what ends the repair loop).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

from kernelmill.schema import Candidate, Dialogue, Message, Task, TurnVerdict, Verdict, content_hash
from synth.generate.generators import is_declined, make_candidate
from synth.generate.prompts import build_repair_turn, first_turn_messages
from synth.generate.reasoning import template_trace

# (pairs, done) -> candidate id -> verdict; done(n) says that n of the pairs have their verdict so far (any thread)
VerifyFn = Callable[[list[tuple[Task, Candidate]], Callable[[int], None]], dict[str, Verdict]]


def dialogue_chains(candidates: Iterable[Candidate], *, backend: str, generator: str) -> dict[str, list[Candidate]]:
    """dialogue_id -> its candidates in turn order, for the dialogues this generator opened on this
    backend (a chain without its first turn is left out)."""
    chains: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.dialogue_id and c.backend == backend and c.generator == generator:
            chains.setdefault(c.dialogue_id, []).append(c)
    out = {}
    for did, chain in chains.items():
        chain.sort(key=lambda c: c.turn)
        if chain[0].turn == 0 and [c.turn for c in chain] == list(range(len(chain))):
            out[did] = chain
    return out


def dialogue_messages(chain: list[Candidate]) -> list[Message]:
    """The chat of a dialogue, from what is stored: system, then per turn the user turn it answered
    (its stored prompt) and the response. A turn stored without its prompt is an error."""
    for c in chain:
        if not c.prompt:
            raise ValueError(f"candidate {c.candidate_id} (turn {c.turn}) was stored without the prompt it answers")
    messages = first_turn_messages(chain[0].prompt)
    messages.append(Message("assistant", chain[0].response))
    for c in chain[1:]:
        messages += [Message("user", c.prompt), Message("assistant", c.response)]
    return messages


def make_dialogue(chain: list[Candidate], verdicts: dict[str, Verdict]) -> Dialogue:
    """The Dialogue record of a chain whose every turn has a verdict."""
    vs = [verdicts[c.candidate_id] for c in chain]
    tv = [TurnVerdict(candidate_id=c.candidate_id, stage_reached=v.stage_reached, status=v.status,
                      correct=v.correct, reward=v.reward, speedup_eager=v.speedup_eager) for c, v in zip(chain, vs)]
    first = chain[0]
    return Dialogue(dialogue_id=first.dialogue_id, task_id=first.task_id, backend=first.backend,
                    generator=first.generator, messages=dialogue_messages(chain), turn_verdicts=tv,
                    first_turn_reward=vs[0].reward, final_reward=vs[-1].reward, num_turns=len(vs),
                    solved=bool(vs[-1].correct))


def repair_task(chains: list[list[Candidate]], verdicts: dict[str, Verdict], backend: str) -> dict:
    """The feedback-conditioned repair task of a task whose first-turn samples all failed."""
    best = max(chains, key=lambda ch: verdicts[ch[0].candidate_id].reward)
    c0, v0 = best[0], verdicts[best[0].candidate_id]
    msgs = first_turn_messages(c0.prompt) + [Message("assistant", c0.response), build_repair_turn(v0, backend)]
    return {"repair_task_id": "r" + content_hash(c0.task_id, backend, c0.candidate_id),
            "task_id": c0.task_id, "backend": backend, "candidate_id": c0.candidate_id,
            "status": v0.status, "reward": v0.reward, "feedback": v0.feedback,
            "messages": [{"role": m.role, "content": m.content} for m in msgs]}


def repair_dialogues(chains: dict[str, list[Candidate]], tasks: dict[str, Task], generator, *, backend: str,
                     max_turns: int, verdicts: dict[str, Verdict], verify: VerifyFn,
                     save_candidates: Callable[[list[Candidate]], None],
                     on_closed: Callable[[list[Dialogue]], None],
                     on_first_turns: Callable[[list[dict]], None] | None = None,
                     progress: Callable[[int, int], None] | None = None) -> dict:
    """Continue ``chains`` (see the module docstring); ``verdicts`` holds the stored verdicts and
    receives the new ones. Returns stats: dialogues, turns, solved, solved_first_turn, repaired
    (solved after turn 1), repaired_at_turn ({k: share of dialogues solved at turn k}), new_turns,
    declined (repair answers the teacher could not write), repair_tasks.

    ``progress(done, total)`` counts turns verified here: ``done`` grows by one as each verdict arrives
    (through ``verify``'s ``done``), ``total`` is ``done`` plus the turns still possible (those being
    verified and, per open dialogue, the turns up to ``max_turns``), so it shrinks as dialogues close
    early and equals ``done`` at the end."""
    if max_turns < 1:
        raise ValueError("max_turns must be at least 1")
    chains = {did: list(ch) for did, ch in chains.items() if ch[0].task_id in tasks}
    stats = {"dialogues": len(chains), "turns": 0, "solved": 0, "solved_first_turn": 0, "repaired": 0,
             "new_turns": 0, "declined": 0, "repair_tasks": 0}
    closed: set[str] = set()
    pool = ThreadPoolExecutor(max_workers=max(1, generator.concurrency))
    turns = {"verified": 0, "batch": 0, "batch_done": 0}  # verified before this batch; this batch's size, done
    lock = threading.Lock()

    def report() -> None:
        if progress is None:
            return
        with lock:  # verify may call back from its own threads; the calls stay in order
            done = turns["verified"] + turns["batch_done"]
            possible = sum(max_turns - len(ch) for d, ch in chains.items() if d not in closed)
            progress(done, done + turns["batch"] - turns["batch_done"] + possible)

    def batch_done(n: int) -> None:
        with lock:
            turns["batch_done"] = max(turns["batch_done"], min(n, turns["batch"]))
        report()

    def judge(cands: list[Candidate]) -> None:
        todo = [(tasks[c.task_id], c) for c in cands if c.candidate_id not in verdicts]
        if todo:
            with lock:
                turns["batch"], turns["batch_done"] = len(todo), 0
            report()
            verdicts.update(verify(todo, batch_done))
            with lock:
                turns["verified"] += len(todo)
                turns["batch"] = turns["batch_done"] = 0
        missing = [c.candidate_id for c in cands if c.candidate_id not in verdicts]
        if missing:
            raise RuntimeError(f"the verification function returned no verdict for {missing}")

    def close(dids: list[str]) -> None:
        closed.update(dids)
        if dids:
            on_closed([make_dialogue(chains[d], verdicts) for d in dids])
        report()

    try:
        judge([ch[-1] for ch in chains.values()])  # first turns the verify stage has not judged yet
        if on_first_turns is not None:
            by_task: dict[str, list[list[Candidate]]] = {}
            for ch in chains.values():
                by_task.setdefault(ch[0].task_id, []).append(ch)
            failed = [repair_task(group, verdicts, backend) for tid, group in sorted(by_task.items())
                      if not any(verdicts[ch[0].candidate_id].correct for ch in group)]
            stats["repair_tasks"] = len(failed)
            on_first_turns(failed)
        while True:
            open_ = [d for d, ch in chains.items()
                     if d not in closed and not verdicts[ch[-1].candidate_id].correct and len(ch) < max_turns]
            close(sorted(d for d in chains if d not in closed and d not in open_))
            if not open_:
                break
            asks = []
            for d in open_:
                ch = chains[d]
                feedback = build_repair_turn(verdicts[ch[-1].candidate_id], backend)
                asks.append((d, feedback, dialogue_messages(ch) + [feedback]))
            answers = list(pool.map(lambda a: generator.generate(a[2], 1)[0], asks))
            new, ended = [], []
            for (d, feedback, _), response in zip(asks, answers):
                ch = chains[d]
                if is_declined(generator, response):
                    stats["declined"] += 1
                    ended.append(d)  # the dialogue ends on its last verified turn
                    continue
                task = tasks[ch[0].task_id]
                cand = make_candidate(task.task_id, backend, generator, response, dialogue_id=d, turn=len(ch),
                                      parent_id=ch[-1].candidate_id, prompt=feedback.content)
                cand.reasoning = cand.reasoning or template_trace(task, backend)
                ch.append(cand)
                new.append(cand)
            close(sorted(ended))
            if new:
                save_candidates(new)
                stats["new_turns"] += len(new)
                judge(new)
    finally:
        pool.shutdown(wait=True)
    solved_at: dict[int, int] = {}
    for ch in chains.values():
        stats["turns"] += len(ch)
        if verdicts[ch[-1].candidate_id].correct:
            stats["solved"] += 1
            solved_at[len(ch)] = solved_at.get(len(ch), 0) + 1
    stats["solved_first_turn"] = solved_at.get(1, 0)
    stats["repaired"] = stats["solved"] - stats["solved_first_turn"]
    n = stats["dialogues"]
    stats["repaired_at_turn"] = {k: round(solved_at.get(k, 0) / n, 4) if n else 0.0 for k in range(1, max_turns + 1)}
    return stats
