"""The training loop as a stage: rounds of sample -> verify -> repair -> curate -> train (RFT, RL or both),
each model evaluated on held-out tasks. Every phase is a sub-run directory whose steps (existing stage
functions, or the trainer) the runner runs (orchestrator.ledger.run_steps) and records in that directory's
ledger, so the loop resumes at any step: this module decides which phases run with which model, the runner
what is already done.

    run_loop(run_dir, settings, progress, phases) -> dict    the ``loop`` stage (`kernelmill loop RUN_DIR`)

Models: m0 is ``loop.model`` (a checkpoint, served by ``loop.server``: `transformers serve`, or the
in-process server of train/serve.py where fastapi is missing) or, when empty, the ``generate.base_url``
endpoint. Round r samples the training split with m(r-1) (``loop.k`` answers per task), verifies, repairs
(``repair.max_turns``) and curates it, then trains (``loop.train``):

- ``rft``: fine-tunes on the rft corpus (correct answers, up to ``curate.rft_max_per_task`` distinct ones per
  task: near-copies dropped, so RFT keeps diverse correct samples) from m(r-1) (a checkpoint) or from
  ``train.model`` (an endpoint has no weights to tune; empty: a tiny model);
- ``rl``: GRPO (train/rl.py) from m(r-1) for ``loop.rl_steps`` steps, groups of ``loop.group_size``, on the
  round's RL pool: the tasks the current policy solved sometimes but not always among its k first answers
  (DAPO-style screening, train.rl.screen_prompts), plus never-solved ones up to ``loop.rl_fail_share`` (Buffered
  Dynamic Retry's repair prompts come from them); while training, an all-pass or all-fail group is replaced
  by another task's group (``train.dynamic_sampling``). Stabilisers and their ablations: ``train.prime_echo``,
  ``train.retry`` (BDR), ``train.mirrorpop`` (the loop benchmark's ablation arms set them: bench/lib/loop_arms.py).
  RL needs weights: m(r-1) must be a checkpoint;
- ``rft+rl``: RFT, then RL from the RFT model.

A round whose pool has nothing to learn from (no correct answer; no screened task) keeps m(r-1).

Every answer is judged through the verifier's one entry (verifier.entry.verify): the rounds' and evaluations'
verify and repair stages, and the RL reward (train.rollout.rl_reward), on the Ray cluster ``flows.ray_address``
names when it names one. The RL reward calls the entry in this process, or through the verifier service when
``train.verifier_url`` names one (a running `kernelmill serve-verifier`, or ``auto``: one started with the run's
[verify] and [flows] settings for each RL phase and stopped after it); the same answers get the same scores.

Tasks: the run's ``tasks`` table, split by ``train.data.is_heldout`` (``train.heldout_frac``,
``train.split_seed``: the trainer's own split), so no held-out task is ever sampled for training.

Layout under ``<run_dir>/loop``:
    round-<r>/pool/       the round's sampled training tasks: candidates, verdicts, dialogues, sft/rft/rl;
                          steps generate, verify, repair, curate
    round-<r>/rft/        the RFT output (checkpoints, metrics.jsonl); step rft, with the model it left
    round-<r>/rl/         the RL output (checkpoints, metrics.jsonl: one line per step with the share of mixed
                          groups before and after replacement, repair prompts drawn and solved, MirrorPop drops);
                          step rl, with the model it left
    eval-<i>/             model i's k samples per held-out task, verified, and scores.json; steps generate,
                          verify, score
    */ledger.json         each sub-run's finished steps (orchestrator/ledger.py): a step recorded there is not
                          run again, unless the model it left is gone
    metrics.jsonl         one line per evaluated model: pass@1, pass@k, avg@k, fast_1.0, fast_1.1
                          (against eager), each with a 95% bootstrap interval over tasks, and the paired
                          difference to model 0 with its interval; RL rounds add their stabiliser summary;
                          written by an evaluation's last step (score), once per model
    loop.md               the same as a table, and the RL steps of each round

``loop.max_seconds`` bounds one call: no phase (sub-run) starts past it, and RFT and RL stop inside it with a
checkpoint (the next call resumes them from it). Not done here: sampling the held-out tasks with repair turns (the
evaluation is first-answer only, as pass@k is defined).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Callable

from kernelmill import store
from kernelmill.errors import InputError
from kernelmill.settings import Settings, keywords_for
from orchestrator import ledger
from orchestrator.ledger import UNFINISHED, Step, run_steps

LOOP = "loop"
METRICS = ("pass@1", "pass@k", "avg@k", "fast_1.0", "fast_1.1")


def split_tasks(tasks: list, s: Settings) -> tuple[list, list]:
    """(training pool, held-out) of the run's tasks, by the trainer's split, capped by loop.pool_tasks and
    loop.eval_tasks (task-id order: deterministic)."""
    from train.data import is_heldout

    tasks = sorted(tasks, key=lambda t: t.task_id)
    held = [t for t in tasks if is_heldout(t.task_id, s.train.heldout_frac, s.train.split_seed)]
    pool = [t for t in tasks if not is_heldout(t.task_id, s.train.heldout_frac, s.train.split_seed)]
    return pool[:s.loop.pool_tasks or None], held[:s.loop.eval_tasks or None]


def task_scores(verdicts: list, k: int) -> dict[str, dict[str, float]]:
    """Per task: pass@1, pass@k, avg@k (share correct of the first k) and fast_p (share of samples that
    are correct and at least p times faster than eager), over the judged verdicts."""
    from verifier.serve.metrics import pass_at_k

    by_task: dict[str, list] = {}
    for v in verdicts:
        if v.judged:  # a verifier or task fault says nothing about the model
            by_task.setdefault(v.task_id, []).append(v)
    out = {}
    for tid, vs in sorted(by_task.items()):
        vs.sort(key=lambda v: v.candidate_id)
        n, c = len(vs), sum(bool(v.correct) for v in vs)
        fast = lambda p: sum(bool(v.correct and (v.speedup_eager or 0) >= p) for v in vs) / n  # noqa: E731
        out[tid] = {"pass@1": pass_at_k(n, c, 1), "pass@k": pass_at_k(n, c, k),
                    "avg@k": sum(bool(v.correct) for v in vs[:k]) / min(n, k), "fast_1.0": fast(1.0),
                    "fast_1.1": fast(1.1)}
    return out


def summarize(scores: dict[str, dict[str, float]], base: dict[str, dict[str, float]] | None) -> dict:
    """Means over tasks with 95% bootstrap intervals, and the paired difference to ``base`` on shared tasks."""
    from train.evaluate import bootstrap_ci, paired_bootstrap_diff

    out: dict = {"tasks": len(scores)}
    for m in METRICS:
        vals = [sc[m] for sc in scores.values()]
        out[m] = round(sum(vals) / len(vals), 4) if vals else None
        out[f"{m}_ci"] = [round(x, 4) for x in bootstrap_ci(vals)] if vals else None
        shared = sorted(set(scores) & set(base or {}))
        if base is not None and shared:
            d, lo, hi = paired_bootstrap_diff([base[t][m] for t in shared], [scores[t][m] for t in shared])
            out[f"{m}_diff"] = [round(d, 4), round(lo, 4), round(hi, 4)]
    return out


@contextlib.contextmanager
def serving(model: str, s: Settings, log: Path):
    """Settings whose generator is ``model`` behind a server (``loop.server``: `transformers serve` in a child
    process, or the in-process server of train/serve.py; auto: the first where fastapi and uvicorn import,
    else the second), or the configured endpoint when ``model`` is empty."""
    if not model:
        if not s.generate.base_url:
            raise InputError("loop.model", "is empty and generate.base_url names no endpoint to sample")
        yield s
        return
    from train.serve import LocalModelServer, ModelServer, prepare_checkpoint, transformers_serve_available

    ckpt, _ = prepare_checkpoint(model)
    local = s.loop.server == "local" or (s.loop.server == "auto" and not transformers_serve_available())
    cls = LocalModelServer if local else ModelServer
    with cls(ckpt, device=s.loop.device, continuous_batching=s.loop.continuous_batching, log_path=log,
             timeout_s=s.loop.serve_timeout_s) as server:
        yield dataclasses.replace(s, generate=dataclasses.replace(s.generate, base_url=server.base_url,
                                                                  model=server.model))


def _sampling(s: Settings) -> Settings:
    """Every task of a sub-run, ``loop.k`` samples each; the rl config keeps every sampled task with its pass
    rate (the loop screens it itself)."""
    return dataclasses.replace(s, generate=dataclasses.replace(s.generate, samples_per_task=s.loop.k,
                                                               tasks_per_level=0),
                               curate=dataclasses.replace(s.curate, out="", rl_keep_trivial=True))


def _read_metrics(path: Path) -> dict[int, dict]:
    if not path.is_file():
        return {}
    return {r["model_index"]: r for r in (json.loads(line) for line in path.read_text().splitlines() if line.strip())}


def _table(rows: list[dict], k: int) -> str:
    head = "| model | round | tasks | " + " | ".join(m.replace("@k", f"@{k}") for m in METRICS) + " |"
    lines = [head, "|" + " --- |" * (3 + len(METRICS))]
    for r in rows:
        cells = []
        for m in METRICS:
            v, ci, d = r.get(m), r.get(f"{m}_ci"), r.get(f"{m}_diff")
            cell = "-" if v is None else f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
            if d:
                cell += f" ({d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}])"
            cells.append(cell)
        lines.append(f"| m{r['model_index']} | {r['model_index']} | {r['tasks']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


RL_STEP_COLS = ("step", "groups", "mixed_share_first", "replaced_groups", "mixed_share", "buffer_drawn",
                "buffer_too_long", "buffer_trajectories", "repair_solved", "repair_pass_rate", "context_full",
                "mirrorpop_dropped", "reward_mean", "pass_rate", "reward_s", "step_s")


def rl_step_table(records: list[dict]) -> str:
    """The stabiliser statistics of RL steps (train/rl.py's metrics lines) as a markdown table: share of
    fresh groups with mixed outcomes when first rolled out and after dynamic sampling replaced the flat ones,
    repair prompts (BDR) drawn, their trajectories and how many of those ended solved, MirrorPop drops."""
    lines = ["| " + " | ".join(RL_STEP_COLS) + " |", "|" + " --- |" * len(RL_STEP_COLS)]
    for r in records:
        cells = []
        for c in RL_STEP_COLS:
            v = r.get(c)
            cells.append("-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def rl_summary(records: list[dict]) -> dict:
    """Per-round totals of the RL steps: mean mixed share (first / after replacement), repair prompts drawn
    and solved (BDR solve rate over repair trajectories), MirrorPop drops."""
    if not records:
        return {}
    n = len(records)
    buf = sum(r.get("buffer_trajectories", 0) for r in records)
    solved = sum(r.get("repair_solved", 0) for r in records)
    return {"steps": n, "mixed_share_first": round(sum(r.get("mixed_share_first", 0.0) for r in records) / n, 4),
            "mixed_share": round(sum(r.get("mixed_share", 0.0) for r in records) / n, 4),
            "replaced_groups": sum(r.get("replaced_groups", 0) for r in records),
            "repair_prompts": sum(r.get("buffer_drawn", 0) for r in records), "repair_trajectories": buf,
            "repair_solved": solved, "repair_solve_rate": round(solved / buf, 4) if buf else None,
            "repair_too_long": sum(r.get("buffer_too_long", 0) for r in records),
            "context_full": sum(r.get("context_full", 0) for r in records),
            "mirrorpop_dropped": sum(r.get("mirrorpop_dropped", 0) for r in records)}


def rl_pool(pool_dir: Path, s: Settings) -> tuple[list[dict], dict]:
    """The round's RL prompts: its rl corpus rows (one per sampled task, with the first-turn pass rate of the
    round's model over ``loop.k`` answers) screened by train.rl.screen_prompts: every task solved sometimes
    but not always, then never-solved tasks up to ``loop.rl_fail_share`` of the pool. Held-out tasks are not
    in the pool (the round samples only the training split)."""
    from train.rl import screen_prompts

    rows = _corpus_rows(pool_dir, "rl")
    if not rows:
        return [], {"screened": 0, "mixed": 0, "all_pass": 0, "all_fail": 0, "kept": 0}
    rows.sort(key=lambda r: r["task_id"])
    # pass counts on a common scale: 0 never, 2 always, 1 sometimes (tasks may have different sample counts)
    code = [0 if r["pass_rate"] <= 0 else 2 if r["pass_rate"] >= 1 else 1 for r in rows]
    return screen_prompts(rows, code, 2, fail_share=s.loop.rl_fail_share)


def run_loop(run_dir: Path, s: Settings, progress, phases: dict[str, Callable]) -> dict:
    """``loop.rounds`` rounds over the run's tasks (see the module docstring); ``phases`` holds the stage
    functions generate, verify, repair and curate (orchestrator/stages.py passes its own). Returns the
    metrics per evaluated model, what each round did, and ``stopped`` (why this call ended before the last
    round's evaluation, e.g. ``loop.max_seconds``; absent when the loop is done). Each phase is a sub-run
    directory run by orchestrator.ledger.run_steps, which skips the steps its ledger records done."""
    t0 = time.time()
    left = lambda: s.loop.max_seconds - (time.time() - t0) if s.loop.max_seconds > 0 else float("inf")  # noqa: E731
    generate, verify, repair, curate = (phases[n] for n in ("generate", "verify", "repair", "curate"))
    root = run_dir / LOOP
    root.mkdir(parents=True, exist_ok=True)
    pool, held = split_tasks(store.read_records(run_dir, "tasks"), s)
    if not pool or not held:
        raise InputError(f"run directory {run_dir}", f"needs tasks on both sides of the split (train.heldout_frac="
                                                     f"{s.train.heldout_frac}): {len(pool)} to train on, {len(held)} held out")
    sample_s = _sampling(s)
    metrics_path = root / "metrics.jsonl"
    done = _read_metrics(metrics_path)
    models = [s.loop.model]
    rounds: list[dict] = []
    extra: dict[int, dict] = {}

    def out_of_time(what: str) -> str:
        return f"loop.max_seconds ({s.loop.max_seconds:.0f} s) spent before {what}" if left() <= 0 else ""

    def sampled(tasks: list, fn: Callable) -> Callable:
        """The generate step of a sub-run: its tasks written, then sampled."""
        def step(d: Path, st: Settings, p) -> dict:
            store.write_records(d, "tasks", tasks)
            return fn(d, st, p)
        return step

    def phase(d: Path, steps: list[Step], what: str, model: str = "", log: str = "") -> ledger.StepsDone:
        return run_steps(d, steps, sample_s, progress, stop=lambda: out_of_time(what),
                         context=lambda: serving(model, sample_s, root / log))

    def score(i: int) -> Callable:
        def step(eval_dir: Path, _st: Settings, _p) -> dict:
            scores = task_scores(store.read_records(eval_dir, "verdicts"), s.loop.k)
            base = None if i == 0 else json.loads((root / "eval-0" / "scores.json").read_text())
            (eval_dir / "scores.json").write_text(json.dumps(scores, indent=1, sort_keys=True))
            row = {"model_index": i, "model": models[i] or s.generate.model, **summarize(scores, base),
                   **extra.get(i, {})}
            if i not in _read_metrics(metrics_path):  # a call killed after this line and before its record
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
            return row
        return step

    def evaluate(i: int) -> str:
        res = phase(root / f"eval-{i}", [Step("generate", sampled(held, generate), context=True),
                                         Step("verify", verify, context=True), Step("score", score(i))],
                    f"evaluating m{i}", models[i], f"serve-eval-{i}.log")
        if "score" in res.entries:
            done.setdefault(i, _read_metrics(metrics_path).get(i) or res.entries["score"].counts)
        return res.stopped

    def finish(stopped: str = "") -> dict:
        rows = [done[i] for i in sorted(done)]
        md = (f"# kernelmill loop {run_dir}\n\n{len(pool)} training tasks, {len(held)} held out, k = {s.loop.k}, "
              f"train = {s.loop.train}; per model: mean over held-out tasks [95% bootstrap interval] "
              f"(difference to m0 [paired bootstrap interval])\n\n" + _table(rows, s.loop.k))
        for r in range(1, s.loop.rounds + 1):
            steps = _rl_records(root / f"round-{r}" / "rl")
            if steps:
                md += f"\n## RL steps, round {r}\n\n{json.dumps(rl_summary(steps))}\n\n" + rl_step_table(steps)
        (root / "loop.md").write_text(md)
        out = {"pool_tasks": len(pool), "heldout_tasks": len(held), "models": models, "rounds": rounds,
               "metrics": rows}
        if stopped:
            out["stopped"] = stopped
        return out

    stopped = evaluate(0)
    if stopped:
        return finish(stopped)
    for r in range(1, s.loop.rounds + 1):
        rdir = root / f"round-{r}"
        pool_dir = rdir / "pool"
        counts: dict = {"round": r}
        rounds.append(counts)
        got = phase(pool_dir, [Step("generate", sampled(pool, generate), context=True),
                               Step("verify", verify, context=True), Step("repair", repair, context=True),
                               Step("curate", lambda d, st, p: {"rows": curate(d, st, p)["rows"]})],
                    f"round {r}'s pool", models[r - 1], f"serve-round-{r}.log")
        if got.stopped:
            return finish(got.stopped)
        counts.update({name: e.counts for name, e in got.entries.items()})
        model = models[r - 1]
        for kind in ("rft", "rl"):
            if kind not in s.loop.train.split("+"):
                continue
            trained = run_steps(rdir / kind, [Step(kind, _trainer(kind, pool_dir, model, s, left, r))], s, progress,
                                stop=lambda: out_of_time(f"round {r}'s {kind}"))
            if trained.stopped:
                if trained.unfinished is not None:  # stopped by the time budget with a checkpoint: resumed next call
                    counts[kind] = trained.unfinished
                return finish(trained.stopped)
            counts[kind] = trained.entries[kind].counts
            model = trained.entries[kind].model or model
            if kind == "rl":
                extra[r] = {"rl": rl_summary(_rl_records(rdir / "rl"))}
        models.append(model)
        stopped = evaluate(r)
        if stopped:
            return finish(stopped)
    return finish()


def _trainer(kind: str, pool_dir: Path, model: str, s: Settings, left: Callable[[], float], r: int) -> Callable:
    """The rft or rl step of round ``r``: it trains from ``model`` into its sub-run directory, and reports
    itself UNFINISHED when the time budget ended it with a checkpoint (the next call resumes from it)."""
    def step(out: Path, _st: Settings, _p) -> dict:
        res = (_rft if kind == "rft" else _rl)(pool_dir, out, model, s, left())
        if res.pop("cut", False):
            res[UNFINISHED] = (f"loop.max_seconds ({s.loop.max_seconds:.0f} s) would end inside round {r}'s {kind}: "
                               f"stopped with a checkpoint after {res.get('steps_done')} of {res.get('steps')} "
                               f"steps (judged by the mean step time)")
        return res
    return step


def _rl_records(out: Path) -> list[dict]:
    from train.sft import read_metrics

    path = out / "metrics.jsonl"
    return read_metrics(path, "rl") if path.is_file() else []


def _rft(pool_dir: Path, out: Path, model: str, s: Settings, left: float) -> dict:
    """RFT from ``model`` (or ``train.model`` for an endpoint) on the pool's rft rows; ``cut`` when the time
    budget ended it early."""
    from train.model import latest_checkpoint
    from train.sft import train_sft

    rows = _corpus_rows(pool_dir, "rft")
    if not rows:  # nothing correct to learn from: the model stays
        return {"skipped": "no correct answer in the pool"}
    kw = keywords_for(train_sft, s.train)
    if s.loop.rft_epochs > 0:  # a few rows trained for many passes are memorised, and the rest forgotten
        kw["steps"] = max(1, min(kw["steps"], math.ceil(s.loop.rft_epochs * len(rows) / kw["batch_size"])))
    if left != float("inf"):
        kw["max_seconds"] = max(1.0, left)
    res = train_sft(pool_dir, out, config="rft", init=model or s.train.model, **kw)
    rec = {k: v for k, v in res.items() if isinstance(v, (int, float, str))}
    rec["model"] = str(latest_checkpoint(out))
    rec["cut"] = res["steps_done"] < res["steps"]
    return rec


def _rl(pool_dir: Path, out: Path, model: str, s: Settings, left: float) -> dict:
    """GRPO from ``model`` on the round's screened RL pool (:func:`rl_pool`) with the [train] trainer settings,
    the loop's steps, group size and prompts per step; ``cut`` when the time budget ended it early."""
    from verifier.common.config import resolve_backend
    from train.model import latest_checkpoint
    from train.rl import train_rl
    from verifier.entry import ray_target

    if not model:
        raise InputError("loop.train", "rl needs weights to train: set loop.model to a checkpoint "
                                       "(an endpoint can be sampled, not trained)")
    rows, screen = rl_pool(pool_dir, s)
    if not rows:  # every sampled task always passed (or nothing was sampled): no group could differ
        return {"skipped": "no task in the pool that the model fails at least sometimes", "screen": screen}
    kw = keywords_for(train_rl, s.train)
    kw.update(steps=s.loop.rl_steps, group_size=s.loop.group_size, prompts_per_step=s.loop.prompts_per_step)
    if left != float("inf"):
        kw["max_seconds"] = max(1.0, left)
    # the reward verifies through the entry where the round's verify stage did (flows.ray_address), in this
    # process or through the verifier service (train.verifier_url, one of the [train] keywords above)
    res = train_rl(pool_dir, out, init=model, rows=rows, backend=resolve_backend(s.run.backend, "run.backend"),
                   verify_cfg=s.verify, verify_ray=ray_target(s.flows.ray_address, s.flows.ray_workers), **kw)
    rec = {k: v for k, v in res.items() if isinstance(v, (int, float, str))}
    rec.update(screen=screen, model=str(latest_checkpoint(out)), cut=res["steps_done"] < res["steps"],
               stabilisers={"prime_echo": kw["prime_echo"], "retry": kw["retry"], "mirrorpop": kw["mirrorpop"],
                            "dynamic_sampling": kw["dynamic_sampling"]})
    return rec


def _corpus_rows(corpus: Path, name: str) -> list[dict]:
    """The rows of one corpus config; [] when curation wrote none (an empty shard is not a dataset)."""
    import pyarrow.parquet as pq

    from train import data as D

    files = sorted((corpus / name).glob("*.parquet"))
    if not sum(pq.ParquetFile(f).metadata.num_rows for f in files):
        return []
    return D.rows_of(D.load_corpus(corpus, name))
