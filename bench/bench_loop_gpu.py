"""GPU benchmark of the loop with a served model: SFT -> serve -> sample -> verify -> curate -> RFT ->
serve again -> sample -> verify, and pass@1 / pass@k / avg@k / fast_1.0 on held-out tasks before and
after the RFT round.

Two steps:

    python bench/bench_loop_gpu.py --make-corpus bench/data/loop_corpus --tasks 8000 --backend cuda   (here)
    bash bench/gpu_tier.sh loop                                                                       (GPU box)

The corpus: ``--tasks`` procedural programs (synth/teacher/task_families.py) as tasks (the ``tasks``
table), and an sft row per task whose chat is the generate stage's own prompt for it
(synth/generate/prompts.build_prompt: system + user) and the compact teacher's answer
(synth/teacher/compact.py). A model trained on it is asked, once served, exactly what `kernelmill
generate` asks any hosted model (train/data.py folds the system message into the user turn, as the
served chat template and the rft rows of the curate stage do).

What one run does, every step a real component (the stage functions are what the `kernelmill`
subcommands run; nothing is simulated):

  1. SFT from scratch (train/sft.py) on the training split; meanwhile the teacher's own answers for a
     few evaluation tasks go through the verifier (checks the verifier on this box, warms its caches).
  2. serve the SFT checkpoint with `transformers serve` (train/serve.py; continuous batching on cuda).
  3. the generate stage samples k answers for every task of two held-out sets, E (evaluation) and P
     (the RFT pool), through the OpenAI client (synth/generate/generators.py) at --temperature.
  4. the verify stage (verify-run) judges every sample (compile pool = the box's cores, builds cached
     by source hash, so a kernel written twice compiles once across the loop).
     --repair-turns N >= 2: on P the repair stage follows 3 (it verifies the first turns with the verify
     stage's function; failed samples get the verifier's feedback as the next user turn, up to N answers).
  5. the curate stage on P: rft rows (correct answers only, deduplicated, curate.rft_max_per_task
     per task).
  6. RFT (train/sft.py, config rft) from the SFT checkpoint on those rows.
  7. serve the RFT checkpoint; generate and verify on E again.
  8. verifier/metrics.summarize_verdicts on E before and after (pass@1 and avg@k from the same k
     samples; fast_1.0: correct and at least as fast as eager PyTorch), and the per-task difference
     of avg@k with a 95% interval (paired bootstrap over tasks, train/evaluate.py).

Held out: train.data.is_heldout(task_id, --heldout-frac), the split SFT uses; E and P are disjoint
slices of the held-out tasks, so no evaluated task is in SFT or in RFT. Every phase has a time budget
inside --budget-s; a phase that does not fit is reported "not run", never estimated. Every result row
is printed as JSON and the markdown table rewritten as soon as it exists ($OUT and --results), so a
run cut off keeps what it measured.
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

from bench.common import FAMILIES_FILE, default_results, device_name, write_family_corpus  # noqa: E402



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


# ---------------------------------------------------------------------------- the report


class Report:
    """Result rows and phase rows, rewritten (a JSON line on stdout, markdown in --results and $OUT)
    whenever one is added."""

    COLS = ["model", "tasks", "samples", "pass@1", "pass@k", "avg@k", "fast_1.0", "statuses", "verifier_errors"]

    def __init__(self, args, info: dict):
        self.args, self.info = args, info
        self.results: list[dict] = []
        self.phases: list[dict] = []
        self.notes: list[str] = []

    def _emit(self, kind: str, row: dict) -> None:
        print(json.dumps({"row": kind, **row}, default=str), flush=True)
        if os.environ.get("OUT"):
            with open(Path(os.environ["OUT"]) / "loop_rows.jsonl", "a") as f:
                f.write(json.dumps({"row": kind, **row}, default=str) + "\n")
        self.write()

    def result(self, row: dict) -> None:
        self.results.append(row)
        self._emit("result", row)

    def phase(self, row: dict) -> None:
        self.phases.append(row)
        self._emit("phase", row)

    def note(self, text: str) -> None:
        self.notes.append(text)
        self._emit("note", {"text": text})

    def write(self) -> None:
        md = self.render()
        Path(self.args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(self.args.results).write_text(md)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], Path(self.args.results).name).write_text(md)

    def render(self) -> str:
        a, i = self.args, self.info
        k = a.k
        lines = [f"# The loop with a served model on {i['device']}", "",
                 f"Command: `{i['command']}` (commit {i['commit']}). Verifier backend: {i['backend']} "
                 f"(trials {a.trials}, timing_trials {a.timing_trials}, no torch.compile timing; compile pool "
                 f"{i['compile_workers']}, {a.exec_workers} execution workers).",
                 f"Corpus: {i['tasks']} procedural tasks, {i['train_tasks']} trained on (SFT), {i['heldout_tasks']} "
                 f"held out; E = {i['eval_tasks']} held-out tasks evaluated before and after RFT ({i['eval_unseen_combo']} "
                 f"with an op combination no training task has), P = {i['pool_tasks']} other held-out tasks sampled "
                 f"for the RFT rows. k = {k} samples per task at temperature {a.temperature}, at most "
                 f"{a.max_new_tokens} new tokens, served by `transformers serve`"
                 f"{' with continuous batching' if i['continuous_batching'] else ''}.",
                 f"Model: Llama {a.n_layer} layers, d={a.d_model}, {a.n_head} heads, byte-level BPE (vocab {a.vocab}) "
                 f"trained on the corpus; SFT budget {a.sft_s:.0f} s; RFT: up to {a.rft_steps} steps, lr {a.rft_lr}, "
                 f"budget {a.rft_s:.0f} s.", "",
                 "| " + " | ".join(c.replace("@k", f"@{k}") for c in self.COLS) + " |",
                 "|" + " --- |" * len(self.COLS)]
        for r in self.results:
            lines.append("| " + " | ".join(str(r.get(c, "")) for c in self.COLS) + " |")
        if self.phases:
            lines += ["", "| phase | seconds | what |", "| --- | --- | --- |"]
            lines += [f"| {p['phase']} | {p.get('seconds', '')} | {p.get('what', '')} |" for p in self.phases]
        if self.notes:
            lines += ["", *[f"- {n}" for n in self.notes]]
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- the run


def git_commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def metrics_row(name: str, run_dir: Path, k: int) -> tuple[dict, dict[str, float]]:
    """(result row, per-task share of correct samples) of a run's verdicts."""
    from kernelmill import store
    from verifier.metrics import summarize_verdicts

    verdicts = store.read_records(run_dir, "verdicts")
    s = summarize_verdicts(verdicts, k=k)
    row = {"model": name, "tasks": s["tasks"], "samples": s["samples"], "verifier_errors": s["verifier_errors"]}
    if s["tasks"]:
        row.update({"pass@1": round(s["pass@1"], 3), "pass@k": round(s[f"pass@{k}"], 3),
                    "avg@k": round(s[f"avg@{k}"], 3), "fast_1.0": round(s["fast_1.0_eager"], 3),
                    "statuses": s["status_counts"]})
    per_task: dict[str, list[bool]] = {}
    for v in verdicts:
        if v.status != "verifier_error":
            per_task.setdefault(v.task_id, []).append(bool(v.correct))
    return row, {t: sum(c) / len(c) for t, c in per_task.items()}


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


