"""GPU benchmark of the training stage, RL with signal: a small model trained from scratch on a tiered
procedural teacher corpus; the held-out tiers on which SFT passes about half of its samples become the
RL and evaluation mix; SFT vs SFT+RL with all stabilisers vs RL with each stabiliser (PrimeEcho,
Buffered Dynamic Retry, MirrorPop) switched off, pass@1 with 95% bootstrap intervals over tasks, and
every RL step's groups logged.

Two steps:

    python bench/bench_train_gpu.py --make-corpus bench/data/train_corpus --tasks 8000 \\
        --tier-shares 1=0.4,2=0.2,3=0.2,4=0.2                                               (here, CPU)
    bash bench/gpu_tier.sh train                                                          (GPU box)

The corpus: ``--tasks`` distinct programs from bench/lib/task_families.py in four tiers (1: the
original elementwise chains and row reductions / softmax; 2: longer chains and a broadcast row-vector
input; 3: reductions and softmax followed by elementwise work; 4: logsumexp and row normalisations
with chains before and after), each with the compact teacher's answer (bench/lib/teacher_compact.py) for
``--backend``: an sft row and an rl row; ``families.json`` holds each task's op combination and tier.
Held-out tasks (train.data.is_heldout on task_id) are never trained on in any stage.

Phases of the run, in order, each under a time budget (a phase that does not fit is reported as
"not run", never estimated):

  1. SFT on the training tasks, each tier's share kept per ``--sft-tiers`` (with ``--sft-s``, the two
     knobs of how strong SFT gets on each tier). Alongside, the teacher's own answers for the
     screening and evaluation tasks go through the verifier on this machine (a per-tier teacher
     check, and a warm verdict cache: a model answer equal to the teacher's is verified once).
  2. Tier screening: ``--screen-samples`` sampled answers of the SFT model for ``--screen-per-tier``
     held-out tasks of each tier. The tiers whose sample pass rate lies in [``--band-lo``,
     ``--band-hi``] (else the one nearest the band's middle) become the mix (``--eval-tiers`` names
     them instead). Screening tasks are never evaluated, so the choice uses no evaluation outcome.
  3. SFT pass@1 (greedy) on ``--eval-tasks`` held-out tasks of the chosen tiers.
  4. RL arms (``--arms``): the first gets ``--rl-s``, the others ``--ablation-rl-s`` and at most the
     first arm's step count. RL prompts: held-out tasks of the chosen tiers outside the evaluation
     set, screened ones that SFT always solved left out. Each arm is evaluated like SFT, with the
     paired bootstrap interval of its difference to SFT on the same tasks.

Several device calls (one holds 10 minutes): ``--save-state DIR`` writes the SFT policy (bf16-rounded,
two tar parts of 15 MB) with the chosen tiers, the RL prompts' screening and the SFT evaluation;
``--load-state DIR`` in a later call skips phases 1-3 and runs ``--arms`` from that same policy, so every
arm is compared with one SFT model. ``--eval-steps 8`` also evaluates each arm at step 8 (ablations run
at most the first arm's steps: compare them with the first arm's row at the same step).

The verifier runs as the RL reward needs it: correctness only (no timing), executions cut at
``--run-timeout-s``, and without the full-build fallback (``--full-build-fallback`` turns it on): an
answer whose torch-free CUDA source fails its bare build is a compile error with that build's message
(verifier/build/pool.py), instead of a 60-90 s nvcc build of the same source with all of torch's headers that
fails the same way at the tail of every rollout turn.

Every RL step's record (rewards, groups with zero advantage, all-pass / all-fail / mixed groups, retry
buffer size, additions, draws and evictions, sequences MirrorPop dropped, tokens with a non-zero
advantage) is appended to ``$OUT/rl_steps.jsonl`` as it happens, each result row to
``$OUT/train_rows.jsonl``, and the markdown (``--results`` and its copy in $OUT) is rewritten after
every row, so a run cut off still leaves its numbers. Each step also records where its time went
(sampling, the verifier reward, the update) and how many distinct answers it verified.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import default_results, device_name  # noqa: E402
from kernelmill.errors import InputError  # noqa: E402
from bench.lib.train_export import pack_policy, resume_rl_arm, round_to_bf16, save_rl_arm, unpack_policy  # noqa: E402
from bench.lib.family_corpus import check_teacher_cpu, make_tiered_corpus, read_families, write_sft_corpus  # noqa: E402
from bench.lib.train_report import Report, fmt_ci  # noqa: E402

STATE_FILE = "train_state.json"  # --save-state / --load-state: the chosen mix and the SFT evaluation
ARMS = {"all": ("SFT + RL (all stabilisers)", {}), "no_prime_echo": ("RL without PrimeEcho", {"prime_echo": False}),
        "no_retry": ("RL without Buffered Dynamic Retry", {"retry": False}),
        "no_mirrorpop": ("RL without MirrorPop", {"mirrorpop": False})}


# ---------------------------------------------------------------------------- the run (GPU box)


def run(args) -> int:
    import torch
    from transformers.utils import logging as hf_logging

    from bench.lib.task_families import TIERS, parse_shares
    from train import data as D
    from train.evaluate import diagnose, evaluate_rows, paired_bootstrap_diff, per_task_pass1, summarise_steps
    from train.model import latest_checkpoint, load_pretrained, write_serving_files
    from train.rl import train_rl
    from train.rollout import Score, verifier_reward_fn
    from train.sft import train_sft
    from bench.lib.train_tiers import TierScreen, round_robin, screen_tiers, split_by_tier

    hf_logging.disable_progress_bar()
    torch.backends.cuda.matmul.allow_tf32 = True
    t_start = time.time()
    left = lambda: args.budget_s - (time.time() - t_start)  # noqa: E731
    work = Path(args.work)
    corpus = Path(args.corpus)
    backend = args.backend or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rows = D.rows_of(D.load_corpus(corpus, "rl"))
    if rows and rows[0].get("backend") not in (backend, None):
        raise SystemExit(f"corpus {corpus} holds {rows[0]['backend']} answers; this run verifies on {backend}")
    sft_rows = {r["task_id"]: r for r in D.rows_of(D.load_corpus(corpus, "sft"))}
    fams = read_families(corpus)
    tier_of = lambda r: fams.get(r["task_id"], {"tier": 1})["tier"]  # noqa: E731
    train_rows, held_all = D.split_rows(rows, args.heldout_frac, 0)
    split = split_by_tier(held_all, tier_of, args.screen_per_tier, args.eval_tasks, TIERS)
    screen, eval_pool, rl_pool = split.screen, split.eval_pool, split.rl_pool
    verify_cfg = {"trials": args.trials, "timing_trials": args.timing_trials, "warmup": 1, "time_torch_compile": False,
                  "exec_workers": args.exec_workers, "compile_workers": os.cpu_count() or 4, "compile_timeout_s": 240,
                  "run_timeout_s": 60}
    reward_fn = verifier_reward_fn(backend, verify_cfg)  # one cache: identical answers are verified once

    def rl_reward(items):  # RL optimises correctness: with the cap, equally correct answers tie (no timing noise)
        sc = reward_fn(items)
        if not args.rl_reward_cap:
            return sc
        return [Score(min(s.reward, args.rl_reward_cap), s.correct, s.feedback, s.stage) for s in sc]

    info = {"device": device_name(), "backend": backend, "tasks": len(rows), "train_tasks": len(train_rows),
            "heldout_tasks": len(held_all), "per_tier": {k: sum(tier_of(r) == k for r in rows) for k in TIERS},
            "command": " ".join(["python3", "bench/bench_train_gpu.py", *sys.argv[1:]])}
    rep = Report(args, info)
    print(json.dumps(info), flush=True)

    # 1. SFT on the kept share of each tier; the teacher's answers verified alongside, in chunks, until SFT ends
    sft_corpus = work / "sft_corpus"
    info["sft_kept"] = write_sft_corpus(corpus, sft_corpus, fams, parse_shares(args.sft_tiers))
    trained_sigs = {fams.get(x["task_id"], {}).get("sig") for x in D.rows_of(D.load_corpus(sft_corpus, "sft"))
                    if not D.is_heldout(x["task_id"], args.heldout_frac)}
    teacher: dict[int, list[int]] = {k: [0, 0] for k in TIERS}
    stop = threading.Event()

    def check_teacher() -> None:
        # round-robin over the tiers: each tier's screening tasks, then its evaluation candidates
        order = round_robin([screen[k] + eval_pool[k] for k in TIERS], args.teacher_check)
        for c in range(0, len(order), args.verify_chunk):
            if stop.is_set():
                return
            chunk = [r for r in order[c: c + args.verify_chunk] if r["task_id"] in sft_rows]
            try:
                scores = reward_fn([(r, sft_rows[r["task_id"]]["messages"][-1]["content"]) for r in chunk])
            except Exception as e:  # noqa: BLE001 - reported, never fatal to the training run
                rep.note(f"teacher check error: {type(e).__name__}: {e}"[:500])
                return
            for r, s in zip(chunk, scores):
                teacher[tier_of(r)][0] += int(s.correct)
                teacher[tier_of(r)][1] += 1
                if not s.correct:
                    print("teacher answer FAILED", tier_of(r), fams.get(r["task_id"], {}).get("sig"), s.stage,
                          s.feedback[:300], flush=True)

    def do_sft():
        checker = threading.Thread(target=check_teacher, daemon=True)
        checker.start()
        sft_out = work / "sft"
        r = train_sft(sft_corpus, sft_out, steps=args.sft_steps, batch_size=args.batch_size, lr=args.lr, warmup=50,
                      max_len=args.max_len, save_every=0, heldout_frac=args.heldout_frac, vocab_size=args.vocab,
                      n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head, log_every=0,
                      max_seconds=min(args.sft_s, max(1.0, left() - 120)), split_words=False, split_digits=True,
                      resume=False, lr_by_time=True, amp=True, device=dev)
        print(json.dumps({k: v for k, v in r.items() if k != "checkpoint"}), flush=True)
        if rep.out and not args.save_state:  # with a saved state $OUT is at the device tool's 8 files
            (rep.out / "metrics_sft.jsonl").write_text((sft_out / "metrics.jsonl").read_text())
        stop.set()
        checker.join(timeout=max(1.0, min(args.teacher_wait_s, left() - 60)))
        model, tok = load_pretrained(latest_checkpoint(sft_out))
        lens = [len(D.encode_text(tok, sft_rows[x["task_id"]]["messages"][-1]["content"])) for k in TIERS
                for x in eval_pool[k][:8] if x["task_id"] in sft_rows]
        plen = [len(D.encode_chat(tok, D.prompt_messages(x), add_generation_prompt=True)[0]) for k in TIERS
                for x in eval_pool[k][:8]]
        rep.note(f"SFT: {r['steps_done']} steps in {r['seconds']} s, final loss {r['final_loss']:.4f}, {r['examples']} "
                 f"examples. Teacher answers in tokens: max {max(lens, default=0)} (--max-new-tokens "
                 f"{args.max_new_tokens}); prompt + answer max {max((a + b for a, b in zip(plen, lens)), default=0)} "
                 f"(--max-len {args.max_len}). Teacher check ({backend} verifier, run alongside SFT): "
                 + ", ".join(f"tier {k} {v[0]}/{v[1]}" for k, v in teacher.items()) + ".")
        round_to_bf16(model)  # the policy every arm starts from, identical in a later call (pack_policy)
        model.save_pretrained(str(sft_init))
        write_serving_files(sft_init, tok)
        return model, tok, r["steps_done"]

    sft_init = work / "sft_policy"  # the SFT policy every arm starts from (bf16-rounded weights, fp32 model)
    state: dict = json.loads((Path(args.load_state) / STATE_FILE).read_text()) if args.load_state else {}
    if state:
        if state["corpus_rows"] != len(rows) or state["sft_tiers"] != args.sft_tiers:
            raise SystemExit(f"--load-state {args.load_state}: saved for {state['corpus_rows']} rl rows and --sft-tiers "
                             f"{state['sft_tiers']}; this run has {len(rows)} and {args.sft_tiers}")
        if any(Path(args.load_state).glob("policy.tar.*")):
            unpack_policy(Path(args.load_state), sft_init)
            model, tok = load_pretrained(sft_init)
        elif args.resume_arm and len([a for a in args.arms.split(",") if a]) == 1:
            model, tok = None, None  # the one arm goes on from its own saved policy: no SFT weights needed here
        else:
            raise SystemExit(f"--load-state {args.load_state}: no SFT policy parts (policy.tar.*), and an arm here "
                             "starts from SFT")
        sft_steps = state["sft_row"].get("steps", "")
        teacher.update({int(k): v for k, v in state["teacher"].items()})
        rep.note(f"SFT policy, tiers and the SFT evaluation from the saved state of an earlier call "
                 f"(--load-state; {state['note']}).")
    else:
        model, tok, sft_steps = do_sft()

    # 2. tier screening, or the tiers named on the command line
    if state:
        scr = TierScreen({int(k): v for k, v in state["rates"].items()}, state["chosen"], set(state["always"]))
    elif args.eval_tiers == "auto":
        t = time.time()
        scr = screen_tiers(model, tok, screen, reward_fn, args.screen_samples, args.band_lo, args.band_hi,
                           temperature=args.temperature, max_new_tokens=args.max_new_tokens, batch=args.gen_batch)
        rep.note(f"Tier screening: {sum(map(len, screen.values()))} tasks x {args.screen_samples} samples in "
                 f"{time.time() - t:.0f} s.")
    else:
        scr = TierScreen(chosen=sorted(int(x) for x in args.eval_tiers.split(",")))
    rates, chosen, always = scr.rates, scr.chosen, scr.always
    for k in TIERS:
        rep.tier({"tier": k, "screened_tasks": len(screen[k]) if rates else 0,
                  "samples": len(screen[k]) * args.screen_samples if rates else 0, "sample_pass_rate": rates.get(k, ""),
                  "teacher_ok": f"{teacher[k][0]}/{teacher[k][1]}", "eval_pool": len(eval_pool[k]),
                  "rl_pool": len(rl_pool[k]), "chosen": "yes" if k in chosen else ""})
    evalset = split.eval_set(chosen, args.eval_tasks)
    rl_rows = split.rl_prompts(chosen, always)
    unseen = {x["task_id"] for x in evalset if fams.get(x["task_id"], {}).get("sig") not in trained_sigs}
    tiers_txt = ",".join(map(str, chosen))
    rep.note(f"Mix: tiers {tiers_txt}; {len(evalset)} evaluation tasks ({len(unseen)} with an op combination SFT never "
             f"saw), {len(rl_rows)} RL prompts ({sum(x['task_id'] not in always for k in chosen for x in screen[k])} "
             "screened, the rest unscreened).")
    if not evalset:
        rep.note("No evaluation task in the chosen tiers: stopping.")
        return 1

    # 3. SFT pass@1 on the evaluation set
    base: dict[str, float] = {}

    def evaluate(name: str, model_dir: Path | None, extra: dict, mdl=None, is_base: bool = False) -> float:
        if left() < args.min_eval_s:
            rep.add({"run": name, "tiers": tiers_txt, "pass@1": "not run (budget)", **extra})
            return 0.0
        t = time.time()
        if mdl is None:
            mdl, _ = load_pretrained(latest_checkpoint(model_dir))
            mdl.to(dev)
        res = evaluate_rows(mdl, tok, evalset, reward_fn, n=1, max_new_tokens=args.max_new_tokens, batch=args.gen_batch)
        p1 = per_task_pass1(res)
        stages: dict = {}
        for p in res["per_task"]:
            stages[p["stages"][0]] = stages.get(p["stages"][0], 0) + 1
        un = [p1[x] for x in p1 if x in unseen]
        row = {"run": name, "tiers": tiers_txt, "pass@1": round(res["pass@1"], 3), "ci95": fmt_ci(res["pass@1_ci95"]),
               "pass@1_unseen_combo": round(sum(un) / len(un), 3) if un else "",
               "mean_reward": round(res["mean_reward"], 3), "stages": stages, **extra,
               "seconds": round(time.time() - t, 1)}
        if is_base:
            base.update(p1)
        elif base:
            ids = sorted(base)
            d = paired_bootstrap_diff([base[x] for x in ids], [p1[x] for x in ids])
            row.update(vs_sft=round(d[0], 3), vs_sft_ci95=fmt_ci(d[1:]))
            extra["_diff"] = d
        row["per_task"] = {x: int(v) for x, v in p1.items()}
        rep.add({k: v for k, v in row.items() if k != "per_task"})
        rep.append_jsonl("train_rows.jsonl", {"run": name, "per_task": row["per_task"]})
        return time.time() - t

    if state:  # the SFT row and its per-task outcomes as the call that trained SFT measured them
        rep.add(state["sft_row"])
        base.update(state["sft_per_task"])
        eval_s = float(state["sft_row"]["seconds"])
    else:
        model.to(dev)
        eval_s = evaluate("SFT only", None, {"steps": sft_steps}, mdl=model, is_base=True)
        if args.save_state:
            parts = pack_policy(model, tok, Path(args.save_state))
            sft_row = next(x for x in rep.rows if x["run"] == "SFT only")
            Path(args.save_state, STATE_FILE).write_text(json.dumps({
                "corpus_rows": len(rows), "sft_tiers": args.sft_tiers, "rates": rates, "chosen": chosen,
                "always": sorted(always), "teacher": teacher, "sft_row": sft_row, "sft_per_task": dict(base),
                "note": f"{info['device']}, {sft_steps} SFT steps, command {info['command']}"}))
            rep.note(f"Saved the SFT policy ({len(parts)} parts, bf16) and this state to {args.save_state} "
                     "(--load-state there runs the arms from the same SFT policy in a later call).")
    del model

    # 4. RL arms, each evaluated at the --eval-steps it reaches and where it stops
    arms = [a for a in args.arms.split(",") if a]
    main_steps = args.rl_steps
    marks = sorted({int(x) for x in args.eval_steps.split(",") if x.strip()})
    reserve = 1.5 * eval_s + 15  # one evaluation of an RL checkpoint: its new answers are not in the cache (H100: 85 s vs SFT 58 s)
    try:
        resumed = resume_rl_arm(Path(args.resume_arm), arms[0], work / f"rl_{arms[0]}") if args.resume_arm and arms else 0
    except InputError as e:
        raise SystemExit(f"--resume-arm {e}") from None
    if resumed and tok is None:
        tok = load_pretrained(latest_checkpoint(work / f"rl_{arms[0]}"))[1]
    for k, key in enumerate(arms):
        name, flags = ARMS[key]
        cap = args.rl_steps if k == 0 else main_steps
        start = resumed if k == 0 else 0
        targets = [m for m in marks if start < m < cap] + [cap]
        budget = min(args.rl_s if k == 0 else args.ablation_rl_s, left() - reserve * len(targets) - 15)
        if budget < args.min_rl_s or not rl_rows:
            rep.add({"run": name, "tiers": tiers_txt, "pass@1": "not run (budget)" if rl_rows else "not run (no prompts)"})
            continue
        t = time.time()
        out = work / f"rl_{key}"
        if not start:
            shutil.rmtree(out, ignore_errors=True)
        done = start
        for target in targets:
            spent = time.time() - t
            if done and budget - spent < args.min_rl_s:
                break
            rr = train_rl(sft_corpus, out, init=str(sft_init), reward_fn=rl_reward, rows=rl_rows, steps=target,
                          prompts_per_step=args.prompts, group_size=args.group, turns=args.turns,
                          max_new_tokens=args.max_new_tokens, temperature=args.temperature, lr=args.rl_lr,
                          ppo_epochs=args.ppo_epochs, save_every=0, max_seconds=budget - spent, resume=True,
                          seed=args.seed, device=dev, rollout_bf16=args.rollout_bf16,
                          mirrorpop_threshold=args.mirrorpop_threshold,
                          on_step=lambda rec, _n=name: rep.step(_n, rec), **flags)
            if rr["steps_done"] <= done:
                break
            done = rr["steps_done"]
            summ = summarise_steps(rep.steps.get(name, []))
            extra = {**{c: summ.get(c, "") for c in Report.COLS if c in summ}, "rl_s": round(time.time() - t, 1)}
            label = name if done >= cap or done < target else f"{name} (step {done})"
            evaluate(label, out, extra)
            rep.note(diagnose(label, summ, extra.get("_diff")))
            if done < target:  # the budget ended the arm early
                break
        if k == 0:
            main_steps = max(1, done)  # ablations get no more steps than the arm they are compared with
            if args.save_arm and done > start:
                save_rl_arm(Path(args.save_arm), key, out)
                rep.note(f"Saved {name} at step {done} to {args.save_arm} (bf16 weights, retry buffer, prompt cursor, "
                         "RNG; no optimizer state): --resume-arm there goes on in a later call with a fresh AdamW.")
    rep.note(f"Total wall time {time.time() - t_start:.0f} s of a {args.budget_s:.0f} s budget.")
    print(rep.render(), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-corpus", default="", help="write the procedural teacher corpus here and exit")
    ap.add_argument("--tasks", type=int, default=8000, help="task programs in the corpus (make-corpus)")
    ap.add_argument("--tier-shares", default="1=0.4,2=0.2,3=0.2,4=0.2", help="corpus share of each tier (make-corpus)")
    ap.add_argument("--check", type=int, default=8, help="cpu twins verified with the cpu verifier (make-corpus)")
    ap.add_argument("--backend", default="", help="answers' backend (make-corpus: cuda) / verifier backend (run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default="bench/data/train_corpus")
    ap.add_argument("--work", default="/tmp/kernelmill_train_bench")
    ap.add_argument("--results", default="")
    ap.add_argument("--budget-s", type=float, default=525, help="the whole run; every phase fits in it")
    # SFT: how strong the starting policy is, per tier
    ap.add_argument("--sft-s", type=float, default=120, help="SFT seconds (the time budget usually ends SFT)")
    ap.add_argument("--sft-tiers", default="1=1,2=1,3=0.3,4=0.15",
                    help="share of each tier's training tasks SFT trains on (0 leaves a tier unseen)")
    ap.add_argument("--sft-steps", type=int, default=6000, help="schedule length (the time budget usually ends SFT)")
    ap.add_argument("--teacher-check", type=int, default=64, help="teacher answers verified alongside SFT, at most")
    ap.add_argument("--teacher-wait-s", type=float, default=30, help="wait for the teacher check after SFT, at most")
    # the mix
    ap.add_argument("--eval-tiers", default="auto", help="'auto' (screening picks) or tiers, e.g. '3,4'")
    ap.add_argument("--screen-per-tier", type=int, default=8)
    ap.add_argument("--screen-samples", type=int, default=2)
    ap.add_argument("--band-lo", type=float, default=0.3)
    ap.add_argument("--band-hi", type=float, default=0.7)
    ap.add_argument("--eval-tasks", type=int, default=40, help="evaluation tasks (over the chosen tiers)")
    ap.add_argument("--min-eval-s", type=float, default=15)
    # RL
    ap.add_argument("--arms", default="all,no_prime_echo,no_retry,no_mirrorpop",
                    help=f"RL arms in order, from {', '.join(ARMS)}; the first is the one the others are held to")
    ap.add_argument("--rl-s", type=float, default=180, help="most RL seconds of the first arm")
    ap.add_argument("--ablation-rl-s", type=float, default=60, help="most RL seconds of each later arm")
    ap.add_argument("--min-rl-s", type=float, default=20)
    ap.add_argument("--rl-steps", type=int, default=40, help="most RL steps of the first arm")
    ap.add_argument("--eval-steps", default="", help="also evaluate each arm at these step counts, e.g. '8'")
    ap.add_argument("--save-state", default="", help="write the SFT policy (bf16 parts) and the chosen mix here")
    ap.add_argument("--load-state", default="", help="skip SFT, screening and its evaluation: use a saved state")
    ap.add_argument("--save-arm", default="", help="write the first arm's policy (bf16) and trainer state here")
    ap.add_argument("--resume-arm", default="", help="the first arm goes on from a --save-arm directory "
                    "(--rl-steps counts from its step 0; needs --load-state)")
    ap.add_argument("--rl-lr", type=float, default=1e-4)
    ap.add_argument("--ppo-epochs", type=int, default=2, help="policy updates per verified batch")
    ap.add_argument("--rl-reward-cap", type=float, default=1.0, help="RL reward ceiling (0: the verifier's, speed-ups included)")
    ap.add_argument("--rollout-bf16", action="store_true", help="sample RL rollouts under bf16 autocast")
    ap.add_argument("--mirrorpop-threshold", type=float, default=0.1, help="mean |logp_rollout - logp_train| to drop at")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.8)
    # verifier
    ap.add_argument("--trials", type=int, default=5, help="correctness trials per answer (the verifier wants 5 or more)")
    ap.add_argument("--timing-trials", type=int, default=0)
    ap.add_argument("--exec-workers", type=int, default=8)
    ap.add_argument("--run-timeout-s", type=float, default=30, help="an answer's execution, at most")
    ap.add_argument("--full-build-fallback", action="store_true",
                    help="rebuild answers that fail their bare build with all torch headers (the verifier's default; "
                         "off here: the RL reward's contract is the headers a source includes)")
    ap.add_argument("--verify-chunk", type=int, default=16)
    # model
    ap.add_argument("--heldout-frac", type=float, default=0.1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--gen-batch", type=int, default=64, help="sequences per generate call in evaluation")
    ap.add_argument("--max-len", type=int, default=512, help="SFT sequence cut (teacher prompt + answer: <= 300 tokens)")
    ap.add_argument("--max-new-tokens", type=int, default=256, help="per answer (teacher answers: <= 240 tokens)")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--n-head", type=int, default=6)
    args = ap.parse_args()
    if args.make_corpus:
        tasks = make_tiered_corpus(Path(args.make_corpus), args.tasks, args.backend or "cuda", args.seed,
                                   args.tier_shares, args.heldout_frac)
        if args.check:
            check_teacher_cpu(tasks, args.check)
        return 0
    bad = [a for a in args.arms.split(",") if a and a not in ARMS]
    if bad:
        raise SystemExit(f"--arms: unknown {bad}; known: {', '.join(ARMS)}")
    if args.resume_arm and not args.load_state:
        raise SystemExit("--resume-arm needs --load-state (the mix and the SFT evaluation it is compared with)")
    if not args.results:
        args.results = default_results("train")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
