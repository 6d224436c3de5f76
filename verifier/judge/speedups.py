"""A judged candidate's times and speedups (``record_speedups``), all from the harness's clock
(verifier/execute/harness.py): its time per call and the task reference's (eager and torch.compile), each less the
null bracket of the same calls, the eager speedup's 95% interval with each side's resolution, and the lines of
feedback that state them.

Enters: the Verdict being judged, the child's report, the harness's clocked brackets, the task's reference timing.
Leaves: the Verdict's ``runtime_us``, ``eager_us``, speedups and interval, ``versions["timing"]``; torch.compile's
``compile_us`` and its speedup come from ``record_compiled``, once the task's compiled part is timed.
"""

from __future__ import annotations

import statistics

from kernelmill.schema import Verdict
from verifier.common.contract import ChildReport
from verifier.execute.brackets import Clocked, interval, resolution_s, summary_for
from verifier.execute.harness import QUEUE_WAIT_S
from verifier.judge.outputs import Evidence

RUNTIME_FLOOR_US = 0.5  # a time per call below this is the clock's resolution, not the model's


def time_line(v: Verdict) -> str:
    """The feedback's sentence of the verdict's times: the candidate's, eager PyTorch's and, once it is known,
    torch.compile's (``record_compiled`` writes the sentence again when it adds it)."""
    timing = v.versions.get("timing", {})
    sp = f"{v.speedup_eager:.2f}x" if v.speedup_eager else "n/a"
    if v.speedup_lo is not None:
        sp += f", 95% interval {v.speedup_lo:.2f}-{v.speedup_hi:.2f}x"
    return (f"Time per call {v.runtime_us:.1f} us over {timing.get('calls_timed', 0)} timed calls in "
            f"{timing.get('brackets', 0)} brackets (the verifier's clock); eager PyTorch "
            f"{v.eager_us or float('nan'):.1f} us (speedup {sp})" +
            (f"; torch.compile {v.compile_us:.1f} us (speedup {v.speedup_compile:.2f}x)." if v.compile_us else "."))


def record_compiled(v: Verdict, compile_s: float | None, held: dict | None = None) -> None:
    """torch.compile's time per call (``compile_s``: the task's compiled part, measured apart from the eager one,
    verifier/runs.py) added to a verdict ``record_speedups`` timed: ``compile_us``, ``speedup_compile``, the times'
    feedback sentence, and ``held`` (both parts' holds of the device, joined) as ``versions["timing"]["reference"]``.
    It decides nothing else (the reward and the status read the eager side only), so a slot may hand its verdict on
    before the compiled part is timed and the engine add it here then (verifier/runs.py ``CompiledParts``)."""
    if v.runtime_us is None or "timing" not in v.versions:
        return
    before = time_line(v)
    if compile_s is not None:
        v.compile_us = round(max(compile_s * 1e6, RUNTIME_FLOOR_US), 3)
        v.speedup_compile = v.compile_us / v.runtime_us
    if held:
        v.versions["timing"]["reference"] = held
    after = time_line(v)
    if before != after and before in v.feedback:
        v.feedback = v.feedback.replace(before, after, 1)


