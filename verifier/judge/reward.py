"""Stage 7a, reward: a hierarchical table, monotone in the stage reached.

| outcome (Verdict.status)                                        | reward                                 |
| --------------------------------------------------------------- | -------------------------------------- |
| any cheat code in Verdict.cheats (status ``cheat``)             | -1.0                                   |
| invalid: no code, no ModelNew, no kernel (``extract_error``, ``illegal``) | -0.5                         |
| compile error (``compile_error``)                               |  0.0                                   |
| ran but crashed / timed out / raised (``crash``, ``timeout``)   |  0.1                                   |
| wrong output (``wrong``)                                        |  0.2 + 0.1 x share of trials passed    |
| correct and legal, not faster than eager (``pass``)             |  1.0                                   |
| correct and legal, faster than eager beyond doubt: the speedup's |  1.0 + min(log2(lo), 3.0) (at most 4.0)|
| 95% interval [lo, hi] lies above 1                               |                                        |

A ``verifier_error`` (the verifier's own failure: the task does not fit the machine, its reference does not
run) and a ``task_error`` (the task's reference output does not depend on its inputs: constant, all zero,
underflowed, not finite) have reward 0.0 only so the field is never empty: it is the candidate's outcome for nothing, so no
trainer, corpus or pass rate uses it (curation drops it, metrics count it apart).

So: invalid or cheating < compile error < crashing < wrong < correct < faster, and among faster
kernels the reward grows with the speedup (log scale, capped so a timing fluke cannot dominate).

A speedup counts only where its interval (``Verdict.speedup_lo``/``speedup_hi``, verifier/judge/verdict.py) excludes 1:
an interval that straddles 1 is no evidence of a speedup and earns the plain pass, 1.0 (one task earned 2.505 in
one run and 1.0 in its resumed twin on a busy 2-core host). Above 1, the reward uses the interval's lower bound,
not the point: the reward is then one continuous function of ``lo``, nondecreasing, equal to 1.0 where ``lo``
reaches 1, so no kernel gains by a wider interval (with the point, a noisy 1.5x whose interval touched 1 would get
1.0 while a steady 1.02x got more, and the reward would jump from 1.0 to 1 + log2(s) as ``lo`` crossed 1). A
verdict without an interval (written before intervals existed, or timed in fewer than two brackets a side)
counts its point speedup as before.
``reward_for`` only reads the verdict; it does not re-check anything.
"""

from __future__ import annotations

import math

from kernelmill.schema import Verdict

REWARD_TABLE = {
    "cheat": -1.0,
    "extract_error": -0.5,
    "illegal": -0.5,
    "compile_error": 0.0,
    "crash": 0.1,
    "timeout": 0.1,
    "wrong": 0.2,
    "pass": 1.0,
    "verifier_error": 0.0,
    "task_error": 0.0,
}
WRONG_PARTIAL_BONUS = 0.1
MAX_SPEEDUP_BONUS = 3.0


def reward_for(verdict: Verdict, passed_share: float = 0.0) -> float:
    """The reward of a verdict per the table above (passed_share: fraction of correctness trials that
    matched, used only for ``wrong``)."""
    if verdict.cheats:
        return REWARD_TABLE["cheat"]
    status = verdict.status or "extract_error"
    if status == "pass" and verdict.correct:
        s = verdict.speedup_eager if verdict.speedup_lo is None else verdict.speedup_lo
        if s is not None and s > 1.0:
            return 1.0 + min(math.log2(s), MAX_SPEEDUP_BONUS)
        return 1.0
    if status == "wrong":
        return REWARD_TABLE["wrong"] + WRONG_PARTIAL_BONUS * max(0.0, min(1.0, passed_share))
    return REWARD_TABLE.get(status, REWARD_TABLE["extract_error"])
