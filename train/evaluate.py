"""pass@k on held-out tasks, through the verifier.

For each held-out RL row (tasks that :func:`train.data.is_heldout` kept out of every training
stage), ``n`` answers are sampled (``n=1`` with greedy decoding by default), each is verified
against the row's reference program, and pass@k is the unbiased estimator of Chen et al. (2021):

    pass@k = mean over tasks of 1 - C(n - c, k) / C(n, k)      (c correct answers out of n)

Only the first answer counts (no repair turns); ``repair_turns > 1`` also reports the share of tasks
solved within that many feedback turns from the first sample. What it does not measure: speed-ups
(the verifier's reward holds them; ``mean_reward`` is reported).

Intervals: :func:`bootstrap_ci` resamples tasks (not samples: tasks differ far more than samples of
one task do) for a 95% percentile interval of pass@1; :func:`paired_bootstrap_diff` resamples the
same tasks for two models evaluated on them, for the interval of their difference. Percentile
intervals from a few dozen tasks are approximate (they run narrow for small task counts).

An RL run's logged steps (train/rl.py's metrics lines), read: :func:`summarise_steps` sums them (groups with mixed,
all-pass and all-fail outcomes, retry buffer, MirrorPop drops, tokens with a non-zero advantage) and
:func:`diagnose` says in one sentence why RL moved pass@1 or did not, with the paired difference to its start.
"""

from __future__ import annotations

import random
from math import comb
from pathlib import Path

