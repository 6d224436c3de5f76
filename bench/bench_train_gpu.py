"""GPU benchmark of the training stage: a small model trained from scratch on a procedural teacher
corpus, pass@1 on held-out task programs through the verifier, SFT alone vs SFT+RL vs RL with each
stabiliser (PrimeEcho, Buffered Dynamic Retry, MirrorPop) switched off.

Two steps:

    python bench/bench_train_gpu.py --make-corpus bench/data/train_corpus --tasks 8000      (here)
    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 bench/bench_train_gpu.py \\
        --corpus bench/data/train_corpus --budget-s 520                                     (GPU box)

The corpus: ``--tasks`` distinct programs from synth/teacher/task_families.py (elementwise chains, row
reductions, row softmax, random constants and shapes), each with the compact teacher's answer
(synth/teacher/compact.py) for ``--backend``: an sft row (user = instruction + task code,
assistant = the answer in a ```python block) and an rl row (prompt, reference_code). Making it
verifies the cpu twins of ``--check`` tasks with the real cpu verifier (the cuda and cpu answers
share their expression lines); the GPU run verifies cuda teacher answers on the GPU before
anything else and reports how many passed. Held-out tasks (train.data.is_heldout on task_id) are
never trained on in any stage: they are other programs (other op combinations, constants or
shapes); the report gives the share of evaluated held-out tasks whose op combination never occurs
in training, and pass@1 on those alone.

Every phase runs under an explicit time budget; a phase that does not fit is reported as "not run",
never estimated. Each result row is printed (JSON, flushed) and the markdown table rewritten as soon
as the row exists, so a run cut off still leaves its numbers in ``--results`` and $OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = ("Write `ModelNew` for the {backend} backend: custom kernels through load_inline, no PyTorch compute.\n"
          "```python\n{ref}```")
FAMILIES_FILE = "families.json"


def make_corpus(out: Path, n_tasks: int, backend: str, seed: int, heldout_frac: float, check: int) -> None:
    from kernelmill import store
    from kernelmill.schema import Message, RLRow, SFTRow, task_id_for
    from synth.teacher.compact import answer
    from synth.teacher.task_families import generate_tasks, task_code
    from train.data import is_heldout

    t0 = time.time()
    tasks = generate_tasks(n_tasks, seed)
    sft, rl, fams = [], [], {}
    for t in tasks:
        ref = task_code(t)
        tid = task_id_for(ref)
        prompt = PROMPT.format(backend=backend, ref=ref)
        level = 1 if t.kind == "ew" else 2
        sft.append(SFTRow(id="s" + tid, task_id=tid, source="teacher", generator="teacher_compact", backend=backend,
                          level=level, num_turns=1, final_reward=1.0,
                          messages=[Message("user", prompt), Message("assistant", f"```python\n{answer(t, backend)}```")]))
        rl.append(RLRow(id="r" + tid, task_id=tid, prompt=prompt, reference_code=ref, test_spec={}, level=level,
                        difficulty=float(len(t.ops)), pass_rate=1.0, n_samples=1, backend=backend))
        fams[tid] = t.signature
    if len(fams) != len(tasks):
        raise SystemExit(f"make-corpus: {len(tasks) - len(fams)} task programs share a task_id")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*/*.parquet"):
        old.unlink()
    store.write_records(out, "sft", sft)
    store.write_records(out, "rl", rl)
    (out / FAMILIES_FILE).write_text(json.dumps(fams, sort_keys=True, indent=0))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    held = sum(is_heldout(tid, heldout_frac) for tid in fams)
    print(f"corpus {out}: {len(sft)} sft rows, {len(rl)} rl rows ({held} held out at frac {heldout_frac}), "
          f"{len(set(fams.values()))} op combinations, {size / 1e6:.2f} MB, {time.time() - t0:.0f} s", flush=True)
    if check:
        check_teacher_cpu(tasks, check)


def check_teacher_cpu(tasks, n: int) -> None:
    """Verify the cpu twins of ``n`` tasks (spread over the kinds) with the real cpu verifier."""
    from synth.teacher.compact import cpu_answer
    from synth.teacher.task_families import task_code
    from train.rollout import verifier_reward_fn

    by_kind: dict[str, list] = {}
    for t in tasks:
        by_kind.setdefault(t.kind, []).append(t)
    pick = []
    while len(pick) < n and any(by_kind.values()):
        for k in sorted(by_kind):
            if by_kind[k] and len(pick) < n:
                pick.append(by_kind[k].pop(0))
    fn = verifier_reward_fn("cpu", {"trials": 5, "timing_trials": 0, "time_torch_compile": False})
    t0 = time.time()
    scores = fn([({"reference_code": task_code(t), "task_id": t.signature}, f"```python\n{cpu_answer(t)}```")
                 for t in pick])
    ok = sum(s.correct for s in scores)
    for t, s in zip(pick, scores):
        if not s.correct:
            print("teacher cpu twin FAILED", t.signature, s.stage, s.feedback[:400], flush=True)
    print(f"teacher check (cpu verifier, cpu twins): {ok}/{len(pick)} correct, {time.time() - t0:.0f} s", flush=True)


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


class Report:
    """The result table, rewritten (stdout JSON line + markdown file + $OUT copy) after every row."""

    def __init__(self, args, info: dict):
        self.args, self.info, self.rows, self.notes = args, info, [], []

    def add(self, row: dict) -> None:
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        self.write()

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(text, flush=True)
        self.write()

    def write(self) -> None:
        md = self.render()
        Path(self.args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(self.args.results).write_text(md)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], Path(self.args.results).name).write_text(md)

    def render(self) -> str:
        a, i = self.args, self.info
        cols = ["run", "pass@1", "pass@1_unseen_combo", "mean_reward", "steps", "final_loss", "train_pass_rate", "mirrorpop_dropped",
                "buffer_size", "stages", "seconds"]
        lines = [f"# Training stage on {i['device']}", "",
                 f"Command: `{i['command']}`. Verifier backend: {i['backend']} (trials 5, timing_trials "
                 f"{a.timing_trials}, no torch.compile timing).",
                 f"Corpus: {i['tasks']} procedural task programs (synth/teacher/task_families.py) with the compact teacher's "
                 f"answers (synth/teacher/compact.py); {i['train_tasks']} trained on, {i['heldout_tasks']} held out. "
                 f"pass@1 (greedy) on {i['eval_tasks']} held-out programs never seen in training, "
                 f"{i['eval_unseen_combo']} of them with an op combination that no training task has. RL prompts: "
                 f"the other {i['heldout_tasks'] - i['eval_tasks']} held-out programs (never in SFT, never evaluated), "
                 "rewarded by the verifier alone.",
                 f"Model: Llama {a.n_layer} layers, d={a.d_model}, {a.n_head} heads, BPE tokenizer trained on the corpus "
                 f"(vocab {a.vocab}, merges across words, digits split); SFT budget {a.sft_s:.0f} s; RL per arm: up to {a.rl_steps} steps within its "
                 f"budget, {a.prompts} prompts x G={a.group}, {a.turns} turns.", "",
                 "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
        for row in self.rows:
            lines.append("| " + " | ".join(str(row.get(c, "")) for c in cols) + " |")
        if self.notes:
            lines += ["", *[f"- {n}" for n in self.notes]]
        return "\n".join(lines) + "\n"


def run(args) -> int:
    import torch
    from transformers.utils import logging as hf_logging

    from train import data as D
    from train.evaluate import evaluate_rows
    from train.model import latest_checkpoint, load_pretrained
    from train.rl import screen_prompts, train_rl
    from train.rollout import verifier_reward_fn
    from train.sft import train_sft

    hf_logging.disable_progress_bar()
    torch.backends.cuda.matmul.allow_tf32 = True
    t_start = time.time()
    left = lambda: args.budget_s - (time.time() - t_start)  # noqa: E731
    work = Path(args.work)
    backend = args.backend or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rows = D.rows_of(D.load_corpus(args.corpus, "rl"))
    if rows and rows[0].get("backend") not in (backend, None):
        raise SystemExit(f"corpus {args.corpus} holds {rows[0]['backend']} answers; this run verifies on {backend}")
    sft_rows = {r["task_id"]: r for r in D.rows_of(D.load_corpus(args.corpus, "sft"))}
    fams = json.loads((Path(args.corpus) / FAMILIES_FILE).read_text()) if (Path(args.corpus) / FAMILIES_FILE).is_file() else {}
    train_rows, held_all = D.split_rows(rows, args.heldout_frac, 0)
    held_sorted = sorted(held_all, key=lambda r: r["task_id"])
    held = held_sorted[: args.eval_tasks]
    # RL prompts: held-out programs (never in SFT) other than the evaluated ones, so RL sees tasks the SFT
    # model has not memorised (on its own training tasks every group passes and advantages are all zero)
    rl_rows = held_sorted[args.eval_tasks:]
    train_combos = {fams.get(r["task_id"]) for r in train_rows}
    unseen = {r["task_id"] for r in held if fams.get(r["task_id"]) not in train_combos}
    verify_cfg = {"trials": 5, "timing_trials": args.timing_trials, "warmup": 1, "time_torch_compile": False,
                  "exec_workers": 4, "compile_workers": os.cpu_count() or 4, "compile_timeout_s": 240,
                  "run_timeout_s": 60}
    reward_fn = verifier_reward_fn(backend, verify_cfg)  # one cache: identical answers are verified once
    info = {"device": device_name(), "backend": backend, "tasks": len(rows), "train_tasks": len(train_rows),
            "heldout_tasks": len(held_all), "eval_tasks": len(held), "eval_unseen_combo": len(unseen),
            "command": " ".join(["python3", "bench/bench_train_gpu.py", *sys.argv[1:]])}
    rep = Report(args, info)
    print(json.dumps(info), flush=True)

    # 0. the teacher's own answers for the evaluated held-out tasks (and a few training tasks), verified on
    # this machine while SFT runs; also warms the compiler (precompiled header) and the verdict cache
    teacher: dict = {}

    def check_teacher() -> None:
        t = time.time()
        picks = held + train_rows[: args.teacher_check_train]
        items = [(r, sft_rows[r["task_id"]]["messages"][-1]["content"]) for r in picks if r["task_id"] in sft_rows]
        try:
            scores = reward_fn(items)
            teacher.update(ok=sum(s.correct for s in scores), n=len(scores), s=round(time.time() - t, 1),
                           failed=[(r["task_id"], s.stage, s.feedback[:300]) for (r, _), s in zip(items, scores)
                                   if not s.correct][:3])
        except Exception as e:  # noqa: BLE001 - reported, never fatal to the training run
            teacher.update(error=f"{type(e).__name__}: {e}"[:500])

    checker = threading.Thread(target=check_teacher, daemon=True)
    checker.start()

    # 1. SFT
    sft_out = work / "sft"
    sft_budget = min(args.sft_s, max(0.0, left() - 60))
    r = train_sft(args.corpus, sft_out, steps=args.sft_steps, batch_size=args.batch_size, lr=args.lr, warmup=50,
                  max_len=args.max_len, save_every=0, heldout_frac=args.heldout_frac, vocab_size=args.vocab,
                  n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head, log_every=0,
                  max_seconds=sft_budget, split_words=False, split_digits=True, resume=False, lr_by_time=True, amp=True, device=dev)
    print(json.dumps({k: v for k, v in r.items() if k != "checkpoint"}), flush=True)
    checker.join(timeout=max(1.0, min(120.0, left() - 60)))
    if "ok" in teacher:
        rep.note(f"Teacher check on {info['device']} ({backend} verifier): {teacher['ok']}/{teacher['n']} of the "
                 f"compact teacher's answers correct ({len(held)} evaluated held-out tasks + "
                 f"{teacher['n'] - len(held)} training tasks), {teacher['s']} s, run alongside SFT."
                 + (f" Failures: {teacher['failed']}" if teacher["failed"] else ""))
    else:
        rep.note(f"Teacher check: {teacher.get('error', 'not finished within its budget')}")

    def evaluate(name: str, model_dir: Path, extra: dict) -> float:
        if left() < args.min_eval_s:
            rep.add({"run": name, "pass@1": "not run (budget)", **extra})
            return 0.0
        t = time.time()
        model, tok = load_pretrained(latest_checkpoint(model_dir))
        model.to(dev)
        res = evaluate_rows(model, tok, held, reward_fn, n=1, max_new_tokens=args.max_new_tokens)
        stages: dict = {}
        for p in res["per_task"]:
            stages[p["stages"][0]] = stages.get(p["stages"][0], 0) + 1
        un = [p for p in res["per_task"] if p["task_id"] in unseen]
        rep.add({"run": name, "pass@1": round(res["pass@1"], 3),
                 "pass@1_unseen_combo": round(sum(p["correct"] for p in un) / len(un), 3) if un else "",
                 "mean_reward": round(res["mean_reward"], 3), "stages": stages, **extra,
                 "seconds": round(time.time() - t, 1)})
        return time.time() - t

    eval_s = evaluate("SFT only", sft_out, {"steps": r["steps_done"], "final_loss": round(r["final_loss"], 4),
                                            "train_s": r["seconds"]})
    if args.rl_screen and left() > args.min_rl_s * 4:
        # dynamic sampling: keep the RL prompts on which the SFT model's G samples disagree (plus a share of
        # never-solved ones for the retry buffer); prompts it always solves give zero advantages
        t = time.time()
        model, tok = load_pretrained(latest_checkpoint(sft_out))
        model.to(dev)
        pool = rl_rows[: args.rl_screen]
        res = evaluate_rows(model, tok, pool, reward_fn, n=args.group, greedy=False, temperature=args.temperature,
                            max_new_tokens=args.max_new_tokens)
        kept, st = screen_prompts(pool, [p["correct"] for p in res["per_task"]], args.group)
        del model
        rep.note(f"RL prompt screening ({round(time.time() - t, 1)} s): SFT sampled G={args.group} answers for "
                 f"{st['screened']} RL prompts: {st['mixed']} mixed, {st['all_pass']} always solved, "
                 f"{st['all_fail']} never solved; RL trains on {st['kept']} (the mixed ones, and never-solved ones up to a "
                 f"quarter, or all of them when none is mixed). Sample pass rate {res['pass@1']:.3f}.")
        if kept:
            rl_rows = kept
    arms = [("SFT + RL (all stabilisers)", {}), ("RL without PrimeEcho", {"prime_echo": False}),
            ("RL without Buffered Dynamic Retry", {"retry": False}), ("RL without MirrorPop", {"mirrorpop": False})]
    for k, (name, flags) in enumerate(arms):
        est_eval = 0.6 * eval_s + 5
        rl_s = min(args.rl_s, (left() - 30) / (len(arms) - k) - est_eval)  # a step may overrun its budget
        if rl_s < args.min_rl_s:
            rep.add({"run": name, "pass@1": "not run (budget)"})
            continue
        t = time.time()
        out = work / ("rl_" + "_".join(flags) if flags else "rl_all")
        rr = train_rl(args.corpus, out, init=str(sft_out), reward_fn=reward_fn, rows=rl_rows, steps=args.rl_steps,
                      prompts_per_step=args.prompts, group_size=args.group, turns=args.turns,
                      max_new_tokens=args.max_new_tokens, temperature=args.temperature, lr=args.rl_lr, save_every=0,
                      max_seconds=rl_s, resume=False, seed=args.seed, device=dev, **flags)
        recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], f"metrics_{out.name}.jsonl").write_text((out / "metrics.jsonl").read_text())
        evaluate(name, out, {"steps": rr["steps_done"], "rl_s": round(time.time() - t, 1),
                             "train_pass_rate": round(sum(x["pass_rate"] for x in recs) / len(recs), 3),
                             "mirrorpop_dropped": round(sum(x["mirrorpop_dropped_share"] for x in recs) / len(recs), 3),
                             "buffer_size": recs[-1]["buffer_size"]})
    rep.note(f"Total wall time {time.time() - t_start:.0f} s of a {args.budget_s:.0f} s budget.")
    print(rep.render(), flush=True)
    if os.environ.get("OUT") and (sft_out / "metrics.jsonl").is_file():
        Path(os.environ["OUT"], "metrics_sft.jsonl").write_text((sft_out / "metrics.jsonl").read_text())
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-corpus", default="", help="write the procedural teacher corpus here and exit")
    ap.add_argument("--tasks", type=int, default=8000, help="task programs in the corpus (make-corpus)")
    ap.add_argument("--check", type=int, default=10, help="cpu twins verified with the cpu verifier (make-corpus)")
    ap.add_argument("--backend", default="", help="answers' backend (make-corpus: cuda) / verifier backend (run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default="bench/data/train_corpus")
    ap.add_argument("--work", default="/tmp/kernelmill_train_bench")
    ap.add_argument("--results", default="")
    ap.add_argument("--budget-s", type=float, default=520)
    ap.add_argument("--sft-s", type=float, default=180)
    ap.add_argument("--sft-steps", type=int, default=6000, help="schedule length (the time budget usually ends SFT)")
    ap.add_argument("--rl-s", type=float, default=60, help="most RL seconds per arm (less when the budget is short)")
    ap.add_argument("--min-rl-s", type=float, default=15)
    ap.add_argument("--rl-steps", type=int, default=8)
    ap.add_argument("--rl-screen", type=int, default=0,
                    help="screen this many RL prompts with G samples of the SFT model and train RL on the mixed ones")
    ap.add_argument("--min-eval-s", type=float, default=15)
    ap.add_argument("--eval-tasks", type=int, default=40)
    ap.add_argument("--teacher-check-train", type=int, default=8)
    ap.add_argument("--heldout-frac", type=float, default=0.1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--rl-lr", type=float, default=2e-5)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--timing-trials", type=int, default=3)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--max-new-tokens", type=int, default=320)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--n-head", type=int, default=6)
    args = ap.parse_args()
    if args.make_corpus:
        make_corpus(Path(args.make_corpus), args.tasks, args.backend or "cuda", args.seed, args.heldout_frac,
                    args.check)
        return 0
    if not args.results:
        dev = device_name().lower()
        tag = "h100" if "h100" in dev else "h200" if "h200" in dev else re.sub(r"\W+", "_", dev)
        args.results = str(ROOT / "bench" / "results" / f"train_{tag}.md")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
