"""The report of a training run (bench/bench_train_gpu.py writes it): the markdown tables rewritten after every
row (with their $OUT copies). Tier choice is bench/lib/train_tiers.py's, an arm's steps are read by train/evaluate.py.

Imports: the standard library only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def fmt_ci(ci) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


class Report:
    """The result tables, rewritten (markdown file + $OUT copy) after every row; each row also goes to
    stdout and $OUT/train_rows.jsonl as one JSON line, flushed."""

    COLS = ["run", "tiers", "pass@1", "ci95", "vs_sft", "vs_sft_ci95", "pass@1_unseen_combo", "mean_reward", "steps",
            "s_per_step", "zero_adv_share", "mixed_groups", "all_pass_groups", "all_fail_groups", "buffer_added",
            "buffer_drawn", "repair_pass_rate", "mirrorpop_dropped", "signal_tokens", "stages", "seconds"]
    STEP_COLS = ["step", "reward_mean", "reward_std", "pass_rate", "groups", "zero_adv_share", "mixed_groups",
                 "all_pass_groups", "all_fail_groups", "buffer_size", "buffer_added", "buffer_drawn", "repair_pass_rate",
                 "mirrorpop_dropped", "mirrorpop_stat_mean", "signal_tokens", "approx_kl", "distinct_answers", "sample_s",
                 "reward_s", "update_s", "step_s"]

    def __init__(self, args, info: dict):
        self.args, self.info = args, info
        self.rows: list[dict] = []
        self.notes: list[str] = []
        self.tiers: list[dict] = []
        self.steps: dict[str, list[dict]] = {}
        self.out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None

    def append_jsonl(self, name: str, rec: dict) -> None:
        if self.out:
            with (self.out / name).open("a") as f:
                f.write(json.dumps(rec, default=str) + "\n")

    def add(self, row: dict) -> None:
        self.rows.append(row)
        print(json.dumps(row, default=str), flush=True)
        self.append_jsonl("train_rows.jsonl", row)
        self.write()

    def tier(self, row: dict) -> None:
        self.tiers.append(row)
        print(json.dumps({"tier_screen": row}), flush=True)
        self.append_jsonl("train_rows.jsonl", {"tier_screen": row})
        self.write()

    def step(self, arm: str, rec: dict) -> None:
        self.steps.setdefault(arm, []).append(rec)
        self.append_jsonl("rl_steps.jsonl", {"arm": arm, **rec})
        print(json.dumps({"arm": arm, **{k: rec.get(k) for k in self.STEP_COLS}}), flush=True)
        self.write()

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(text, flush=True)
        self.write()

    def write(self) -> None:
        md = self.render()
        Path(self.args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(self.args.results).write_text(md)
        if self.out:
            (self.out / Path(self.args.results).name).write_text(md)

    def render(self) -> str:
        a, i = self.args, self.info
        cell = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
        cap = (f"; RL rewards capped at {a.rl_reward_cap} (every correct answer scores the same, whatever its speed)"
               if a.rl_reward_cap else "; RL rewards as the verifier gives them (speed-ups included)")
        lines = [f"# Training stage on {i['device']}: RL with signal", "",
                 f"Command: `{i['command']}`. Verifier backend: {i['backend']} (trials {a.trials}, timing_trials "
                 f"{a.timing_trials}, no torch.compile timing){cap}.",
                 f"Corpus: {i['tasks']} procedural task programs (bench/lib/task_families.py, tasks per tier "
                 f"{i['per_tier']}) with the compact teacher's answers (bench/lib/teacher_compact.py); {i['train_tasks']} "
                 f"training tasks, of which SFT kept {i.get('sft_kept', '?')} per tier (--sft-tiers {a.sft_tiers}); "
                 f"{i['heldout_tasks']} held out, never trained on by SFT.",
                 f"Model: Llama {a.n_layer} layers, d={a.d_model}, {a.n_head} heads, BPE tokenizer trained on the corpus "
                 f"(vocab {a.vocab}); SFT budget {a.sft_s:.0f} s. RL: {a.prompts} prompts x G={a.group}, {a.turns} turns, "
                 f"lr {a.rl_lr}, {a.ppo_epochs} PPO epochs per batch, temperature {a.temperature}, rollouts in "
                 f"{'bf16' if a.rollout_bf16 else 'fp32'} (trainer fp32, MirrorPop threshold {a.mirrorpop_threshold}); first arm up to {a.rl_s:.0f} s, the others up "
                 f"to {a.ablation_rl_s:.0f} s and the first arm's step count.",
                 "pass@1: greedy, one answer per task, through the full verifier; ci95: percentile bootstrap over tasks "
                 "(2000 resamples); vs_sft: the paired difference to SFT on the same tasks and its interval.", ""]
        if self.tiers:
            tc = ["tier", "screened_tasks", "samples", "sample_pass_rate", "teacher_ok", "eval_pool", "rl_pool", "chosen"]
            lines += ["## Tier screening (SFT samples on held-out tasks that are never evaluated)", "",
                      "| " + " | ".join(tc) + " |", "|" + " --- |" * len(tc)]
            lines += ["| " + " | ".join(cell(r.get(c, "")) for c in tc) + " |" for r in self.tiers]
            lines.append("")
        lines += ["## Results", "", "| " + " | ".join(self.COLS) + " |", "|" + " --- |" * len(self.COLS)]
        lines += ["| " + " | ".join(cell(r.get(c, "")) for c in self.COLS) + " |" for r in self.rows]
        if self.notes:
            lines += ["", *[f"- {n}" for n in self.notes]]
        for arm, recs in self.steps.items():
            lines += ["", f"## RL steps: {arm}", "", "| " + " | ".join(self.STEP_COLS) + " |",
                      "|" + " --- |" * len(self.STEP_COLS)]
            lines += ["| " + " | ".join(cell(r.get(c, "")) if r.get(c) is not None else "" for c in self.STEP_COLS) + " |"
                      for r in recs]
        return "\n".join(x for x in lines if x is not None) + "\n"
