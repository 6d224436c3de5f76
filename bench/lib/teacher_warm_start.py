"""The repair warm start: two-turn SFT dialogues that teach a model to repair before it ever samples a repair turn.

    repair_dialogues(work, tasks, answers, backend, n, verify) -> dict

For the first ``n`` tasks (task-id order) a compact teacher answer gets a planted bug (synth/teacher/bugs.py
``plant_bug``); the verify stage judges those candidates; every one that failed becomes a dialogue: the generate
stage's prompt, the bugged answer, the repair stage's feedback turn (``build_repair_turn``: what a repair round or
Buffered Dynamic Retry sends) and the teacher's correct answer. The dialogues are the sft table of ``work/repair_sft``
(kernelmill.store); a planted bug the verifier did not catch gives no dialogue.

``verify`` is the verify stage over a run directory (``orchestrator.stages.BY_NAME["verify"].run(run_dir,
settings)``, passed in so synth/ does not import the orchestrator); it must write that directory's verdicts table.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from synth.teacher.bugs import plant_bug

OUT, RUN = "repair_sft", "repair_run"  # under ``work``: the dialogues (kept), the verify run (removed after)


def bugged_candidates(tasks: list, answers: dict[str, str], backend: str) -> tuple[list, dict[str, str]]:
    """(candidates, candidate_id -> bug kind): each task's answer (``answers[task_id]``, fenced code as a model
    writes it) with the bug plant_bug chooses for its task id; a task no bug fits gets no candidate."""
    from kernelmill.schema import Candidate
    from verifier.front.extract import extract_code

    cands, bugs = [], {}
    for t in tasks:
        bug, response = plant_bug(answers[t.task_id], t.task_id)
        if not bug:
            continue
        code = extract_code(response)
        cid = Candidate.make_id(t.task_id, backend, code)
        bugs[cid] = bug
        cands.append(Candidate(candidate_id=cid, task_id=t.task_id, backend=backend, generator="teacher_bug",
                               code=code, response=response, turn=0, injected_bug=bug))
    return cands, bugs


def repair_dialogues(work: Path, tasks: list, answers: dict[str, str], backend: str, n: int,
                     verify: Callable[[Path], object]) -> dict:
    """The warm-start dialogues of the module docstring, written to ``work/repair_sft`` (replaced); returns counts:
    tasks, planted, failed_and_kept, by_bug (kind -> dialogues kept)."""
    from kernelmill import store
    from kernelmill.schema import Message, SFTRow
    from synth.generate.prompts import build_prompt, build_repair_turn

    out, run = work / OUT, work / RUN
    picked = sorted(tasks, key=lambda t: t.task_id)[:n]
    cands, bugs = bugged_candidates(picked, answers, backend)
    shutil.rmtree(run, ignore_errors=True)
    store.write_records(run, "tasks", picked)
    store.write_records(run, "candidates", cands)
    verify(run)
    by_task = {t.task_id: t for t in picked}
    by_id = {c.candidate_id: c for c in cands}
    rows, kept = [], {}
    for v in store.read_records(run, "verdicts"):
        if not v.judged or v.status == "pass":
            continue
        c = by_id[v.candidate_id]
        t = by_task[c.task_id]
        msgs = (build_prompt(t, backend) + [Message("assistant", c.response), build_repair_turn(v, backend),
                                             Message("assistant", answers[t.task_id])])
        rows.append(SFTRow(id="r" + c.candidate_id, task_id=t.task_id, source="teacher", generator="teacher_repair",
                           backend=backend, level=t.level, num_turns=2, final_reward=1.0, messages=msgs))
        kept[bugs[c.candidate_id]] = kept.get(bugs[c.candidate_id], 0) + 1
    shutil.rmtree(out, ignore_errors=True)
    if rows:
        store.write_records(out, "sft", rows)
    shutil.rmtree(run, ignore_errors=True)
    return {"tasks": len(picked), "planted": len(cands), "failed_and_kept": len(rows), "by_bug": kept}


def keep_only_dialogues(work: Path, state: dict, drop: tuple[str, ...]) -> dict:
    """Start ``work`` over but keep its warm-start dialogues (their verification is minutes of a device call):
    the directories ``drop`` go; returns the part of ``state`` that still holds (its ``repair_sft`` counts, with
    a note), {} when ``state`` has none."""
    import json

    for name in drop:
        shutil.rmtree(work / name, ignore_errors=True)
    kept = {k: state[k] for k in (OUT,) if k in state}
    if kept:
        kept["notes"] = [f"repair dialogues kept from an earlier state (--redo-sft): {json.dumps(kept[OUT])}"]
    return kept
