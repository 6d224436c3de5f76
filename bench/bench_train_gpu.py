"""GPU benchmark of the training stage: a small model trained from scratch on the teacher's corpus,
pass@1 on held-out tasks through the cuda verifier, SFT alone vs SFT+RL vs RL with each stabiliser off.

Two steps:

    python bench/bench_train_gpu.py --make-corpus bench/data/train_corpus     (here: needs synth.teacher)
    python bench/bench_train_gpu.py --corpus bench/data/train_corpus          (on the GPU machine)

The corpus: every seed task (data/seed_tasks) in several shape variants (its module-level size
constants scaled), each a distinct reference program with its own task_id; for each, the teacher's
cuda kernel file (synth.teacher.write_candidate, no planted bug) as the assistant answer. The teacher
is deterministic and written to be correct; its answers here are not re-verified before training.
Held-out tasks are chosen by task_id hash (train.data.is_heldout) and never trained on; they are
unseen programs, but of op families the training tasks also cover (other shapes), which is what a
model this small can be expected to generalise to.

Every phase runs under a time budget (the device minutes are few); a phase that does not fit is
reported as "not run", never estimated. The table goes to stdout, to ``--results`` (markdown, with
the device named) and, when $OUT is set, to $OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCALES = (1.0, 0.5, 0.75, 1.25, 1.5, 2.0, 0.25, 3.0, 0.625, 1.75, 2.5, 0.375)
PROMPT = "Write `ModelNew` for the cuda backend: custom CUDA kernels through load_inline, no PyTorch compute.\n```python\n{ref}```"


def shape_variants(code: str, n: int) -> list[str]:
    """Up to ``n`` distinct programs with the module-level integer constants scaled."""
    consts = re.findall(r"^(\w+) = (\d+)$", code, flags=re.M)
    out = []
    for s in SCALES[:n]:
        v = code
        for name, val in consts:
            new = max(1, int(round(int(val) * s)))
            v = re.sub(rf"^{name} = {val}$", f"{name} = {new}", v, flags=re.M)
        if v not in out:
            out.append(v)
    return out


def make_corpus(out: Path, variants: int) -> None:
    from kernelmill import store
    from kernelmill.schema import Message, RLRow, SFTRow, task_id_for
    from synth.teacher import TeacherDeclined, write_candidate

    sft, rl = [], []
    for f in sorted((ROOT / "data" / "seed_tasks").glob("*/*.py")):
        level = int(f.parent.name.removeprefix("level"))
        for ref in shape_variants(f.read_text(), variants):
            try:
                code = write_candidate(ref, "cuda")
            except TeacherDeclined as e:
                print("declined", f.name, e)
                continue
            tid = task_id_for(ref)
            prompt = PROMPT.format(ref=ref)
            sft.append(SFTRow(id="s" + tid, task_id=tid, source="seed", generator="teacher", backend="cuda", level=level,
                              num_turns=1, final_reward=1.0,
                              messages=[Message("user", prompt), Message("assistant", f"```python\n{code}```")]))
            rl.append(RLRow(id="r" + tid, task_id=tid, prompt=prompt, reference_code=ref, test_spec={}, level=level,
                            difficulty=float(level), pass_rate=1.0, n_samples=1, backend="cuda"))
    store.write_records(out, "sft", sft)
    store.write_records(out, "rl", rl)
    size = sum(p.stat().st_size for p in out.rglob("*.parquet"))
    print(f"corpus {out}: {len(sft)} sft rows, {len(rl)} rl rows, {size / 1e6:.2f} MB")


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def run(args) -> int:
    import torch
    from transformers.utils import logging as hf_logging

    from train import data as D
    from train.evaluate import evaluate_rows
    from train.model import latest_checkpoint, load_pretrained
    from train.rl import train_rl
    from train.rollout import verifier_reward_fn
    from train.sft import train_sft

    hf_logging.disable_progress_bar()
    t_start = time.time()
    left = lambda: args.budget_s - (time.time() - t_start)  # noqa: E731
    work = Path(args.work)
    backend = "cuda" if torch.cuda.is_available() else "cpu"
    rows = D.rows_of(D.load_corpus(args.corpus, "rl"))
    train_rows, held = D.split_rows(rows, args.heldout_frac, 0)
    held = sorted(held, key=lambda r: r["task_id"])[: args.eval_tasks]
    verify_cfg = {"trials": 5, "timing_trials": 5, "warmup": 1, "time_torch_compile": False, "exec_workers": 4,
                  "compile_workers": os.cpu_count() or 4, "compile_timeout_s": 240, "run_timeout_s": 60}
    reward_fn = verifier_reward_fn(backend, verify_cfg)  # one cache: identical answers are verified once
    table: list[dict] = []
    log = {"device": device_name(), "backend": backend, "tasks": len({r["task_id"] for r in rows}),
           "train_tasks": len({r["task_id"] for r in train_rows}), "heldout_eval_tasks": len(held)}
    print(json.dumps(log), flush=True)

    def evaluate(name: str, model_dir: Path, extra: dict) -> None:
        if left() < args.min_eval_s:
            table.append({"run": name, "pass@1": "not run (budget)", **extra})
            return
        t = time.time()
        model, tok = load_pretrained(latest_checkpoint(model_dir))
        model.to(backend)
        res = evaluate_rows(model, tok, held, reward_fn, n=1, max_new_tokens=args.max_new_tokens)
        stages = {}
        for p in res["per_task"]:
            stages[p["stages"][0]] = stages.get(p["stages"][0], 0) + 1
        table.append({"run": name, "pass@1": round(res["pass@1"], 3), "mean_reward": round(res["mean_reward"], 3),
                      "stages": stages, "eval_s": round(time.time() - t, 1), **extra})
        print(json.dumps(table[-1]), flush=True)

    sft_out = work / "sft"
    r = train_sft(args.corpus, sft_out, steps=args.sft_steps, batch_size=args.batch_size, lr=args.lr, warmup=20,
                  max_len=args.max_len, save_every=0, heldout_frac=args.heldout_frac, vocab_size=args.vocab,
                  n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head, log_every=0,
                  max_seconds=args.sft_s, split_words=False, resume=False)
    print(json.dumps({k: v for k, v in r.items() if k != "checkpoint"}), flush=True)
    evaluate("SFT only", sft_out, {"steps": r["steps_done"], "final_loss": round(r["final_loss"], 4)})
    variants = [("SFT + RL (all stabilisers)", {}), ("RL without PrimeEcho", {"prime_echo": False}),
                ("RL without Buffered Dynamic Retry", {"retry": False}), ("RL without MirrorPop", {"mirrorpop": False})]
    for name, flags in variants:
        if left() < args.rl_s + args.min_eval_s:
            table.append({"run": name, "pass@1": "not run (budget)"})
            continue
        out = work / ("rl_" + "_".join(flags) if flags else "rl_all")
        rr = train_rl(args.corpus, out, init=str(sft_out), reward_fn=reward_fn, rows=train_rows, steps=args.rl_steps,
                      prompts_per_step=args.prompts, group_size=args.group, turns=2,
                      max_new_tokens=args.max_new_tokens, temperature=0.8, lr=args.rl_lr, save_every=0,
                      max_seconds=args.rl_s, resume=False, **flags)
        recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        evaluate(name, out, {"steps": rr["steps_done"],
                             "train_pass_rate": round(sum(x["pass_rate"] for x in recs) / len(recs), 3),
                             "mirrorpop_dropped": round(sum(x["mirrorpop_dropped_share"] for x in recs) / len(recs), 3),
                             "buffer_size": recs[-1]["buffer_size"]})
    md = render(table, log, args)
    print(md)
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(md)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], Path(args.results).name).write_text(md)
        for p in work.glob("*/metrics.jsonl"):
            Path(os.environ["OUT"], f"metrics_{p.parent.name}.jsonl").write_text(p.read_text())
    return 0


def render(table: list[dict], log: dict, args) -> str:
    cols = ["run", "pass@1", "mean_reward", "steps", "train_pass_rate", "mirrorpop_dropped", "buffer_size", "stages",
            "eval_s"]
    lines = [f"# Training stage on {log['device']}", "",
             f"Command: `python bench/bench_train_gpu.py --corpus {args.corpus}` (budget {args.budget_s:.0f} s). "
             f"Verifier backend: {log['backend']}. Tasks: {log['tasks']} ({log['train_tasks']} trained on), "
             f"pass@1 (greedy) on {log['heldout_eval_tasks']} held-out tasks never seen in training.",
             f"Model: Llama {args.n_layer} layers, d={args.d_model}, tokenizer trained on the corpus (vocab {args.vocab}); "
             f"SFT budget {args.sft_s:.0f} s; RL {args.rl_s:.0f} s per run (G={args.group}, {args.prompts} prompts/step, 2 turns).",
             "", "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for row in table:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-corpus", default="", help="write the teacher corpus here and exit")
    ap.add_argument("--variants", type=int, default=12, help="shape variants per seed task (corpus)")
    ap.add_argument("--corpus", default="bench/data/train_corpus")
    ap.add_argument("--work", default="/tmp/kernelmill_train_bench")
    ap.add_argument("--results", default="")
    ap.add_argument("--budget-s", type=float, default=330)
    ap.add_argument("--sft-s", type=float, default=110)
    ap.add_argument("--sft-steps", type=int, default=3000)
    ap.add_argument("--rl-s", type=float, default=25)
    ap.add_argument("--rl-steps", type=int, default=50)
    ap.add_argument("--min-eval-s", type=float, default=20)
    ap.add_argument("--eval-tasks", type=int, default=12)
    ap.add_argument("--heldout-frac", type=float, default=0.2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--rl-lr", type=float, default=2e-5)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--max-new-tokens", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=8)
    args = ap.parse_args()
    if args.make_corpus:
        make_corpus(Path(args.make_corpus), args.variants)
        return 0
    if not args.results:
        dev = device_name().lower()
        tag = "h100" if "h100" in dev else "h200" if "h200" in dev else re.sub(r"\W+", "_", dev)
        args.results = str(ROOT / "bench" / "results" / f"train_{tag}.md")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
