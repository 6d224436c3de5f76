"""What the trusted harness measured (verifier/execute/harness.py) and the statistics a verdict reads off it: the
brackets of one job (``Clocked``), a model's time per call over them (the null bracket's time taken off on cuda),
and the intervals (``interval``: a percentile bootstrap with a fixed seed, for a time or a speedup;
``order_interval``: the exact bootstrap interval of the least or the median, cheap enough to decide before each
bracket whether a model's time is ``tight``). Plain numbers: no device, no pool, no clock; the judge
(verifier/judge/verdict.py) reads them without the harness.
Imports: the standard library only.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Callable

BOOTSTRAP = 2000  # resamples of a model's brackets for an interval (verifier/judge/verdict.py: the speedup's)
BOOTSTRAP_SEED = 46  # fixed: an interval is a function of the brackets alone
TIGHT = 0.01  # a model's timing stops once its time per call's 95% interval is within 1% of it either side ...
LEAST_BRACKETS = 3  # ... over at least this many brackets (the probe of one call not among them unless all are)
NULL_SHIFT = 2.0  # cuda: a time per call is known to NULL_SHIFT x the one-call null over its calls (``resolution_s``)


@dataclass
class Bracket:
    """One bracket measured here: ``calls`` calls of the child's model, ``seconds`` by this process's clock."""

    label: str
    calls: int
    seconds: float
    late: bool = False  # cuda: the gate opened before the child had queued its calls (launch time included)
    # cuda: the longest the gate waited for the child to queue its calls (harness.py queue_wait_s: QUEUE_WAIT_S, or
    # LATE_QUEUE_WAIT_S for a model that waits on the host); 0 on cpu
    gate_wait_s: float = 0.0
    seq: int = 0  # the harness's number of it (the child's samples of it name it: verifier/judge/checks.py)
    # cpu: the sampler saw too little of it to judge whose work it was (verifier/judge/checks.py
    # check_bracket_samples): it does not set the reported time (``Clocked._picked``) unless no bracket was seen
    unseen: bool = False


@dataclass
class Clocked:
    """What the harness measured and saw for one job (kept in the verifier's process only)."""

    brackets: list[Bracket] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # timed outputs wrong, written late, or missing
    kept: list[tuple[list, list]] = field(default_factory=list)  # (inputs, outputs) picked after the loop
    # cpu: (inputs, outputs) of the bracket whose time is reported (the least), picked after its clock
    fastest: list[tuple[list, list]] = field(default_factory=list)
    calls_seen: int = 0
    host_clock: bool = False  # cpu: perf_counter brackets
    unchecked: bool = False  # an input the channel cannot carry: the child drew its own, so no timed output was checked
    unchecked_why: str = ""  # why not, where it is not that (the verdict's line): a reference that keeps state
    unlocked: int = 0  # brackets clocked while no process held the device lock exclusive (a lock was named)
    # cuda: labels whose child said their forward waits on the host (their gates opened without the long wait) and
    # those of them whose bracket then came in time (the hint taken back)
    host_waits: list[str] = field(default_factory=list)
    host_waits_taken_back: list[str] = field(default_factory=list)
    error: str = ""  # the harness's own failure in the checks it ran after the child ended (the verifier's)
    close_s: float = 0.0  # seconds of the harness's close after the child ended (cuda: the held checks, their waits)
    # timed calls that left their inputs changed in the pool once done (an in-place write its caller would see),
    # read here: the first such call of each label, as "timed call N (label): input j"
    mutated: list[str] = field(default_factory=list)
    # seconds of the harness's brackets by part, summed over the job: "draw" (the private inputs drawn, their
    # values encoded: before the clock, the device held alone), "clock" (the bracket sent to its end; of it,
    # "queue": waiting for the child to queue its calls, cuda), "after" (the outputs' checks or their holding)
    serve_s: dict[str, float] = field(default_factory=dict)

    def per_call_s(self, label: str, null: dict[int, float] | None = None) -> float | None:
        """Median time per call of ``label``'s brackets (late ones only if nothing else), less the null
        bracket's time of the same K; None without brackets."""
        vals = self.samples(label, null)
        return self.summary(vals) if vals else None

    def samples(self, label: str, null: dict[int, float] | None = None) -> list[float]:
        """The time per call of each of ``label``'s brackets that ``per_call_s`` summarises: those in time of the most
        calls that number LEAST_BRACKETS (the probe of one call drops out unless every bracket had one), else of all of
        them, else those of the most calls; not late unless all were; less the null bracket of the same K (cuda)."""
        rows = self._picked(label)
        if not rows:
            return []
        big = rows[0].calls
        # cuda: less the null bracket (device time: its noise is small against the work); cpu: the copies stay in
        # (a host clock's load noise on the null is as large as a small model's work: subtracting it gave 0 us)
        over = null_for(null or {}, big) if not self.host_clock else 0.0
        return [max(b.seconds - over, 0.0) / b.calls for b in rows]

    def sample_calls(self, label: str) -> int:
        """The calls a bracket of ``samples``'s brackets held (0 without brackets): what a time per call's
        resolution is divided by (``resolution_s``)."""
        rows = self._picked(label)
        return rows[0].calls if rows else 0

    def _picked(self, label: str) -> list[Bracket]:
        """``label``'s brackets that ``samples`` reads, all of one number of calls."""
        rows = [b for b in self.brackets if b.label == label]
        rows = [b for b in rows if not b.unseen] or rows
        if not rows:
            return []
        # the most calls among the brackets in time that number LEAST_BRACKETS (the harness gives a label fewer calls
        # after a late bracket: its later brackets, in time, are what it measured), else among all of them; else the
        # most calls; in time unless all came late
        in_time = [b for b in rows if not b.late]
        for group in (in_time, rows):  # (all late: the late ones of the most calls that number LEAST_BRACKETS)
            counts = sorted({b.calls for b in group}, reverse=True)
            pick = next((k for k in counts if sum(b.calls == k for b in group) >= LEAST_BRACKETS), None)
            if pick is not None:
                rows = [b for b in group if b.calls == pick]
                break
        else:
            big = max(b.calls for b in rows)
            rows = [b for b in rows if b.calls == big]
        return [b for b in rows if not b.late] or rows

    def summary(self, values) -> float:
        """cuda: the median (device time: the noise is symmetric and small); cpu: the least (a host clock on a
        shared machine is only ever slowed down by load)."""
        vals = list(values)
        return min(vals) if self.host_clock else statistics.median(vals)

    def seconds_by_calls(self, label: str) -> dict[int, list[float]]:
        """``label``'s brackets' seconds, by their number of calls."""
        by: dict[int, list[float]] = {}
        for b in self.brackets:
            if b.label == label:
                by.setdefault(b.calls, []).append(b.seconds)
        return by

    def null_by_calls(self) -> dict[int, float]:
        return {k: self.summary(v) for k, v in self.seconds_by_calls("null").items()}


def summary_for(host_clock: bool) -> Callable[[list[float]], float]:
    """The statistic a model's time per call is over its brackets: the least on a host clock, else the median."""
    return min if host_clock else statistics.median


def interval(samples: list[float], summary: Callable[[list[float]], float], over: list[float] | None = None,
             level: float = 0.95) -> tuple[float, float] | None:
    """The ``level`` interval of ``summary(samples)`` (or, given ``over``, of the ratio ``summary(over) /
    summary(samples)``: a speedup, ``over`` the reference's times per call and ``samples`` the candidate's) by a
    percentile bootstrap over brackets: BOOTSTRAP resamples with replacement of each side's brackets, drawn
    independently, from a fixed seed (the same figures always give the same interval). None with fewer than two
    brackets on a side (one bracket says nothing of its spread). It covers the brackets' spread only: a whole
    measurement slowed alike (the reference timed once per task on a loaded host) moves the interval with it."""
    if len(samples) < 2 or (over is not None and len(over) < 2):
        return None
    rng = random.Random(BOOTSTRAP_SEED)
    stats = []
    for _ in range(BOOTSTRAP):
        x = summary(rng.choices(samples, k=len(samples)))
        if over is not None:
            x = summary(rng.choices(over, k=len(over))) / x if x > 0 else math.inf
        stats.append(x)
    stats.sort()
    tail = (1.0 - level) / 2
    return stats[int(tail * (BOOTSTRAP - 1))], stats[int(math.ceil((1.0 - tail) * (BOOTSTRAP - 1)))]


def order_interval(samples: list[float], least: bool, level: float = 0.95) -> tuple[float, float]:
    """The ``level`` bootstrap interval of the least (``least``, a host clock's summary) or the median of ``samples``,
    exact: a resample's r-th smallest is at most the k-th smallest sample with probability P(Binomial(n, k/n) >= r),
    so its percentiles need no drawing (``interval`` draws, for a ratio). An even count's median lies between its two
    middle order statistics: the interval runs from the lower one's low end to the upper one's high end (a little
    wider than the median's own)."""
    xs, n, tail = sorted(samples), len(samples), (1.0 - level) / 2
    r_lo, r_hi = (1, 1) if least else ((n + 1) // 2, n // 2 + 1)
    return xs[_order_quantile(n, r_lo, tail)], xs[_order_quantile(n, r_hi, 1.0 - tail)]


def _order_quantile(n: int, r: int, q: float) -> int:
    """The index of the least sample that a resample's r-th smallest is at most with probability >= ``q``."""
    for k in range(1, n + 1):
        p = k / n
        if sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(r, n + 1)) >= q - 1e-12:
            return k - 1
    return n - 1


def tight(samples: list[float], least: bool) -> bool:
    """Whether a model has been timed enough: at least LEAST_BRACKETS brackets, and the 95% interval of its time per
    call (``order_interval``: microseconds of arithmetic, run before each bracket) within TIGHT of it either side."""
    if len(samples) < LEAST_BRACKETS:
        return False
    point = min(samples) if least else statistics.median(samples)
    lo, hi = order_interval(samples, least)
    return point > 0 and (hi - lo) / 2 <= TIGHT * point


def resolution_s(null: dict[int, float], calls: int) -> float:
    """cuda: how far a time per call over brackets of ``calls`` calls can be off for the null subtracted from it,
    NULL_SHIFT times the null bracket of the fewest calls (its fixed part: the flush and the cross-process waits)
    over ``calls``. The null is measured in the task's reference job, another process at another time, and what a
    bracket's fixed part costs moves between processes by about a millisecond (one H200's two real batches: a
    kernel of a few microseconds at 256 calls a bracket went from 0.5 to 7.4 us a call, its reference from 4.4 to
    0.5 us), which the brackets' spread inside one job does not show. The fixed part says how contended the device
    was: tens of microseconds on an idle H200, 500-800 us where other processes' contexts time-slice into the
    brackets (slices of about a millisecond: bench/results/HISTORY.md), so the resolution is a fraction of a
    microsecond a call on a quiet device and several on a busy one. 0 without a null (cpu: none is subtracted)."""
    if not null or calls <= 0:
        return 0.0
    return NULL_SHIFT * null[min(null)] / calls


def null_for(null: dict[int, float], calls: int) -> float:
    """The null bracket's seconds for ``calls`` calls: measured at 1 and at the most a bracket of the task holds,
    linear between (a fixed part, the cross-process waits, and a part per call, the copies)."""
    if not null:
        return 0.0
    if calls in null:
        return null[calls]
    lo, hi = min(null), max(null)
    if lo == hi:
        return null[lo] * calls / lo
    return null[lo] + (null[hi] - null[lo]) * (calls - lo) / (hi - lo)
