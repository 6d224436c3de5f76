"""The training benchmark's corpus (CPU, beforehand): procedural task programs in tiers with the compact
teacher's answers, and the SFT subset each tier keeps. Used by bench/bench_train_gpu.py (``--make-corpus``
and every run) and tests/test_train_bench.py.

Imports: the standard library; kernelmill, synth and train inside the functions that write corpora (the GPU
run imports this module before it has chosen what to load).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

PROMPT = ("Write `ModelNew` for the {backend} backend: custom kernels through load_inline, no PyTorch compute.\n"
          "```python\n{ref}```")
FAMILIES_FILE = "families.json"  # the name bench.common.write_family_corpus writes


def task_level(t) -> int:
    """KernelBench level of a family task: 1 a single elementwise chain, 2 a fused row op, 3 a row
    normalisation or logsumexp (a block's worth of passes)."""
    return 1 if t.kind == "ew" else 3 if t.tier == 4 else 2


def make_corpus(out: Path, n_tasks: int, backend: str, seed: int, heldout_frac: float, check: int,
                tier_shares: str) -> None:
    from bench.common import write_family_corpus
    from kernelmill.schema import Message, RLRow, SFTRow, task_id_for
    from synth.teacher.compact import answer
    from synth.teacher.task_families import generate_mix, parse_shares, task_code
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
    if check:
        check_teacher_cpu(tasks, check)


def check_teacher_cpu(tasks, n: int) -> None:
    """Verify the cpu twins of ``n`` tasks (spread over tiers and kinds) with the real cpu verifier."""
    from synth.teacher.compact import cpu_answer
    from synth.teacher.task_families import task_code
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


def read_families(corpus: Path) -> dict[str, dict]:
    """task_id -> {"sig", "tier"}; a corpus made before tiers (values are signatures) is all tier 1."""
    f = corpus / FAMILIES_FILE
    raw = json.loads(f.read_text()) if f.is_file() else {}
    return {k: (v if isinstance(v, dict) else {"sig": v, "tier": 1}) for k, v in raw.items()}


def keep_share(task_id: str, share: float) -> bool:
    """Deterministic subsample by task id (independent of the held-out split's hash)."""
    return share >= 1.0 or int(hashlib.sha256(f"sft-keep:{task_id}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


def write_sft_corpus(corpus: Path, out: Path, fams: dict, shares: dict[int, float]) -> dict[int, int]:
    """A copy of ``corpus`` whose sft table keeps ``shares[tier]`` of each tier's rows (rl table whole: the
    tokenizer reads its prompts). Returns the sft rows kept per tier."""
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
