"""Metrics over a set of verdicts: pass@k, avg@k (MusaCoder's Avg@8), fast_p against eager and
against torch.compile.

Definitions (per task, then averaged over tasks; a task's samples are its verdicts in input order):
- pass@k: the unbiased estimator 1 - C(n-c, k) / C(n, k) of Chen et al. (n samples, c correct);
  tasks with fewer than k samples use k = n.
- avg@k: the mean correctness of the task's first k samples (Avg@8 with k = 8).
- fast_p (eager / compile): the share of samples that are correct AND at least p times faster than
  eager PyTorch (resp. torch.compile of the reference), p in (1.0, 1.1); the KernelBench fast_p
  counted over samples. A sample without a timing counts as not fast.
- pass@1_strict / pass@1_partial: pass@1 under each legality policy (Verdict.pass_strict / pass_partial:
  strict forbids torch compute in forward, partial is KernelBench's rule), from the same verdicts, whichever
  policy the run used for ``status``; a verdict that stopped before the question (None) counts as not passed.
- verifier_errors / task_errors: verdicts that are no sample of the candidate (the verifier's fault, or a task
  whose reference output does not depend on its inputs), counted apart and left out of every rate.
"""

from __future__ import annotations

from collections import defaultdict
from math import comb
from typing import Iterable

from kernelmill.schema import Verdict


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) is correct."""
    if n <= 0 or k <= 0:
        raise ValueError(f"pass_at_k needs n > 0 and k > 0, got n={n}, k={k}")
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _fast(v: Verdict, p: float, against: str) -> bool:
    s = v.speedup_eager if against == "eager" else v.speedup_compile
    return bool(v.correct and s is not None and s >= p)


def summarize_verdicts(verdicts: Iterable[Verdict], k: int = 8) -> dict:
    """pass@1, pass@k, avg@k and fast_p over verdicts, grouped by task_id (see the module docstring)."""
    by_task: dict[str, list[Verdict]] = defaultdict(list)
    apart = {"verifier_error": 0, "task_error": 0}
    for v in verdicts:
        if not v.judged:  # the verifier's or the task's failure says nothing about the candidate
            apart[v.status] += 1
            continue
        by_task[v.task_id].append(v)
    faults = {"verifier_errors": apart["verifier_error"], "task_errors": apart["task_error"]}
    if not by_task:
        return {"tasks": 0, "samples": 0, **faults}
    out: dict = {"tasks": len(by_task), "samples": sum(len(vs) for vs in by_task.values()), **faults}
    p1, pk, avgk, strict, partial = [], [], [], [], []
    for vs in by_task.values():
        n, c = len(vs), sum(v.correct for v in vs)
        p1.append(pass_at_k(n, c, 1))
        strict.append(pass_at_k(n, sum(bool(v.pass_strict) for v in vs), 1))
        partial.append(pass_at_k(n, sum(bool(v.pass_partial) for v in vs), 1))
        pk.append(pass_at_k(n, c, k))
        first = vs[:k]
        avgk.append(sum(v.correct for v in first) / len(first))
    out["pass@1"] = sum(p1) / len(p1)
    out[f"pass@{k}"] = sum(pk) / len(pk)
    out[f"avg@{k}"] = sum(avgk) / len(avgk)
    out["pass@1_strict"] = sum(strict) / len(strict)
    out["pass@1_partial"] = sum(partial) / len(partial)
    every = [v for vs in by_task.values() for v in vs]
    for p in (1.0, 1.1):
        for against in ("eager", "compile"):
            out[f"fast_{p}_{against}"] = sum(_fast(v, p, against) for v in every) / len(every)
    statuses: dict[str, int] = defaultdict(int)
    for v in every:
        statuses[v.status] += 1
    out["status_counts"] = dict(sorted(statuses.items()))
    return out
