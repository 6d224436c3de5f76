"""The device lock's timeline over a batch: who held the device, and what the timers waited for.

``start(lock)`` makes the trace file beside a device lock (verifier/common/devlock.py ``TRACE_SUFFIX``): from then on
every process that takes that lock appends each hold as it ends (process, mode, when the take began, when it got
the lock, when it let go, the verifier's line that took it, the last point of giving way it passed holding on and
the line that let go). ``summarize(path)`` reads it back into a record and ``lines(record)`` into markdown: the
wall split by the device's state (a timer holding it alone; timers waiting while shared work drains; shared work
only; nobody), the drain blamed on the section of code (from the last point of giving way passed to the one that
let go) of the shared hold that let go last, and the sections' lengths (how long a timer can wait for each).

A shared taker counts from the end of its wait (when it got the lock); a timer's wait counts from the start of its
take (it joins the timers' queue at once, and every shared taker stands back from then on).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from verifier.common.devlock import TRACE_SUFFIX


@dataclass(frozen=True)
class Hold:
    pid: int
    mode: str  # "s" shared, "x" exclusive
    asked: float  # monotonic seconds: the take began
    got: float
    released: float
    site: str  # file:line of the verifier's code that took it
    passed_t: float  # the last point of giving way it passed holding on (``got`` where none)
    passed: str
    let_go: str  # file:line of the code that let it go

    @property
    def section(self) -> str:
        """The code a timer that came during its last stretch waited for: last point passed -> the one that let go."""
        return f"{self.passed} -> {self.let_go}"


def start(lock_path: str) -> str:
    """An empty trace beside the lock at ``lock_path`` (made with the lock's directory); its path."""
    path = f"{lock_path}{TRACE_SUFFIX}"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w"):
        pass
    os.chmod(path, 0o666)
    return path


def for_batch(cfg, backend: str) -> str:
    """The trace of a batch's device lock (``cfg`` a VerifyConfig; cuda only: the cpu backend takes no lock), started
    empty; "" where there is none."""
    from verifier.execute.locks import lock_path

    path = lock_path(cfg, backend) if backend == "cuda" else ""
    return start(path) if path else ""


def read(path: str) -> list[Hold]:
    """The holds of a trace; malformed lines (a candidate's process can write there too) left out."""
    holds = []
    try:
        text = Path(path).read_text(errors="replace") if path else ""
    except OSError:
        return []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 9 or parts[1] not in ("s", "x"):
            continue
        try:
            h = Hold(int(parts[0]), parts[1], float(parts[2]), float(parts[3]), float(parts[4]), parts[5],
                     float(parts[6]), parts[7], parts[8])
        except ValueError:
            continue
        if h.asked <= h.got <= h.passed_t <= h.released:
            holds.append(h)
    return holds


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _minus(spans: list[tuple[float, float]], cut: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans`` (a union) without ``cut`` (a union)."""
    out = []
    for a, b in spans:
        pieces = [(a, b)]
        for c, d in cut:
            nxt = []
            for x, y in pieces:
                if d <= x or c >= y:
                    nxt.append((x, y))
                    continue
                if x < c:
                    nxt.append((x, c))
                if d < y:
                    nxt.append((d, y))
            pieces = nxt
        out += pieces
    return out


def _total(spans) -> float:
    return sum(b - a for a, b in spans)


def summarize(path: str) -> dict:
    """The trace's record: {"wall", "exclusive", "draining", "shared_only", "idle", "timers", "timer_wait_median",
    "blame": {section: [seconds, segments]}, "pieces": {section: [count, median s, p90 s, total s]}} (a section's
    seconds: from the last point of giving way passed to the let-go); {} without holds."""
    holds = read(path)
    if not holds:
        return {}
    t0, t1 = min(h.asked for h in holds), max(h.released for h in holds)
    x = _union([(h.got, h.released) for h in holds if h.mode == "x"])
    waiting = _union([(h.asked, h.got) for h in holds if h.mode == "x" and h.got > h.asked])
    shared = [h for h in holds if h.mode == "s"]
    sh = _union([(h.got, h.released) for h in shared])
    draining = _minus(waiting, x)
    shared_only = _minus(_minus(sh, x), draining)
    blame: dict[str, list] = {}
    for a, b in draining:  # the shared piece that let go last before the segment's end held the timers up
        alive = [h for h in shared if h.got < b and h.released > a]
        if not alive:
            site = "(nobody shared: timers' turnstile and queue)"
        else:
            site = max(alive, key=lambda h: min(h.released, b)).section
        blame.setdefault(site, [0.0, 0])
        blame[site][0] += b - a
        blame[site][1] += 1
    pieces: dict[str, list[float]] = {}
    for h in shared:
        pieces.setdefault(h.section, []).append(h.released - h.passed_t)
    timers = [h for h in holds if h.mode == "x"]
    return {
        "wall": t1 - t0, "exclusive": _total(x), "draining": _total(draining), "shared_only": _total(shared_only),
        "idle": max(0.0, (t1 - t0) - _total(_union(x + draining + shared_only))), "timers": len(timers),
        "timer_wait_median": statistics.median([h.got - h.asked for h in timers]) if timers else 0.0,
        "timer_hold_median": statistics.median([h.released - h.got for h in timers]) if timers else 0.0,
        "blame": {k: [round(v[0], 3), v[1]] for k, v in blame.items()},
        "pieces": {k: [len(v), statistics.median(v), sorted(v)[int(0.9 * (len(v) - 1))], sum(v)]
                   for k, v in pieces.items()},
    }


def lines(rec: dict, top: int = 12) -> list[str]:
    """Markdown of a trace's record ([] for none)."""
    if not rec:
        return []
    wall = rec["wall"] or 1.0
    out = ["Device lock timeline (bench/lib/lock_trace.py: every hold of the batch's device lock, from its trace):", "",
           "| state of the device lock | seconds | share of the wall |", "| --- | --- | --- |"]
    for key, label in (("exclusive", "a timer holds it alone"),
                       ("draining", "timers wait, shared work drains (nobody may start)"),
                       ("shared_only", "shared work only"), ("idle", "nobody holds it")):
        out.append(f"| {label} | {rec[key]:.1f} | {rec[key] / wall:.2f} |")
    out += ["", f"- timers: {rec['timers']}; their wait median {rec['timer_wait_median']:.2f} s, their hold median "
            f"{rec['timer_hold_median']:.2f} s", "",
            "The drain blamed on the shared hold that let go last, by its last section (the last point of giving way "
            "it passed holding on -> the line that let go):", "",
            "| section | drain s | segments |", "| --- | --- | --- |"]
    for site, (sec, n) in sorted(rec["blame"].items(), key=lambda kv: -kv[1][0])[:top]:
        out.append(f"| {site} | {sec:.1f} | {n} |")
    out += ["", "Shared holds' last sections (from the last point of giving way passed to the let-go):", "",
            "| section | holds | median s | p90 s | total s |", "| --- | --- | --- | --- | --- |"]
    for site, (n, med, p90, tot) in sorted(rec["pieces"].items(), key=lambda kv: -kv[1][3])[:top]:
        out.append(f"| {site} | {n} | {med:.3f} | {p90:.3f} | {tot:.1f} |")
    return out + [""]
