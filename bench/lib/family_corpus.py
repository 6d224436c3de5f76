"""Procedural training corpora: task programs of bench/lib/task_families.py with the compact teacher's answers
(bench/lib/teacher_compact.py), for training a small model from scratch before it samples anything.

    make_tiered_corpus(out, n_tasks, backend, seed, tier_shares)   sft + rl tables over a mix of tiers 1-4
    make_prompted_corpus(out, n_tasks, backend, seed)              tasks + sft tables, prompts of the generate stage
    read_families(corpus) / write_sft_corpus(corpus, out, fams, shares)   each tier's SFT share kept
    read_corpus(corpus, backend) / write_training_corpus(out, tasks, answers, backend, extra)

Every corpus also holds ``families.json``: task_id -> {"sig": the op combination, "tier": 1-4}, which the tier
screening (bench/lib/train_tiers.py) and the held-out "unseen combination" count read. Tables are written with
kernelmill.store (Parquet under ``<corpus>/<table>/``), older Parquet files of the corpus replaced.

Guarantees: deterministic for the arguments; two task programs with one task_id stop the write (InputError).
Not guaranteed: that every answer passes the verifier on a GPU (``check_teacher_cpu`` verifies cpu twins here).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

from kernelmill.errors import InputError

FAMILIES_FILE = "families.json"
PROMPT = ("Write `ModelNew` for the {backend} backend: custom kernels through load_inline, no PyTorch compute.\n"
          "```python\n{ref}```")


def task_level(t) -> int:
    """KernelBench level of a family task: 1 a single elementwise chain, 2 a fused row op, 3 a row
    normalisation or logsumexp (a block's worth of passes)."""
    return 1 if t.kind == "ew" else 3 if t.tier == 4 else 2


def write_family_corpus(out: Path, tables: dict[str, list], fams: dict, n_tasks: int) -> int:
    """Each table's records under ``out`` (older Parquet files removed) and ``families.json``; returns the corpus's
    size in bytes. ``n_tasks`` programs that give fewer distinct task ids stop it."""
    from kernelmill import store

    if len(fams) != n_tasks:
        raise InputError(f"corpus {out}", f"{n_tasks - len(fams)} task programs share a task_id")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*/*.parquet"):
        old.unlink()
    for table, records in tables.items():
        store.write_records(out, table, records)
    (out / FAMILIES_FILE).write_text(json.dumps(fams, sort_keys=True, indent=0))
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


def make_tiered_corpus(out: Path, n_tasks: int, backend: str, seed: int, tier_shares: str,
                       heldout_frac: float = 0.1) -> list:
    """``n_tasks`` programs over the tier mix ``tier_shares`` ("1=0.4,2=0.2,..."), each an sft row (a one-line
    prompt, the teacher's answer) and an rl row; prints a summary (held-out count at ``heldout_frac``). Returns the
    FamilyTasks (for :func:`check_teacher_cpu`)."""
    from kernelmill.schema import Message, RLRow, SFTRow, task_id_for
    from bench.lib.teacher_compact import answer
    from bench.lib.task_families import generate_mix, parse_shares, task_code
    from train.data import is_heldout

    t0 = time.time()
    tasks = generate_mix(n_tasks, seed, parse_shares(tier_shares))
    sft, rl, fams = [], [], {}
    for t in tasks:
        ref = task_code(t)
        tid = task_id_for(ref)
        prompt = PROMPT.format(backend=backend, ref=ref)
        level = task_level(t)
        sft.append(SFTRow(id="s" + tid, task_id=tid, source="teacher", generator="teacher_compact", backend=backend,
                          level=level, num_turns=1, final_reward=1.0,
                          messages=[Message("user", prompt), Message("assistant", f"```python\n{answer(t, backend)}```")]))
        rl.append(RLRow(id="r" + tid, task_id=tid, prompt=prompt, reference_code=ref, test_spec={}, level=level,
                        difficulty=t.difficulty, pass_rate=1.0, n_samples=1, backend=backend))
        fams[tid] = {"sig": t.signature, "tier": t.tier}
    size = write_family_corpus(out, {"sft": sft, "rl": rl}, fams, len(tasks))
    held = sum(is_heldout(tid, heldout_frac) for tid in fams)
    per_tier = {k: sum(f["tier"] == k for f in fams.values()) for k in sorted({f["tier"] for f in fams.values()})}
    print(f"corpus {out}: {len(sft)} sft rows, {len(rl)} rl rows ({held} held out at frac {heldout_frac}), "
          f"tasks per tier {per_tier}, {len({f['sig'] for f in fams.values()})} op combinations, "
          f"{size / 1e6:.2f} MB, {time.time() - t0:.0f} s", flush=True)
    return tasks


def check_teacher_cpu(tasks, n: int) -> tuple[int, int]:
    """Verify the cpu twins of ``n`` tasks (round-robin over tiers and kinds) with the real cpu verifier; prints
    each failure; returns (correct, checked)."""
    from bench.lib.teacher_compact import cpu_answer
    from bench.lib.task_families import task_code
    from train.rollout import verifier_reward_fn

    by_kind: dict[tuple, list] = {}
    for t in tasks:
        by_kind.setdefault((t.tier, t.kind), []).append(t)
    # rounds over the tiers, each round taking the next kind of every tier
    order = sorted(by_kind, key=lambda k: (sorted(x[1] for x in by_kind if x[0] == k[0]).index(k[1]), k[0]))
    pick = []
    while len(pick) < n and any(by_kind.values()):
        for k in order:
            if by_kind[k] and len(pick) < n:
                pick.append(by_kind[k].pop(0))
    fn = verifier_reward_fn("cpu", {"trials": 5, "timing_trials": 0, "time_torch_compile": False})
    t0 = time.time()
    scores = fn([({"reference_code": task_code(t), "task_id": t.signature}, f"```python\n{cpu_answer(t)}```")
                 for t in pick])
    ok = sum(s.correct for s in scores)
    for t, s in zip(pick, scores):
        if not s.correct:
            print("teacher cpu twin FAILED", t.tier, t.signature, s.stage, s.feedback[:400], flush=True)
    print(f"teacher check (cpu verifier, cpu twins): {ok}/{len(pick)} correct, {time.time() - t0:.0f} s", flush=True)
    return ok, len(pick)


def read_families(corpus: Path) -> dict[str, dict]:
    """task_id -> {"sig", "tier"}; a corpus made before tiers (values are signatures) is all tier 1."""
    f = corpus / FAMILIES_FILE
    raw = json.loads(f.read_text()) if f.is_file() else {}
    return {k: (v if isinstance(v, dict) else {"sig": v, "tier": 1}) for k, v in raw.items()}


def keep_share(task_id: str, share: float) -> bool:
    """Deterministic subsample by task id (independent of the held-out split's hash)."""
    return share >= 1.0 or int(hashlib.sha256(f"sft-keep:{task_id}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


def write_sft_corpus(corpus: Path, out: Path, fams: dict, shares: dict[int, float]) -> dict[int, int]:
    """A copy of ``corpus`` at ``out`` (replaced) whose sft table keeps ``shares[tier]`` of each tier's rows (a tier
    not named keeps none; the rl table whole: the tokenizer reads its prompts). Returns sft rows kept per tier."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (out / "sft").mkdir(parents=True, exist_ok=True)
    (out / "rl").mkdir(parents=True, exist_ok=True)
    for old in out.glob("*/*.parquet"):
        old.unlink()
    sft = pa.concat_tables([pq.read_table(f) for f in sorted((corpus / "sft").glob("*.parquet"))])
    tier_of = [fams.get(t, {"tier": 1})["tier"] for t in sft.column("task_id").to_pylist()]
    keep = [keep_share(t, shares.get(k, 0.0)) for t, k in zip(sft.column("task_id").to_pylist(), tier_of)]
    pq.write_table(sft.filter(pa.array(keep)), out / "sft" / "part-0.parquet")
    for f in sorted((corpus / "rl").glob("*.parquet")):
        pq.write_table(pq.read_table(f), out / "rl" / f.name)
    return {k: sum(1 for t, kept in zip(tier_of, keep) if kept and t == k) for k in sorted(set(tier_of))}


# ---------------------------------------------------------------------------- tasks with the generate stage's prompts


def make_prompted_corpus(out: Path, n_tasks: int, backend: str, seed: int, heldout_frac: float = 0.1) -> None:
    """``n_tasks`` tier-1 programs as a tasks table (Task records, named family_<i>) and an sft table whose prompts
    are the generate stage's (synth.generate.prompts.build_prompt), then the teacher's answer."""
    from kernelmill.schema import Message, SFTRow, Task
    from synth.generate.prompts import build_prompt
    from bench.lib.teacher_compact import answer
    from bench.lib.task_families import generate_tasks, task_code
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
    """(tasks, task_id -> the teacher's answer) of a corpus made by :func:`make_prompted_corpus`; a corpus whose
    answers are for another backend is refused."""
    import pyarrow.parquet as pq

    from kernelmill import store

    tasks = store.read_records(corpus, "tasks")
    answers: dict[str, str] = {}
    for f in sorted((corpus / "sft").glob("*.parquet")):
        for r in pq.read_table(f, columns=["task_id", "backend", "messages"]).to_pylist():
            if r["backend"] != backend:
                raise InputError(f"corpus {corpus}", f"holds {r['backend']} answers; this run verifies on {backend}")
            answers[r["task_id"]] = r["messages"][-1]["content"]
    return [t for t in tasks if t.task_id in answers], answers


def write_training_corpus(out: Path, tasks: list, answers: dict[str, str], backend: str, extra=()) -> None:
    """The sft config a run trains on, at ``out`` (replaced): each task's prompt built now by the generate stage's
    own builder (a corpus made before a change to synth/generate/prompts.py still trains on what the generate
    stage will send), then the teacher's answer; plus ``extra`` rows (e.g. the repair warm-start dialogues)."""
    from kernelmill import store
    from kernelmill.schema import Message, SFTRow
    from synth.generate.prompts import build_prompt

    shutil.rmtree(out, ignore_errors=True)
    store.write_records(out, "sft", [
        SFTRow(id="s" + t.task_id, task_id=t.task_id, source="teacher", generator="teacher_compact", backend=backend,
               level=t.level, num_turns=1, final_reward=1.0,
               messages=build_prompt(t, backend) + [Message("assistant", answers[t.task_id])]) for t in tasks]
        + list(extra))
