"""The training loop as a stage: rounds of sample -> verify -> repair -> curate -> fine-tune (RFT), each
model evaluated on held-out tasks. Every phase is an existing stage function over a run directory of its
own, so the loop resumes at any phase like the stages do (each skips what is stored).

    run_loop(run_dir, settings, progress) -> dict        the ``loop`` stage (`kernelmill loop RUN_DIR`)

Models: m0 is ``loop.model`` (a checkpoint, served with `transformers serve`) or, when empty, the
``generate.base_url`` endpoint. Round r samples the training split with m(r-1), verifies, repairs
(``repair.max_turns``) and curates it, and fine-tunes m(r) with the rft corpus (correct answers, up to
``curate.rft_max_per_task`` distinct ones per task: near-copies dropped, so RFT keeps diverse correct
samples) from m(r-1) (a checkpoint) or from ``train.model`` (an endpoint has no weights to tune; empty:
a tiny model). A round whose pool has no correct answer keeps m(r-1).

Tasks: the run's ``tasks`` table, split by ``train.data.is_heldout`` (``train.heldout_frac``,
``train.split_seed``: the trainer's own split), so no held-out task is ever sampled for training.

Layout under ``<run_dir>/loop``:
    round-<r>/pool/       the round's sampled training tasks: candidates, verdicts, dialogues, sft/rft/rl
    round-<r>/rft/        the RFT output (checkpoints, metrics.jsonl)
    eval-<i>/             model i's k samples per held-out task, verified
    metrics.jsonl         one line per evaluated model: pass@1, pass@k, avg@k, fast_1.0, fast_1.1
                          (against eager), each with a 95% bootstrap interval over tasks, and the paired
                          difference to model 0 with its interval; written last, so a model with a line is done
    loop.md               the same as a table

Not done here: RL rounds (`kernelmill train-run RUN_DIR --kind rl` takes the corpus), sampling the
held-out tasks with repair turns (the evaluation is first-answer only, as pass@k is defined).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Callable

from kernelmill import store
from kernelmill.errors import InputError
from kernelmill.settings import Settings, keywords_for

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
    from verifier.metrics import pass_at_k

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
    """Settings whose generator is ``model`` behind `transformers serve` (a checkpoint), or the
    configured endpoint when ``model`` is empty."""
    if not model:
        if not s.generate.base_url:
            raise InputError("loop.model", "is empty and generate.base_url names no endpoint to sample")
        yield s
        return
    from train.serve import ModelServer, prepare_checkpoint

    ckpt, _ = prepare_checkpoint(model)
    with ModelServer(ckpt, device=s.loop.device, continuous_batching=s.loop.continuous_batching, log_path=log,
                     timeout_s=s.loop.serve_timeout_s) as server:
        yield dataclasses.replace(s, generate=dataclasses.replace(s.generate, base_url=server.base_url,
                                                                  model=server.model))


def _sampling(s: Settings) -> Settings:
    """Every task of a sub-run, ``loop.k`` samples each."""
    return dataclasses.replace(s, generate=dataclasses.replace(s.generate, samples_per_task=s.loop.k,
                                                               tasks_per_level=0),
                               curate=dataclasses.replace(s.curate, out=""))


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


def run_loop(run_dir: Path, s: Settings, progress, phases: dict[str, Callable]) -> dict:
    """``loop.rounds`` rounds over the run's tasks (see the module docstring); ``phases`` holds the stage
    functions generate, verify, repair and curate (orchestrator/stages.py passes its own). Returns the
    metrics per evaluated model and what each round did."""
    from train.model import latest_checkpoint
    from train.sft import train_sft

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

    def evaluate(i: int) -> None:
        if i in done:
            return
        eval_dir = root / f"eval-{i}"
        store.write_records(eval_dir, "tasks", held)
        with serving(models[i], sample_s, root / f"serve-eval-{i}.log") as es:
            generate(eval_dir, es, progress)
            verify(eval_dir, es, progress)
        scores = task_scores(store.read_records(eval_dir, "verdicts"), s.loop.k)
        base = None if i == 0 else json.loads((root / "eval-0" / "scores.json").read_text())
        (eval_dir / "scores.json").write_text(json.dumps(scores, indent=1, sort_keys=True))
        row = {"model_index": i, "model": models[i] or s.generate.model, **summarize(scores, base)}
        with open(metrics_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        done[i] = row

    evaluate(0)
    for r in range(1, s.loop.rounds + 1):
        pool_dir = root / f"round-{r}" / "pool"
        store.write_records(pool_dir, "tasks", pool)
        with serving(models[r - 1], sample_s, root / f"serve-round-{r}.log") as ps:
            counts = {"generate": generate(pool_dir, ps, progress), "verify": verify(pool_dir, ps, progress),
                      "repair": repair(pool_dir, ps, progress)}
        counts["curate"] = {"rows": curate(pool_dir, sample_s, progress)["rows"]}
        out = root / f"round-{r}" / "rft"
        if counts["curate"]["rows"].get("rft", 0):
            init = models[r - 1] or s.train.model
            res = train_sft(pool_dir, out, config="rft", init=init, **keywords_for(train_sft, s.train))
            counts["rft"] = {k: v for k, v in res.items() if isinstance(v, (int, float, str))}
            models.append(str(latest_checkpoint(out)))
        else:  # nothing correct to learn from: the model stays
            counts["rft"] = {"skipped": "no correct answer in the pool"}
            models.append(models[r - 1])
        rounds.append({"round": r, **counts})
        evaluate(r)
    rows = [done[i] for i in sorted(done)]
    (root / "loop.md").write_text(f"# kernelmill loop {run_dir}\n\n{len(pool)} training tasks, {len(held)} held out, "
                                  f"k = {s.loop.k}; per model: mean over held-out tasks [95% bootstrap interval] "
                                  f"(difference to m0 [interval])\n\n" + _table(rows, s.loop.k))
    return {"pool_tasks": len(pool), "heldout_tasks": len(held), "models": models, "rounds": rounds,
            "metrics": rows}
