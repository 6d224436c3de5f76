"""GPU benchmark of the training loop: SFT, then arms that each call the loop (orchestrator/loop.py, the
`kernelmill loop` stage) from the same SFT model: SFT + one RFT round, SFT + RL, and SFT + RL with each
stabiliser off (PrimeEcho, Buffered Dynamic Retry, MirrorPop) at the same number of RL steps. It owns no loop
logic: sampling, verification, repair, curation, RFT, RL and the held-out evaluation are the loop's.

    python bench/bench_loop_gpu.py --make-corpus bench/data/loop_corpus --tasks 8000 --backend cuda   (here, once)
    python3 bench/bench_loop_gpu.py --budget-s 540 --state-out $OUT --results $OUT/loop.md            (GPU, call 1)
    python3 bench/bench_loop_gpu.py --budget-s 540 --state-in ext/loop_state --state-out $OUT ...      (call 2, ...)

What one call does, in order, each step skipped when the state already holds it:

  0. repair dialogues (``--repair-sft-tasks``): training tasks given the teacher's answer with a planted bug
     (bench/lib/teacher_warm_start.py, the bug from synth/teacher/bugs.py), judged by the verify stage; each failure becomes a two-turn SFT dialogue (the feedback turn the
     repair stage and Buffered Dynamic Retry send, then the correct answer), so repair is something m0 learned.
  1. SFT from scratch (train/sft.py, ``--sft-s``) on the corpus's training split (train.data.is_heldout at
     ``--heldout-frac``: the SFT split); m0 is that checkpoint rounded to bf16 (what the state carries, so
     every call starts every arm from the same weights).
  2. the arms, in ``--arms`` order, each a loop run directory ``<work>/arms/<arm>`` over the SFT-held-out
     tasks, split again by the loop (train.heldout_frac 0.5, train.split_seed 1) into the pool the round
     samples and trains on and the held-out set E it evaluates (``--pool-tasks``, ``--eval-tasks``):
       rft                  loop.train = rft: m0 evaluated on E, the pool sampled (k answers per task, repair turns),
                            verified, curated, RFT, m1 evaluated
       rl                   loop.train = rl: GRPO (``--rl-steps``, groups of ``--group``) on the pool screened to
                            tasks m0 solves sometimes but not always, dynamic sampling, all stabilisers
       rl_no_prime_echo, rl_no_retry, rl_no_mirrorpop   the same with one stabiliser off
     The first arm samples m0's evaluation and the pool; the others start from its copy
     (orchestrator.loop.share_start), so every arm is compared with the same m0 scores (paired bootstrap).
  3. results: held-out pass@1 per arm with its 95% interval and the paired-bootstrap difference to SFT with its
     interval, pass@k, avg@k, fast_1.0/1.1; per RL arm the stabiliser statistics of every step (share of mixed
     groups before/after replacement, repair prompts drawn and solved, MirrorPop drops) -> ``--results``.

Several calls: ``--budget-s`` bounds a call; an arm starts only when its estimated time (the last finished arm of
its kind, or ``--rl-est-s``) fits, and the loop gets the rest as loop.max_seconds. At the end of every call the
state (m0 in bf16, every arm's run directory without checkpoints) is written to ``--state-out`` as
``loop_state.tar.NN`` parts of 15 MB; a later call with ``--state-in DIR`` (those parts, carried) goes on where it
stopped. An arm cut inside RL restarts its RL in the next call (checkpoints are not carried).

Imports: no prefect, no fastapi: sampling uses the loop's in-process server (loop.server = local) on the GPU box.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import default_results, device_name  # noqa: E402
from kernelmill.errors import InputError  # noqa: E402
from bench.lib.loop_arms import LOOP_ARMS, share_start, with_arm  # noqa: E402
from bench.lib.loop_report import render  # noqa: E402
from bench.lib.teacher_warm_start import keep_only_dialogues, repair_dialogues  # noqa: E402
from bench.lib.train_export import export_bf16, fp32_copy, pack_loop_state, unpack_loop_state  # noqa: E402
from bench.lib.family_corpus import make_prompted_corpus, read_corpus, write_training_corpus  # noqa: E402

ARMS = tuple(LOOP_ARMS)  # the loop's arms (loop.arm): rft, rl, rl_no_prime_echo, rl_no_retry, rl_no_mirrorpop
# what the loop's phases import, some only late (curate's near-duplicate step imports rensa after sampling and
# verifying for minutes): checked before anything runs, so a missing wheel costs seconds, not a device call
LOOP_IMPORTS = ("torch", "transformers", "pyarrow", "duckdb", "rensa", "tree_sitter", "tree_sitter_python")
STATE = "state.json"


def arm_base(arm: str) -> str:
    """``rl@b`` is arm ``rl`` run again under its own name (same m0, pool and E), e.g. after a verifier change."""
    return arm.split("@", 1)[0]


# ---------------------------------------------------------------------------- the arms' settings


def arm_settings(args, arm: str, m0: Path, backend: str, max_seconds: float):
    """The loop's settings for one arm: every arm samples, verifies and evaluates the same way; they differ in
    the arm (loop.train and one stabiliser switch: bench/lib/loop_arms.py's with_arm)."""
    from kernelmill.config import load_settings

    dev = "cuda" if backend == "cuda" else "cpu"
    sets = {"run.backend": backend, "loop.model": str(m0), "loop.server": args.server, "loop.device": dev,
            "loop.rounds": 1, "loop.k": args.k, "loop.pool_tasks": args.pool_tasks, "loop.eval_tasks": args.eval_tasks,
            "loop.rl_steps": args.rl_steps, "loop.group_size": args.group,
            "loop.prompts_per_step": args.prompts, "loop.rl_fail_share": args.fail_share,
            "loop.max_seconds": max(1.0, max_seconds), "loop.serve_timeout_s": 300.0,
            # the loop's split of the SFT-held-out tasks into pool and E (RFT and RL use the same one)
            "train.heldout_frac": 0.5, "train.split_seed": 1, "train.device": dev, "train.max_len": args.max_len,
            "train.sft_steps": args.rft_steps, "train.lr": args.rft_lr, "train.batch_size": 16, "train.warmup": 5,
            "train.save_every": 0, "train.rl_save_every": 0, "train.turns": args.turns,
            "train.max_new_tokens": args.max_new_tokens, "train.temperature": args.temperature,
            "train.rl_lr": args.rl_lr, "train.micro_batch": 32, "train.dynamic_max_rounds": args.dynamic_rounds,
            "train.rollout_bf16": backend == "cuda",
            "generate.temperature": args.temperature, "generate.max_tokens": args.max_new_tokens,
            "generate.concurrency": args.concurrency, "generate.cache_dir": "", "generate.timeout_s": 600.0,
            "generate.max_retries": 1, "verify.trials": args.trials, "verify.timing_trials": args.timing_trials,
            "verify.time_torch_compile": False, "verify.compile_workers": args.compile_workers or (os.cpu_count() or 4),
            "verify.exec_workers": args.exec_workers, "verify.run_timeout_s": 60, "verify.compile_timeout_s": 240,
            "repair.max_turns": args.repair_turns, "curate.rft_max_per_task": args.rft_per_task,
            "flows.verify_flush_rows": 32}
    return with_arm(load_settings(None, sets), arm)


# ---------------------------------------------------------------------------- the run


def missing_imports(names=LOOP_IMPORTS) -> list[str]:
    """The modules of ``names`` this interpreter cannot import (found on sys.path, not loaded)."""
    import importlib.util

    return [n for n in names if importlib.util.find_spec(n) is None]


def run(args) -> int:
    missing = missing_imports()
    if missing:
        print(f"bench_loop_gpu: {', '.join(missing)} not importable by {sys.executable}: carry their Python "
              f"{sys.version_info.major}.{sys.version_info.minor} wheels in ext/whl (bash bench/gpu_wheels.sh) and "
              f"install them (bench/gpu_tier.sh loop does)", file=sys.stderr)
        return 2
    import torch
    from transformers.utils import logging as hf_logging

    from kernelmill import store
    from orchestrator.loop import run_loop
    from orchestrator.stages import BY_NAME
    from train import data as D
    from train.sft import train_sft

    hf_logging.disable_progress_bar()
    torch.backends.cuda.matmul.allow_tf32 = True
    t_start = time.time()
    left = lambda: args.budget_s - (time.time() - t_start)  # noqa: E731
    work = Path(args.work)
    if args.fresh:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    if args.state_in and not (work / STATE).is_file():
        try:
            unpack_loop_state(Path(args.state_in), work)
        except InputError:
            raise SystemExit(f"--state-in {args.state_in}: no loop_state.tar.* parts (written by --state-out)") \
                from None
    state = json.loads((work / STATE).read_text()) if (work / STATE).is_file() else {}
    if args.redo_sft:  # SFT runs again with this call's settings (e.g. another --max-len); m0 and every arm go
        state = keep_only_dialogues(work, state, ("m0", "m0_bf16", "arms", "sft", "corpus"))
    cuda = torch.cuda.is_available()
    backend = args.backend or ("cuda" if cuda else "cpu")
    state.setdefault("commands", []).append(" ".join(["python3", "bench/bench_loop_gpu.py", *sys.argv[1:]]))
    state.setdefault("arms", {})
    state.setdefault("notes", [])

    def save(note: str = "") -> None:
        if note:
            state["notes"].append(note)
            print(f"note: {note}", flush=True)
        (work / STATE).write_text(json.dumps(state, indent=1, default=str))
        md = render(args, work, state)
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(md)

    tasks, answers = read_corpus(Path(args.corpus), backend)
    held = sorted((t for t in tasks if D.is_heldout(t.task_id, args.heldout_frac)), key=lambda t: t.task_id)
    state["info"] = {"device": device_name(), "backend": backend, "tasks": len(tasks), "held": len(held)}

    # 1. SFT -> m0 (bf16 values), on the teacher's answers and two-turn repair dialogues (BDR's repair prompts
    # and the loop's repair turns are then something the model has seen)
    if not (work / "m0_bf16" / "config.json").is_file():
        corpus, sft_out = work / "corpus", work / "sft"
        train = [t for t in tasks if not D.is_heldout(t.task_id, args.heldout_frac)]
        if args.repair_sft_tasks and "repair_sft" not in state:
            t = time.time()
            verify_s = arm_settings(args, "rft", work, backend, 600.0)
            state["repair_sft"] = repair_dialogues(work, train, answers, backend, args.repair_sft_tasks,
                                                   lambda d: BY_NAME["verify"].run(d, verify_s))
            state["repair_sft"]["seconds"] = round(time.time() - t, 1)
            save()
        extra = store.read_records(work / "repair_sft", "sft") if (work / "repair_sft").is_dir() else []
        # each dialogue repeated (ids kept distinct): 32 dialogues beside 7195 single answers were 0.4% of SFT
        extra = [dataclasses.replace(r, id=f"{r.id}~{i}" if i else r.id) for r in extra
                 for i in range(args.repair_sft_repeat)]
        write_training_corpus(corpus, tasks, answers, backend, extra)
        shutil.rmtree(sft_out, ignore_errors=True)
        t = time.time()
        r = train_sft(corpus, sft_out, steps=args.sft_steps, batch_size=args.batch_size, lr=args.lr, warmup=50,
                      max_len=args.max_len, save_every=0, heldout_frac=args.heldout_frac, vocab_size=args.vocab,
                      n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head, log_every=0,
                      max_seconds=min(args.sft_s, max(1.0, left() - args.reserve_s)), split_words=False,
                      split_digits=True, resume=False, lr_by_time=True, amp=cuda, device="cuda" if cuda else "cpu")
        export_bf16(sft_out, work / "m0_bf16")  # what the state carries
        shutil.rmtree(sft_out, ignore_errors=True)
        if cuda:
            torch.cuda.empty_cache()
        state["sft"] = {"steps": r["steps_done"], "final_loss": round(r["final_loss"], 4), "examples": r["examples"],
                        "seconds": round(time.time() - t, 1), "model": f"Llama {args.n_layer} layers, d={args.d_model}, "
                        f"{args.n_head} heads, vocab {args.vocab}, weights rounded to bf16"}
        save()
    m0 = fp32_copy(work / "m0_bf16", work / "m0")  # the bf16 values as fp32, built once per call

    # 2. the arms, each a loop run
    phases = {n: BY_NAME[n].run for n in ("generate", "verify", "repair", "curate")}

    def progress(stage: str, done: int, total: int) -> None:
        if total and done == total:
            print(f"  {stage}: {done}/{total} ({time.time() - t_start:.0f} s)", flush=True)

    base = work / "arms" / args.arms[0]
    for arm in args.arms:
        a = state["arms"].setdefault(arm, {})
        if a.get("done"):
            continue
        kind = "rft" if arm_base(arm) == "rft" else "rl"
        same = [x["seconds"] for x in state["arms"].values() if x.get("done") and x.get("kind") == kind]
        est = statistics.median(same) if same else (args.rl_est_s if kind == "rl" else 0.0)
        if left() - args.reserve_s < est * 0.8:
            save(f"{arm} not started in this call: about {est:.0f} s estimated, {left():.0f} s left")
            break
        run_dir = work / "arms" / arm
        if arm == args.arms[0]:
            store.write_records(run_dir, "tasks", held)
        else:
            try:
                share_start(base, run_dir)
            except Exception as e:  # noqa: BLE001 - the first arm has not sampled its pool yet
                save(f"{arm} not started: {type(e).__name__}: {e}")
                break
        s = arm_settings(args, arm_base(arm), m0, backend, left() - args.reserve_s)
        t = time.time()
        print(f"arm {arm}: starting ({left():.0f} s left)", flush=True)
        try:
            out = run_loop(run_dir, s, progress, phases)
        except Exception as e:  # noqa: BLE001 - reported; the state keeps what finished
            a.update(error=f"{type(e).__name__}: {e}"[:600])
            save(f"{arm} failed: {a['error']}")
            break
        a["seconds"] = round(a.get("seconds_before", 0.0) + time.time() - t, 1)
        a["kind"] = kind
        if out.get("stopped"):
            a.update(stopped=out["stopped"], seconds_before=a["seconds"])
            save(f"{arm} stopped: {out['stopped']}")
            break
        a.update(done=True, stopped="")
        if cuda:
            torch.cuda.empty_cache()
        save()
        print(json.dumps({"arm": arm, **{k: v for k, v in out["metrics"][-1].items() if k in ("pass@1", "pass@1_diff", "rl")}},
                         default=str), flush=True)
    state["notes"].append(f"call {len(state['commands'])}: {time.time() - t_start:.0f} s of a {args.budget_s:.0f} s budget; "
                          f"arms done: {[a for a, x in state['arms'].items() if x.get('done')]}")
    save()
    if args.state_out:
        parts = pack_loop_state(work, Path(args.state_out))
        print(f"state: {len(parts)} part(s), {sum(p.stat().st_size for p in parts) / 1e6:.1f} MB in {args.state_out}",
              flush=True)
    print(render(args, work, state), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-corpus", default="", help="write the procedural corpus (tasks + sft) here and exit")
    ap.add_argument("--tasks", type=int, default=8000, help="task programs in the corpus (make-corpus)")
    ap.add_argument("--backend", default="", help="answers' backend (make-corpus: cuda) / verifier backend (run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default="bench/data/loop_corpus")
    ap.add_argument("--work", default="/tmp/kernelmill_loop_bench", help="where the run lives during a call")
    ap.add_argument("--fresh", action="store_true", help="start over (remove --work first)")
    ap.add_argument("--redo-sft", action="store_true",
                    help="keep only the state's repair dialogues: SFT, m0 and every arm run again (the first call "
                         "of a new run only)")
    ap.add_argument("--state-in", default="", help="a directory of loop_state.tar.NN parts from an earlier call")
    ap.add_argument("--state-out", default="", help="write the state's parts here at the end of the call (e.g. $OUT)")
    ap.add_argument("--results", default="")
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--reserve-s", type=float, default=45, help="kept back for the state and the report")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, the first samples the pool ({', '.join(ARMS)}; "
                    "ARM@TAG runs ARM again under its own name)")
    ap.add_argument("--rl-est-s", type=float, default=150, help="an RL arm's expected seconds before one has run")
    ap.add_argument("--server", default="local", help="loop.server: local (in-process; the GPU image), transformers, auto")
    ap.add_argument("--heldout-frac", type=float, default=0.1, help="the SFT split of the corpus")
    ap.add_argument("--eval-tasks", type=int, default=16, help="E: held-out tasks every model is evaluated on")
    ap.add_argument("--pool-tasks", type=int, default=24, help="the round's pool: tasks sampled for RFT rows and RL")
    ap.add_argument("--k", type=int, default=8, help="answers per task (pool and E)")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-new-tokens", type=int, default=320)
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight (generate.concurrency)")
    ap.add_argument("--repair-turns", type=int, default=2, help="repair.max_turns on the pool")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--timing-trials", type=int, default=3)
    ap.add_argument("--compile-workers", type=int, default=0, help="0: the box's cores")
    ap.add_argument("--exec-workers", type=int, default=8)
    ap.add_argument("--rft-per-task", type=int, default=4, help="curate.rft_max_per_task")
    ap.add_argument("--rft-steps", type=int, default=60)
    ap.add_argument("--rft-lr", type=float, default=2e-4)
    ap.add_argument("--rl-steps", type=int, default=5)
    ap.add_argument("--group", type=int, default=8, help="loop.group_size")
    ap.add_argument("--prompts", type=int, default=4, help="loop.prompts_per_step")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--rl-lr", type=float, default=2e-5)
    ap.add_argument("--fail-share", type=float, default=0.25, help="loop.rl_fail_share")
    ap.add_argument("--dynamic-rounds", type=int, default=1, help="train.dynamic_max_rounds")
    ap.add_argument("--sft-s", type=float, default=60)
    ap.add_argument("--sft-steps", type=int, default=6000, help="schedule length (the time budget usually ends SFT)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-len", type=int, default=2048,
                    help="model positions and SFT cut: measured on the H100 run of 041f5c1 with this tokenizer, the "
                         "corpus's two-turn repair dialogues are 639-1331 tokens (median 890) and the pool's repair "
                         "prompts 617-1581 tokens before their 320 new ones: 1024 cut or overran most of them")
    ap.add_argument("--repair-sft-repeat", type=int, default=4,
                    help="times each repair dialogue appears in the SFT corpus (1: once)")
    ap.add_argument("--repair-sft-tasks", type=int, default=96,
                    help="training tasks given a planted-bug answer, verified; each failure a two-turn SFT dialogue")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=4)
    args = ap.parse_args()
    if args.make_corpus:
        make_prompted_corpus(Path(args.make_corpus), args.tasks, args.backend or "cuda", args.seed, args.heldout_frac)
        return 0
    args.arms = [a for a in args.arms.split(",") if a]
    bad = [a for a in args.arms if arm_base(a) not in ARMS]
    if bad:
        raise SystemExit(f"--arms: unknown {bad}; choose from {', '.join(ARMS)}")
    if not args.results:
        args.results = default_results("loop")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