def record_speedups(v: Verdict, report: ChildReport, clocked: Clocked, ref, ev: Evidence) -> None:
    """Runtime, eager and torch.compile times per call, all from the harness's clock (verifier/execute/harness.py), each
    less the null bracket of the same number of calls; launch-inclusive times from the one-at-a-time probes.
    ``speedup_lo``/``speedup_hi``: the eager speedup's 95% interval, a percentile bootstrap (fixed seed) over the
    candidate's brackets and the reference's, each resample's summary the one the point uses (cpu: the least;
    cuda: the median); it says how far the brackets' spread moves the speedup, not a load that slowed a whole
    side alike. On cuda each side's times are also moved by their resolution (``resolution_s``: the null, measured
    in another process, is known only to about a millisecond a bracket), so a kernel of a few microseconds, whose
    bracket is about the size of that shift, gets an interval that reaches 1 and no speedup in its reward."""
    null = ref.null() if ref is not None else {}
    per = clocked.per_call_s("candidate", null)
    v.runtime_us = round(max((per or 0.0) * 1e6, RUNTIME_FLOOR_US), 3)
    rows = [b for b in clocked.brackets if b.label == "candidate"]
    v.versions["timing"] = {**v.versions.get("timing", {}), "clock": "harness", "brackets": len(rows),
                            "calls": max(b.calls for b in rows), "late": sum(b.late for b in rows),
                            # brackets whose gate waited up to the full QUEUE_WAIT_S for the child's calls (cuda; a
                            # model that waits on the host is given the short wait, verifier/execute/harness.py)
                            "full_gate_waits": sum(b.gate_wait_s >= QUEUE_WAIT_S for b in rows),
                            "null_us": {str(k): round(s * 1e6, 3) for k, s in null.items()},
                            "unlocked_brackets": clocked.unlocked,  # seen by the harness: nobody held the lock
                            # the child's hint that its forward waits on the host, and whether a bracket took it back
                            "host_waits": "candidate" in clocked.host_waits,
                            "host_waits_taken_back": "candidate" in clocked.host_waits_taken_back}
    if ref is not None and ref.clocked.get("held"):  # the task's reference timing: what it held the device alone for
        v.versions["timing"]["reference"] = ref.clocked["held"]
    if report.candidate is not None and report.candidate.launch_us:
        v.launch_us = statistics.median(report.candidate.launch_us)
    eager = ref.clocked.get("eager_s") if ref is not None else None
    if eager is not None:
        v.eager_us = round(max(eager * 1e6, RUNTIME_FLOOR_US), 3)
        v.speedup_eager = v.eager_us / v.runtime_us
        # the speedup's 95% interval over both sides' brackets (floored as the times are; on cuda each side's times
        # moved by their resolution, toward the speedup's low end for ``lo`` and its high end for ``hi``); the reward
        # counts a speedup only where it excludes 1 (verifier/judge/reward.py)
        floor = RUNTIME_FLOOR_US * 1e-6
        cand = clocked.samples("candidate", null)
        over = [float(x) for x in ref.clocked.get("eager_samples") or []]
        res_c = res_e = 0.0  # cpu: a host clock, no null subtracted
        if not clocked.host_clock:
            res_c = resolution_s(null, clocked.sample_calls("candidate"))
            res_e = resolution_s(null, int(ref.clocked.get("eager_calls") or max(null, default=0)))
        summary = summary_for(clocked.host_clock)
        lo = interval([max(x + res_c, floor) for x in cand], summary, over=[max(x - res_e, floor) for x in over])
        hi = interval([max(x - res_c, floor) for x in cand], summary, over=[max(x + res_e, floor) for x in over])
        if lo is not None and hi is not None:
            v.speedup_lo, v.speedup_hi = round(lo[0], 4), round(hi[1], 4)
        v.versions["timing"]["resolution_us"] = {"candidate": round(res_c * 1e6, 3), "eager": round(res_e * 1e6, 3)}
        if ref.report.eager and ref.report.eager.launch_us:
            v.eager_launch_us = statistics.median(ref.report.eager.launch_us)
    else:
        rep = ref.report if ref is not None else None
        ev.add(None, "The eager reference could not be timed" + (f": {rep.timing_error or rep.setup_error}"
                                                                 if rep else "") + "; no speedup is reported.")
    v.versions["timing"]["calls_timed"] = sum(b.calls for b in rows)
    ev.add(None, time_line(v))
    res_us = v.versions["timing"].get("resolution_us", {}).get("candidate", 0.0)
    if v.speedup_lo is not None and res_us * 4 > v.runtime_us:
        ev.add(None, f"At {v.runtime_us:.1f} us a call the verifier's clock resolves this kernel's time to about "
                     f"{res_us:.1f} us a call (the fixed cost of a bracket over its calls), so only a speedup beyond "
                     f"that counts (interval {v.speedup_lo:.2f}-{v.speedup_hi:.2f}x).")
    if v.max_abs_err is not None:
        ev.add(None, f"Max abs error {v.max_abs_err:.3g}, max rel error {v.max_rel_err:.3g} over {v.trials} trials.")