from kernelmill.errors import InputError
from kernelmill.settings import TrainSettings
from train import data as D
from train.rollout import RewardFn, multi_turn_rollouts, sample, decode_response, verifier_reward_fn
from train.model import load_pretrained, resolve_model_dir
from verifier.common.config import resolve_backend


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (1.0 when n - c < k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def bootstrap_ci(values: list[float], *, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (one per task), resampling tasks.

    Deterministic for a seed; (v, v) for a single value. Raises ValueError for no values."""
    if not values:
        raise ValueError("bootstrap_ci needs at least one value")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    lo = means[int((1 - level) / 2 * n_boot)]
    hi = means[min(n_boot - 1, int((1 + level) / 2 * n_boot))]
    return lo, hi


def paired_bootstrap_diff(a: list[float], b: list[float], *, n_boot: int = 2000, level: float = 0.95,
                          seed: int = 0) -> tuple[float, float, float]:
    """(mean(b) - mean(a), low, high): the difference of two models' per-task scores on the same tasks,
    with a percentile interval from resampling tasks jointly (the pairing removes task difficulty
    from the spread). Raises ValueError when the lists differ in length or are empty."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_bootstrap_diff needs two equal, non-empty lists, got {len(a)} and {len(b)}")
    d = [y - x for x, y in zip(a, b)]
    lo, hi = bootstrap_ci(d, n_boot=n_boot, level=level, seed=seed)
    return sum(d) / len(d), lo, hi


def per_task_pass1(res: dict) -> dict[str, float]:
    """task_id -> pass@1 estimate (correct / samples) of an :func:`evaluate_rows` result."""
    return {t["task_id"]: t["correct"] / t["n"] for t in res["per_task"]}


def evaluate_rows(model, tok, rows: list[dict], reward_fn: RewardFn, *, n: int = 1, ks: tuple[int, ...] = (1,),
                  greedy: bool | None = None, max_new_tokens: int = 256, temperature: float = 1.0,
                  repair_turns: int = 1, batch: int = 32) -> dict:
    """pass@k for each k in ``ks`` over ``rows`` (one task each), plus per-task counts."""
    if not rows:
        raise InputError("evaluation rows", "none: no held-out tasks (raise heldout_frac or add tasks)")
    greedy = (n == 1) if greedy is None else greedy
    per_task = []
    rewards: list[float] = []
    for i in range(0, len(rows), max(1, batch // n)):
        chunk = rows[i: i + max(1, batch // n)]
        ctx = [D.encode_chat(tok, D.prompt_messages(r), add_generation_prompt=True)[0] for r in chunk for _ in range(n)]
        outs = sample(model, tok, ctx, max_new_tokens=max_new_tokens, temperature=temperature, greedy=greedy)
        texts = [decode_response(tok, o.ids) for o in outs]
        scores = reward_fn([(r, texts[j * n + s]) for j, r in enumerate(chunk) for s in range(n)])
        for j, r in enumerate(chunk):
            sc = scores[j * n:(j + 1) * n]
            rewards += [s.reward for s in sc]
            per_task.append({"task_id": r["task_id"], "n": n, "correct": sum(s.correct for s in sc),
                             "stages": [s.stage for s in sc]})
    out = {f"pass@{k}": sum(pass_at_k(t["n"], t["correct"], k) for t in per_task) / len(per_task) for k in ks}
    out["pass@1_ci95"] = bootstrap_ci([t["correct"] / t["n"] for t in per_task])
    out.update(tasks=len(per_task), samples=len(rewards), mean_reward=sum(rewards) / len(rewards), per_task=per_task)
    if repair_turns > 1:
        trajs = multi_turn_rollouts(model, tok, [(r, D.prompt_messages(r), i, False) for i, r in enumerate(rows)],
                                    reward_fn, turns=repair_turns, max_new_tokens=max_new_tokens, temperature=temperature)
        out[f"solved_within_{repair_turns}_turns"] = sum(t.solved for t in trajs) / len(trajs)
    return out


def evaluate_checkpoint(model_dir: str | Path, corpus_dir: str | Path, *, backend: str = "cpu",
                        verify_cfg=None, heldout_frac: float = TrainSettings.heldout_frac,
                        split_seed: int = TrainSettings.split_seed, n: int = TrainSettings.eval_n,
                        ks: tuple[int, ...] | None = None, max_new_tokens: int = TrainSettings.max_new_tokens,
                        temperature: float = TrainSettings.temperature, max_tasks: int = TrainSettings.eval_max_tasks,
                        device: str = TrainSettings.device, repair_turns: int = 1, reward_fn: RewardFn | None = None) -> dict:
    """pass@k of a model directory (or a training output's latest checkpoint) on the held-out tasks
    of a corpus's rl config, verified on ``backend``. ``ks`` None: ``[train] eval_k``'s default."""
    ks = tuple(ks or TrainSettings().eval_k)
    model, tok = load_pretrained(resolve_model_dir(model_dir))
    model.to(resolve_backend(device, "train.device", device_index=True))
    _train, held = D.split_rows(D.rows_of(D.load_corpus(corpus_dir, "rl")), heldout_frac, split_seed)
    held = sorted({r["task_id"]: r for r in held}.values(), key=lambda r: r["task_id"])
    if max_tasks:
        held = held[:max_tasks]
    fn = reward_fn or verifier_reward_fn(backend, verify_cfg)
    res = evaluate_rows(model, tok, held, fn, n=n, ks=ks, max_new_tokens=max_new_tokens, temperature=temperature,
                        repair_turns=repair_turns)
    res.update(model=str(model_dir), backend=backend)
    return res


# ---------------------------------------------------------------------------- an RL run's logged steps, read


def summarise_steps(recs: list[dict]) -> dict:
    """An arm's RL steps in a few numbers: what the groups could teach, what the buffer and MirrorPop did."""
    if not recs:
        return {}
    n = len(recs)
    mean = lambda k: round(sum(float(r.get(k) or 0.0) for r in recs) / n, 3)  # noqa: E731
    total = lambda k: int(sum(int(r.get(k) or 0) for r in recs))  # noqa: E731
    rp = [r["repair_pass_rate"] for r in recs if r.get("repair_pass_rate") is not None]
    return {"steps": n, "s_per_step": mean("step_s"), "train_pass_rate": mean("pass_rate"),
            "reward_mean": mean("reward_mean"), "reward_std": mean("reward_std"),
            "zero_adv_share": mean("zero_adv_share"), "groups": total("groups"),
            "mixed_groups": total("mixed_groups"), "all_pass_groups": total("all_pass_groups"),
            "all_fail_groups": total("all_fail_groups"), "buffer_added": total("buffer_added"),
            "buffer_drawn": total("buffer_drawn"), "buffer_max": max(int(r.get("buffer_size", 0)) for r in recs),
            "repair_pass_rate": round(sum(rp) / len(rp), 3) if rp else "",
            "mirrorpop_dropped": total("mirrorpop_dropped"), "trajectories": total("trajectories"),
            "signal_tokens": total("signal_tokens"), "sampled_tokens": total("sampled_tokens")}


def diagnose(name: str, s: dict, diff: tuple | None) -> str:
    """One sentence per arm, from its logged groups: why RL moved pass@1 or did not."""
    if not s:
        return f"{name}: no RL step ran."
    why = (f"{name}: {s['steps']} steps ({s['s_per_step']} s each), {s['groups']} groups: {s['mixed_groups']} mixed, "
           f"{s['all_pass_groups']} all-pass, {s['all_fail_groups']} all-fail; {s['zero_adv_share']:.0%} of groups per "
           f"step had zero advantage; {s['signal_tokens']} of {s['sampled_tokens']} kept sampled tokens carried a "
           f"non-zero advantage; retry buffer: {s['buffer_added']} added, {s['buffer_drawn']} drawn (repair pass "
           f"rate {s['repair_pass_rate'] if s['repair_pass_rate'] != '' else 'n/a'}); MirrorPop dropped "
           f"{s['mirrorpop_dropped']} of {s['trajectories']} sequences.")
    if diff is not None:
        d, lo, hi = diff
        verdict = ("the interval excludes 0" if lo > 0 or hi < 0 else "the interval includes 0: no measurable change")
        why += f" pass@1 change vs SFT {d:+.3f} [{lo:+.3f}, {hi:+.3f}], {verdict}."
    return why
