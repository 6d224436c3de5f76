"""Stage 7a, reward: a hierarchical table, monotone in the stage reached.

| outcome (Verdict.status)                                        | reward                                 |
| --------------------------------------------------------------- | -------------------------------------- |
| any cheat code in Verdict.cheats (status ``cheat``)             | -1.0                                   |
| invalid: no code, no ModelNew, no kernel (``extract_error``, ``illegal``) | -0.5                         |
| compile error (``compile_error``)                               |  0.0                                   |
| ran but crashed / timed out / raised (``crash``, ``timeout``)   |  0.1                                   |
| wrong output (``wrong``)                                        |  0.2 + 0.1 x share of trials passed    |
| correct and legal, not faster than eager (``pass``)             |  1.0                                   |
| correct and legal, speedup s > 1 against eager                  |  1.0 + min(log2(s), 3.0)  (at most 4.0)|

A ``verifier_error`` (the verifier's own failure: the task does not fit the machine, its reference does not
run) and a ``task_error`` (the task's reference output does not depend on its inputs: constant, all zero,
underflowed, not finite) have reward 0.0 only so the field is never empty: it is the candidate's outcome for nothing, so no
trainer, corpus or pass rate uses it (curation drops it, metrics count it apart).

So: invalid or cheating < compile error < crashing < wrong < correct < faster, and among faster
kernels the reward grows with the speedup (log scale, capped so a timing fluke cannot dominate).
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
        s = verdict.speedup_eager
        if s is not None and s > 1.0:
            return 1.0 + min(math.log2(s), MAX_SPEEDUP_BONUS)
        return 1.0
    if status == "wrong":
        return REWARD_TABLE["wrong"] + WRONG_PARTIAL_BONUS * max(0.0, min(1.0, passed_share))
    return REWARD_TABLE.get(status, REWARD_TABLE["extract_error"])
