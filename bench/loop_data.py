"""What the loop benchmark (bench/bench_loop_gpu.py) trains m0 on: the procedural corpus of task programs with the
compact teacher's answers (made here once, ``--make-corpus``), the SFT table built from it with the generate stage's own
prompts, and the two-turn repair dialogues (a teacher answer with a planted bug, judged by the verify stage; its
feedback turn; the fix)."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from bench.common import write_family_corpus


# ---------------------------------------------------------------------------- the corpus (made here, once)


def make_corpus(out: Path, n_tasks: int, backend: str, seed: int, heldout_frac: float) -> None:
    from kernelmill.schema import Message, SFTRow, Task
    from synth.generate.prompts import build_prompt
    from synth.teacher.compact import answer
    from synth.teacher.task_families import generate_tasks, task_code
    from train.data import is_heldout

    t0 = time.time()
    tasks, rows, fams = [], [], {}
    for i, ft in enumerate(generate_tasks(n_tasks, seed)):
        task = Task.from_code(task_code(ft), name=f"family_{i}", source="teacher", level=1 if ft.kind == "ew" else 2)
        msgs = build_prompt(task, backend) + [Message("assistant", f"```python\n{answer(ft, backend)}```")]
        rows.append(SFTRow(id="s" + task.task_id, task_id=task.task_id, messages=msgs, source="teacher",
                           generator="teacher_compact", backend=backend, level=task.level, num_turns=1,
                           final_reward=1.0))
        tasks.append(task)
        fams[task.task_id] = ft.signature
    size = write_family_corpus(out, {"tasks": tasks, "sft": rows}, fams, len(tasks))
    held = sum(is_heldout(t.task_id, heldout_frac) for t in tasks)
    print(f"corpus {out}: {len(tasks)} tasks and sft rows ({backend}), {held} held out at frac {heldout_frac}, "
          f"{len(set(fams.values()))} op combinations, {size / 1e6:.2f} MB, {time.time() - t0:.0f} s", flush=True)


def read_corpus(corpus: Path, backend: str) -> tuple[list, dict[str, str]]:
    """(tasks, task_id -> the teacher's answer) of a corpus made by --make-corpus."""
    import pyarrow.parquet as pq

    from kernelmill import store

    tasks = store.read_records(corpus, "tasks")
    answers: dict[str, str] = {}
    for f in sorted((corpus / "sft").glob("*.parquet")):
        for r in pq.read_table(f, columns=["task_id", "backend", "messages"]).to_pylist():
            if r["backend"] != backend:
                raise SystemExit(f"corpus {corpus} holds {r['backend']} answers; this run verifies on {backend}")
            answers[r["task_id"]] = r["messages"][-1]["content"]
    return [t for t in tasks if t.task_id in answers], answers


def write_training_corpus(out: Path, tasks: list, answers: dict[str, str], backend: str, extra=()) -> None:
    """The sft config the run trains on: each task's prompt built now by the generate stage's own
    builder (a corpus made before a change to synth/generate/prompts.py still trains on what the
    generate stage will send), then the teacher's answer; plus ``extra`` rows (the repair dialogues)."""
    from kernelmill import store
    from kernelmill.schema import Message, SFTRow
    from synth.generate.prompts import build_prompt

    shutil.rmtree(out, ignore_errors=True)
    store.write_records(out, "sft", [
        SFTRow(id="s" + t.task_id, task_id=t.task_id, source="teacher", generator="teacher_compact", backend=backend,
               level=t.level, num_turns=1, final_reward=1.0,
               messages=build_prompt(t, backend) + [Message("assistant", answers[t.task_id])]) for t in tasks]
        + list(extra))


# ---------------------------------------------------------------------------- repair dialogues for SFT

# Bugs planted in a teacher answer for the repair dialogues, each a mistake a kernel writer makes; the verifier
# decides whether it shows on the task (a dialogue is kept only when the answer failed)
_OP_LINE = re.compile(r"\n[ \t]+v = [^\n]*;")  # one op of the fused chain (the load line is "float v = ...")


def _drop_last_op(code: str) -> str:
    ops = list(_OP_LINE.finditer(code))
    return code[:ops[-1].start()] + code[ops[-1].end():] if ops else code


BUGS = {
    "dropped_op": _drop_last_op,  # one op of the chain forgotten
    "launch_floor": lambda c: re.sub(r"\(\((n|rows) \+ 255\) / 256\)", r"(\1 / 256)", c, count=1),  # grid rounded down
    "mean_divisor": lambda c: c.replace("acc / cols", "acc / rows", 1),  # the wrong extent
}


def plant_bug(answer: str, key: str) -> tuple[str, str]:
    """(bug name, the answer with it) for one of the BUGS that changes it, chosen by ``key``; ("", answer) if none."""
    import hashlib

    fits = [(name, bugged) for name, f in BUGS.items() if (bugged := f(answer)) != answer]
    if not fits:
        return "", answer
    return fits[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(fits)]


def repair_dialogues(work: Path, tasks: list, answers: dict[str, str], backend: str, n: int, settings) -> dict:
    """Two-turn SFT dialogues made by the pipeline's own parts: a teacher answer with a planted bug (plant_bug),
    judged by the verify stage; where it failed, the repair stage's feedback turn (build_repair_turn, what a
    repair round or Buffered Dynamic Retry sends) and the teacher's correct answer. Written to
    ``work/repair_sft`` (an sft table, carried with the state); returns counts."""
    from kernelmill import store
    from kernelmill.schema import Candidate, Message, SFTRow
    from orchestrator.stages import BY_NAME
    from synth.generate.prompts import build_prompt, build_repair_turn
    from verifier.extract import extract_code

    out, run = work / "repair_sft", work / "repair_run"
    picked, cands, bugs = sorted(tasks, key=lambda t: t.task_id)[:n], [], {}
    for t in picked:
        bug, response = plant_bug(answers[t.task_id], t.task_id)  # the answer as the model sees it: fenced code
        if bug:
            code = extract_code(response)
            cid = Candidate.make_id(t.task_id, backend, code)
            bugs[cid] = bug
            cands.append(Candidate(candidate_id=cid, task_id=t.task_id, backend=backend, generator="teacher_bug",
                                   code=code, response=response, turn=0, injected_bug=bug))
    shutil.rmtree(run, ignore_errors=True)
    store.write_records(run, "tasks", picked)
    store.write_records(run, "candidates", cands)
    BY_NAME["verify"].run(run, settings)
    by_task = {t.task_id: t for t in picked}
    rows, kept = [], {}
    for v in store.read_records(run, "verdicts"):
        if not v.judged or v.status == "pass":
            continue
        c = next(c for c in cands if c.candidate_id == v.candidate_id)
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
