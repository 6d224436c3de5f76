"""The report of the training-loop benchmark (bench/bench_loop_gpu.py): held-out scores per arm with their
bootstrap intervals and paired differences to SFT, and each RL arm's step table (orchestrator.loop.rl_step_table),
read from the arms' loop run directories. Prints nothing; the benchmark writes and prints what it returns."""

from __future__ import annotations

import json
from pathlib import Path


def _cell(r: dict, m: str) -> str:
    v, ci = r.get(m), r.get(f"{m}_ci")
    return "-" if v is None else f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _diff(r: dict, m: str) -> str:
    d = r.get(f"{m}_diff")
    return "-" if not d else f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]"


def render(args, work: Path, state: dict) -> str:
    """The markdown of bench/bench_loop_gpu.py: ``args`` its parsed command line (k, arms, server, the sampling and
    training settings), ``work`` its work directory (``arms/<arm>/loop/...``), ``state`` its saved state."""
    from orchestrator.ledger import entries
    from orchestrator.loop import rl_step_table  # lazily, as the benchmark's --help needs none of it
    from train.sft import read_metrics

    k = args.k
    info = state.get("info", {})
    lines = [f"# The training loop, SFT vs RFT vs RL and the stabiliser ablations, on {info.get('device', '?')}", "",
             f"Commands (one per call): {'; '.join(f'`{c}`' for c in state.get('commands', []))}. "
             f"Verifier backend {info.get('backend')}; sampling with the loop's in-process server "
             f"(loop.server = {args.server}).",
             f"SFT: {json.dumps(state.get('sft', {}))}.",
             f"Two-turn repair dialogues in the SFT corpus (a planted bug judged by the verifier, its feedback turn, the "
             f"fix), each {args.repair_sft_repeat} time(s) in the corpus: {json.dumps(state.get('repair_sft', {}))}.",
             f"Tasks: the corpus's SFT-held-out tasks ({info.get('held')}), split by the loop into the round's pool "
             f"(at most {args.pool_tasks}) and E (at most {args.eval_tasks}, evaluated for every model); k = {k} answers per "
             f"task at temperature {args.temperature}, at most {args.max_new_tokens} new tokens; pool repair turns "
             f"{args.repair_turns}. RL: {args.rl_steps} steps, {args.prompts} prompts x {args.group} samples, "
             f"{args.turns} turns, lr {args.rl_lr}, dynamic sampling {args.dynamic_rounds} extra round(s); RFT "
             f"{args.rft_steps} steps, lr {args.rft_lr}.", "",
             "Held-out E: mean over tasks [95% bootstrap interval]; diff = arm minus SFT per task [95% paired "
             "bootstrap interval].", "",
             f"| arm | tasks | pass@1 | pass@1 diff vs SFT | pass@{k} | avg@{k} | avg@{k} diff | fast_1.0 | fast_1.1 | "
             "RL mixed share (first / after) | BDR repair solved | MirrorPop dropped | seconds |",
             "|" + " --- |" * 13]
    first = work / "arms" / args.arms[0] / "loop" / "metrics.jsonl"
    if first.is_file():
        for line in first.read_text().splitlines():
            r = json.loads(line)
            if r["model_index"] == 0:
                lines.append(f"| SFT (m0) | {r['tasks']} | {_cell(r, 'pass@1')} | - | {_cell(r, 'pass@k')} | "
                             f"{_cell(r, 'avg@k')} | - | {_cell(r, 'fast_1.0')} | {_cell(r, 'fast_1.1')} | | | | |")
    for arm in args.arms:
        path = work / "arms" / arm / "loop" / "metrics.jsonl"
        got = {json.loads(x)["model_index"]: json.loads(x) for x in path.read_text().splitlines()} if path.is_file() else {}
        a = state.get("arms", {}).get(arm, {})
        if 1 not in got:
            lines.append(f"| SFT + {arm} | not run{': ' + a['stopped'] if a.get('stopped') else ''} |" + " |" * 11)
            continue
        r = got[1]
        rl = r.get("rl") or {}
        mixed = f"{rl['mixed_share_first']:.2f} / {rl['mixed_share']:.2f}" if rl else "-"
        bdr = (f"{rl['repair_solved']}/{rl['repair_trajectories']} ({rl['repair_prompts']} prompts)" if rl else "-")
        lines.append(f"| SFT + {arm} | {r['tasks']} | {_cell(r, 'pass@1')} | {_diff(r, 'pass@1')} | {_cell(r, 'pass@k')} | "
                     f"{_cell(r, 'avg@k')} | {_diff(r, 'avg@k')} | {_cell(r, 'fast_1.0')} | {_cell(r, 'fast_1.1')} | "
                     f"{mixed} | {bdr} | {rl.get('mirrorpop_dropped', '-') if rl else '-'} | {a.get('seconds', '')} |")
    for arm in args.arms:
        rl_dir = work / "arms" / arm / "loop" / "round-1" / "rl"
        if (rl_dir / "metrics.jsonl").is_file():
            rl = entries(rl_dir).get("rl")  # the RL step's record (orchestrator/ledger.py)
            screen = rl.counts.get("screen") if rl else None
            lines += ["", f"## {arm}: RL steps", "", f"RL pool screen: {json.dumps(screen)}", "",
                      rl_step_table(read_metrics(rl_dir / "metrics.jsonl", "rl")).rstrip()]
    for arm, a in state.get("arms", {}).items():
        lines.append(f"\n- {arm}: {json.dumps(a)}")
    for note in state.get("notes", []):
        lines.append(f"- {note}")
    return "\n".join(lines) + "\n"