def write_training_corpus(out: Path, tasks: list, answers: dict[str, str], backend: str) -> None:
    """The sft config the run trains on: each task's prompt built now by the generate stage's own
    builder (a corpus made before a change to synth/generate/prompts.py still trains on what the
    generate stage will send), then the teacher's answer."""
    from kernelmill import store
    from kernelmill.schema import Message, SFTRow
    from synth.generate.prompts import build_prompt

    shutil.rmtree(out, ignore_errors=True)
    store.write_records(out, "sft", [
        SFTRow(id="s" + t.task_id, task_id=t.task_id, source="teacher", generator="teacher_compact", backend=backend,
               level=t.level, num_turns=1, final_reward=1.0,
               messages=build_prompt(t, backend) + [Message("assistant", answers[t.task_id])]) for t in tasks])


def rft_rows(run_dir: Path, tasks: bool = False) -> int:
    """Rows (or distinct tasks) of a run's rft config; 0 when curation wrote none."""
    import pyarrow.parquet as pq

    files = sorted((run_dir / "rft").glob("*.parquet"))
    if tasks:
        return len({t for f in files for t in pq.read_table(f, columns=["task_id"]).column("task_id").to_pylist()})
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def run(args) -> int:
    import torch
    from transformers.utils import logging as hf_logging

    from kernelmill import store
    from kernelmill.config import load_settings
    from orchestrator.stages import BY_NAME
    from train import data as D
    from train.evaluate import paired_bootstrap_diff
    from train.model import latest_checkpoint
    from train.serve import ModelServer
    from train.sft import train_sft

    hf_logging.disable_progress_bar()
    torch.backends.cuda.matmul.allow_tf32 = True
    t_start = time.time()
    left = lambda: args.budget_s - (time.time() - t_start)  # noqa: E731
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    backend = args.backend or ("cuda" if cuda else "cpu")
    tasks, answers = read_corpus(Path(args.corpus), backend)
    corpus = work / "corpus"
    write_training_corpus(corpus, tasks, answers, backend)
    fams_file = Path(args.corpus) / FAMILIES_FILE
    fams = json.loads(fams_file.read_text()) if fams_file.is_file() else {}
    held = sorted((t for t in tasks if D.is_heldout(t.task_id, args.heldout_frac)), key=lambda t: t.task_id)
    train_combos = {fams.get(t.task_id) for t in tasks if not D.is_heldout(t.task_id, args.heldout_frac)}
    evals, pool = held[:args.eval_tasks], held[args.eval_tasks:args.eval_tasks + args.pool_tasks]
    cores = os.cpu_count() or 4
    info = {"device": device_name(), "backend": backend, "commit": git_commit(), "tasks": len(tasks),
            "train_tasks": len(tasks) - len(held), "heldout_tasks": len(held), "eval_tasks": len(evals),
            "pool_tasks": len(pool), "eval_unseen_combo": sum(fams.get(t.task_id) not in train_combos for t in evals),
            "compile_workers": args.compile_workers or cores,
            "continuous_batching": args.cb == "on" or (args.cb == "auto" and cuda),
            "command": " ".join(["python3", "bench/bench_loop_gpu.py", *sys.argv[1:]])}
    rep = Report(args, info)
    runs = {name: work / name for name in ("eval_sft", "pool", "eval_rft")}
    # an earlier run's checkpoints would be "latest", and its cached answers are keyed by the same checkpoint path
    for name in ("sft", "rft", "llm_cache", *(() if args.keep_work else runs)):
        shutil.rmtree(work / name, ignore_errors=True)
    for name, run_dir in runs.items():
        store.write_records(run_dir, "tasks", evals if name.startswith("eval") else pool)

    def settings(**gen):
        sets = {"run.backend": backend, "generate.samples_per_task": args.k, "generate.temperature": args.temperature,
                "generate.max_tokens": args.max_new_tokens, "generate.concurrency": args.concurrency,
                "generate.max_retries": 2, "generate.timeout_s": args.request_timeout_s,
                "generate.cache_dir": str(work / "llm_cache"), "verify.trials": args.trials,
                "verify.timing_trials": args.timing_trials, "verify.time_torch_compile": False,
                "verify.compile_workers": info["compile_workers"], "verify.exec_workers": args.exec_workers,
                "verify.run_timeout_s": 60, "verify.compile_timeout_s": 240, "generate.tasks_per_level": 0,
                "repair.max_turns": max(1, args.repair_turns),
                "flows.verify_flush_rows": 32, "curate.rft_max_per_task": args.rft_per_task}
        sets.update({f"generate.{k}": v for k, v in gen.items()})
        return load_settings(None, sets)

    def stage(name: str, run_dir: Path, s) -> dict:
        t = time.time()
        counts = BY_NAME[name].run(run_dir, s, lambda *a: None)
        return {"seconds": round(time.time() - t, 1), **{k: v for k, v in counts.items() if not isinstance(v, (list, dict))}}

    # 1. SFT, with the teacher's answers for E and P verified alongside
    teacher: dict = {}

    def check_teacher() -> None:
        from kernelmill.schema import Candidate
        from verifier.api import verify_batch
        from verifier.extract import extract_code

        t = time.time()
        pairs = []
        for task in (evals + pool)[:args.teacher_check if args.teacher_check >= 0 else None]:
            resp = answers[task.task_id]
            pairs.append((task, Candidate(candidate_id=Candidate.make_id(task.task_id, backend, resp), task_id=task.task_id,
                                          backend=backend, generator="teacher_compact", code=extract_code(resp) or resp,
                                          response=resp)))
        try:
            s = settings()
            vs = verify_batch(pairs, config=s.verify, compile_workers=info["compile_workers"])
            teacher.update(ok=sum(v.correct for v in vs), n=len(vs), s=round(time.time() - t, 1),
                           e=sum(v.correct for v in vs[:len(evals)]), ne=min(len(vs), len(evals)),
                           failed=[(v.task_id, v.status, (v.feedback or "")[:200]) for v in vs if not v.correct][:3])
        except Exception as e:  # noqa: BLE001 - reported, never fatal to the run
            teacher.update(error=f"{type(e).__name__}: {e}"[:500])

    checker = threading.Thread(target=check_teacher, daemon=True)
    if args.teacher_check:
        checker.start()  # CPU-bound builds beside GPU-bound SFT
    sft_out = work / "sft"
    sft_budget = min(args.sft_s, max(0.0, left() - args.reserve_s))
    t = time.time()
    r = train_sft(corpus, sft_out, steps=args.sft_steps, batch_size=args.batch_size, lr=args.lr, warmup=50,
                  max_len=args.max_len, save_every=0, heldout_frac=args.heldout_frac, vocab_size=args.vocab,
                  n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head, log_every=0,
                  max_seconds=sft_budget, split_words=False, split_digits=True, resume=False, lr_by_time=True,
                  amp=cuda, device="cuda" if cuda else "cpu")
    if cuda:
        torch.cuda.empty_cache()  # the server and the verifier's processes need the memory SFT cached
    rep.phase({"phase": "SFT", "seconds": round(time.time() - t, 1),
               "what": f"{r['steps_done']} steps, final loss {r['final_loss']:.4f}, {r['examples']} examples"})

    def report_teacher() -> None:
        if not args.teacher_check or teacher.get("reported"):
            return
        teacher["reported"] = "ok" in teacher
        rep.note(f"Teacher check (the compact teacher's own answers through the same verifier, alongside SFT; it also "
                 f"fills the build cache with the kernels a model that learnt them writes): {teacher['ok']}/{teacher['n']} "
                 f"correct, {teacher['e']}/{teacher['ne']} on E, {teacher['s']} s"
                 + (f"; failures {teacher['failed']}" if teacher.get("failed") else "")
                 if "ok" in teacher else f"Teacher check: {teacher.get('error', 'not finished when reported')}")

    def keep_log(server, label: str) -> None:
        """The end of a server's log, appended to $OUT/servers.log (one file: $OUT brings back at most 8)."""
        if os.environ.get("OUT"):
            with open(Path(os.environ["OUT"]) / "servers.log", "a") as f:
                f.write(f"===== transformers serve: {label} ({server.log_path})\n{server.log_tail(12000)}\n")

    def start_server(ckpt: Path, name: str, budget: float):
        """(server, what the first request saw), or (None, why not). A server whose first request fails
        with continuous batching is restarted without it (once), and the report says so."""
        import httpx

        from synth.generate.prompts import build_prompt

        msgs = [{"role": m.role, "content": m.content} for m in build_prompt(evals[0], backend)]
        for cb in ([True, False] if info["continuous_batching"] else [False]):
            server = ModelServer(ckpt, device="cuda" if cuda else "cpu", continuous_batching=cb,
                                 log_path=work / f"server_{name}.log", timeout_s=min(300.0, budget),
                                 extra_args={"cb_max_memory_percent": args.cb_memory} if cb else {})
            try:
                server.start()
                t = time.time()
                r = httpx.post(server.base_url + "/chat/completions", timeout=180.0,
                               json={"model": server.model, "messages": msgs, "temperature": args.temperature,
                                     "max_tokens": 16})
                if r.status_code == 200:
                    u = r.json().get("usage", {})
                    return server, (f"first request {time.time() - t:.1f} s ({u.get('prompt_tokens')} prompt tokens, "
                                    f"{u.get('completion_tokens')} new)")
                why = f"first request HTTP {r.status_code}: {r.text[:300]}"
            except (RuntimeError, httpx.HTTPError) as e:
                why = f"{type(e).__name__}: {e}"
            server.stop()
            keep_log(server, f"{name}{' (continuous batching)' if cb else ''}, failed")
            if cb:
                rep.note(f"transformers serve with continuous batching failed ({why[:300]}); restarted without it")
        return None, why

    def serve_and_sample(name: str, ckpt: Path, targets: list[tuple[str, Path]], budget: float) -> bool:
        """Serve ``ckpt``, run the sampling stage on each target run (concurrently), stop the server."""
        if budget < args.min_phase_s:
            for label, _ in targets:
                rep.phase({"phase": f"sample {label}", "what": "not run (budget)"})
            return False
        t = time.time()
        server, smoke = start_server(ckpt, name, budget)
        timing[f"serve {name}"] = time.time() - t
        if server is None:
            rep.phase({"phase": f"serve {name}", "seconds": round(time.time() - t, 1), "what": f"failed: {smoke[-600:]}"})
            return False
        rep.phase({"phase": f"serve {name}", "seconds": round(time.time() - t, 1),
                   "what": f"transformers serve up in {server.ready_s} s (answers /v1/models), "
                           f"{'continuous batching, ' if server.continuous_batching else ''}model {server.model}; {smoke}"})
        results: dict = {}
        t_sample = time.time()
        try:
            s = settings(base_url=server.base_url, model=server.model)

            def one(label: str, run_dir: Path) -> None:
                st = "repair" if label == "P" and args.repair_turns >= 2 else "generate"
                try:
                    counts = stage("generate", run_dir, s)
                    if st == "repair":  # continues the stored first turns (verifying them first)
                        counts = {**counts, **{f"repair_{k}": v for k, v in stage("repair", run_dir, s).items()}}
                    results[label] = (st, counts)
                except Exception as e:  # noqa: BLE001 - a failed phase is reported, the run goes on
                    results[label] = (st, {"error": f"{type(e).__name__}: {e}"[:400]})

            threads = [threading.Thread(target=one, args=tgt, daemon=True) for tgt in targets]
            for th in threads:
                th.start()
            deadline = time.time() + budget
            for th in threads:
                th.join(timeout=max(0.0, deadline - time.time()))
            late = [label for (label, _), th in zip(targets, threads) if th.is_alive()]
        finally:
            server.stop()  # a sampling stage still running fails its requests now and ends
        for th in threads:
            th.join(timeout=60)
        timing[f"sample {name}"] = time.time() - t_sample
        keep_log(server, name)
        for label, run_dir in targets:
            st, res = results.get(label, ("generate", {"error": "did not end"}))
            n = len(store.read_records(run_dir, "candidates"))
            rep.phase({"phase": f"{st} {label} ({name})", "seconds": res.get("seconds", round(time.time() - t, 1)),
                       "what": (f"cut by its budget; " if label in late else "") + f"{n} candidates; "
                               + json.dumps({k: v for k, v in res.items() if k != "seconds"}, default=str)})
        return True

    def verify(label: str, run_dir: Path) -> dict:
        if left() < args.min_phase_s:
            rep.phase({"phase": f"verify {label}", "what": "not run (budget)"})
            return {}
        try:
            res = stage("verify", run_dir, settings())
            rep.phase({"phase": f"verify {label}", "seconds": res["seconds"],
                       "what": json.dumps({k: v for k, v in res.items() if k != "seconds"})})
            return res
        except Exception as e:  # noqa: BLE001
            rep.phase({"phase": f"verify {label}", "what": f"failed: {type(e).__name__}: {e}"[:400]})
            return {}

    def fit_pool(ver_e: dict) -> Path:
        """P, or its first tasks whose verification fits the budget and still leaves RFT, a second server,
        sampling and verifying E their time (the cost per distinct candidate as measured on E)."""
        distinct_e = ver_e.get("candidates", 0) - ver_e.get("reused", 0)
        if distinct_e <= 0:
            return runs["pool"]
        rate = ver_e["seconds"] / distinct_e
        after = (args.rft_s + timing.get("serve sft", 30.0) + timing.get("sample sft", 60.0) + ver_e["seconds"]
                 + args.min_phase_s)
        allowed = left() - after
        cands = store.read_records(runs["pool"], "candidates")
        codes: dict[str, set] = {}
        for c in cands:
            codes.setdefault(c.task_id, set()).add(c.code)
        keep, cost = [], 0.0
        for task in pool:
            n = len(codes.get(task.task_id, ()))
            if cost + n * rate > allowed:
                break
            keep.append(task)
            cost += n * rate
        if len(keep) == len(pool):
            return runs["pool"]
        fit = work / "pool_fit"
        shutil.rmtree(fit, ignore_errors=True)
        store.write_records(fit, "tasks", keep)
        ids = {t.task_id for t in keep}
        store.write_records(fit, "candidates", [c for c in cands if c.task_id in ids])
        rep.note(f"P cut to its first {len(keep)} of {len(pool)} tasks for verification and RFT: all of them would not "
                 f"leave time for RFT and the second evaluation ({rate:.2f} s per distinct candidate on E, "
                 f"{max(0.0, allowed):.0f} s available, {after:.0f} s kept for what follows)")
        return fit

    # 2-4. serve the SFT model, sample E and P, verify them
    sft_ckpt = latest_checkpoint(sft_out)
    timing: dict[str, float] = {}
    pool_dir = runs["pool"]
    targets = [("E", runs["eval_sft"]), ("P", runs["pool"])]
    sampled = serve_and_sample("sft", sft_ckpt, targets, min(args.sample_s, left() - args.reserve_s))
    if args.teacher_check:
        checker.join(timeout=max(1.0, min(args.teacher_wait_s, left() - args.reserve_s)))
        report_teacher()
    if sampled:
        ver_e = verify("E (SFT)", runs["eval_sft"])
        row, before = metrics_row("SFT", runs["eval_sft"], args.k)
        rep.result(row)
        if args.repair_turns < 2:  # (the repair stage verified P as it went)
            pool_dir = fit_pool(ver_e)
            verify("P (SFT)", pool_dir)
    else:
        before = {}
        rep.result({"model": "SFT", "pass@1": "not run"})

    # 5-6. curate P into rft rows, RFT from the SFT checkpoint
    rft_out = work / "rft"
    rft_ckpt = None
    if sampled and left() > args.rft_min_s + args.min_phase_s:
        t = time.time()
        try:
            cur = stage("curate", pool_dir, settings())
            n_rft = rft_rows(pool_dir)
        except Exception as e:  # noqa: BLE001
            cur, n_rft = {"error": f"{type(e).__name__}: {e}"[:400]}, 0
        rep.phase({"phase": "curate P", "seconds": round(time.time() - t, 1),
                   "what": f"{n_rft} rft rows; " + json.dumps({k: v for k, v in cur.items() if k != 'seconds'}, default=str)[:600]})
        if n_rft:
            t = time.time()
            rr = train_sft(pool_dir, rft_out, config="rft", init=str(sft_ckpt), steps=args.rft_steps,
                           batch_size=args.rft_batch_size, lr=args.rft_lr, warmup=5, max_len=args.max_len, save_every=0,
                           heldout_frac=0.0, log_every=0, max_seconds=min(args.rft_s, left() - args.reserve_s),
                           resume=False, amp=cuda, device="cuda" if cuda else "cpu")
            rft_ckpt = latest_checkpoint(rft_out)
            if cuda:
                torch.cuda.empty_cache()
            rep.phase({"phase": "RFT", "seconds": round(time.time() - t, 1),
                       "what": f"{rr['steps_done']} steps on {rr['examples']} rft rows of {rft_rows(pool_dir, tasks=True)} "
                               f"P tasks (none of E), final loss {rr['final_loss']:.4f}"})
        else:
            rep.phase({"phase": "RFT", "what": "not run (no correct sample in P to train on)"})
    else:
        rep.phase({"phase": "RFT", "what": "not run (budget)"})

    # 7-8. serve the RFT model, sample and verify E again
    if rft_ckpt is not None and serve_and_sample("rft", rft_ckpt, [("E", runs["eval_rft"])],
                                                  min(args.sample_s, left() - args.reserve_s / 2)):
        verify("E (RFT)", runs["eval_rft"])
        row, after = metrics_row("SFT + RFT", runs["eval_rft"], args.k)
        rep.result(row)
        common = sorted(set(before) & set(after))
        if common:
            d, lo, hi = paired_bootstrap_diff([before[t] for t in common], [after[t] for t in common])
            rep.note(f"avg@{args.k} after minus before, per task, on the {len(common)} E tasks with samples in both: "
                     f"{d:+.3f} (95% interval {lo:+.3f} to {hi:+.3f}, paired bootstrap over tasks)")
    else:
        rep.result({"model": "SFT + RFT", "pass@1": "not run"})
    report_teacher()  # when it finished after its first report
    rep.note(f"Total wall time {time.time() - t_start:.0f} s of a {args.budget_s:.0f} s budget.")
    print(rep.render(), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-corpus", default="", help="write the procedural corpus (tasks + sft) here and exit")
    ap.add_argument("--tasks", type=int, default=8000, help="task programs in the corpus (make-corpus)")
    ap.add_argument("--backend", default="", help="answers' backend (make-corpus: cuda) / verifier backend (run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", default="bench/data/loop_corpus")
    ap.add_argument("--work", default="/tmp/kernelmill_loop_bench")
    ap.add_argument("--keep-work", action="store_true", help="keep the run directories of an earlier run (resume)")
    ap.add_argument("--results", default="")
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--reserve-s", type=float, default=60, help="kept back at each phase for the phases after it")
    ap.add_argument("--min-phase-s", type=float, default=15)
    ap.add_argument("--heldout-frac", type=float, default=0.1)
    ap.add_argument("--eval-tasks", type=int, default=32, help="E: held-out tasks evaluated before and after RFT")
    ap.add_argument("--pool-tasks", type=int, default=40, help="P: other held-out tasks sampled for the rft rows")
    ap.add_argument("--k", type=int, default=8, help="samples per task")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-new-tokens", type=int, default=320)
    ap.add_argument("--concurrency", type=int, default=64, help="requests in flight (generate.concurrency)")
    ap.add_argument("--request-timeout-s", type=float, default=120)
    ap.add_argument("--cb", choices=("auto", "on", "off"), default="auto",
                    help="continuous batching in transformers serve (auto: on with cuda)")
    ap.add_argument("--cb-memory", type=float, default=0.2, help="share of GPU memory for the served KV cache")
    ap.add_argument("--sample-s", type=float, default=100, help="most seconds for one serve + sample phase")
    ap.add_argument("--repair-turns", type=int, default=0, help=">= 2: repair dialogues on P (the repair stage)")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--timing-trials", type=int, default=5)
    ap.add_argument("--compile-workers", type=int, default=0, help="0: the box's cores")
    ap.add_argument("--exec-workers", type=int, default=8)
    ap.add_argument("--teacher-check", type=int, default=-1,
                    help="tasks of E then P whose teacher answer is verified alongside SFT (-1: all, 0: none)")
    ap.add_argument("--teacher-wait-s", type=float, default=60,
                    help="most seconds to wait for the teacher check after sampling, before verifying")
    ap.add_argument("--rft-per-task", type=int, default=4, help="curate.rft_max_per_task")
    ap.add_argument("--sft-s", type=float, default=90)
    ap.add_argument("--sft-steps", type=int, default=6000, help="schedule length (the time budget usually ends SFT)")
    ap.add_argument("--rft-s", type=float, default=45)
    ap.add_argument("--rft-min-s", type=float, default=10)
    ap.add_argument("--rft-steps", type=int, default=150)
    ap.add_argument("--rft-batch-size", type=int, default=16)
    ap.add_argument("--rft-lr", type=float, default=2e-4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--n-head", type=int, default=6)
    args = ap.parse_args()
    if args.make_corpus:
        make_corpus(Path(args.make_corpus), args.tasks, args.backend or "cuda", args.seed, args.heldout_frac)
        return 0
    if not args.results:
        args.results = default_results("loop")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
