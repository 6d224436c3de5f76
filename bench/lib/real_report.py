"""The real-code batch's report (bench/bench_verifier.py ``--batch real``): a record per batch, {"per_task",
"describe", "items", "programs", "reused", "wall_s", "cut", "errors", "config", "gpu_util", "host_busy", "cpu_by_kind",
"rows": [...]}, one row per verdict (``real_row``); the verdicts file (``write_real_verdicts``) and the markdown report
(``real_report``: the rate per hour, the stage seconds, the cores by kind of process, the device lock's timeline).

    rows = [real_row(cand, v) for (_, cand), v in zip(batch.items, verdicts)]
    record = real_record(batch, stats, cfg, rows, per_task=1, cut=False, wall_s=wall, errors=[], gpu_samples=[...],
                         host_busy=0.5, cpu_by_kind={...})
    text = real_report([record], device=..., cmd=..., commit=..., versions=..., backend="cuda")

The test bed's fidelity rows against each source's judgement are bench/lib/testbed_report.py's.
"""

from __future__ import annotations

import collections
import json
import statistics
from pathlib import Path


def real_row(cand, v) -> dict:
    """The record row of one verdict ``v`` of candidate ``cand`` (its program: the sha256 of its code)."""
    import hashlib

    return {"id": cand.candidate_id, "task_id": v.task_id, "backend": v.backend, "status": v.status,
            "cheats": list(v.cheats), "correct": bool(v.correct), "pass_strict": v.pass_strict,
            "pass_partial": v.pass_partial, "speedup": round(v.speedup_eager, 3) if v.speedup_eager else None,
            "program": hashlib.sha256(cand.code.encode()).hexdigest(), "stage_seconds": dict(v.stage_seconds),
            "exclusive": v.versions.get("timing", {}).get("exclusive"), "runtime_us": v.runtime_us,
            # the harness's view of the timed brackets: how many came late, and the child's host-wait hint
            "late": v.versions.get("timing", {}).get("late"),
            "host_waits": v.versions.get("timing", {}).get("host_waits"),
            "host_waits_taken_back": v.versions.get("timing", {}).get("host_waits_taken_back"),
            # what the task's reference timing held the device alone for (verifier/runs.py reference_hold)
            "reference": v.versions.get("timing", {}).get("reference"),
            "eager_us": v.eager_us, "speedup_lo": v.speedup_lo, "speedup_hi": v.speedup_hi,
            # the null brackets subtracted (by calls) and each side's resolution from them (execute/brackets.py)
            "null_us": v.versions.get("timing", {}).get("null_us"),
            "resolution_us": v.versions.get("timing", {}).get("resolution_us"),
            "calls": v.versions.get("timing", {}).get("calls"),
            # the engine's runs again of a job whose set-up failed on the verifier's side, and whether the last ran
            # with the memory gate to itself (verifier/engine.py execute_item), what each earlier run failed on: the
            # stage seconds are the last run's
            "setup_retries": v.versions.get("setup_retries", 0), "memory_alone": bool(v.versions.get("memory_alone")),
            "setup_failures": list(v.versions.get("setup_failures", [])),
            # why, for every verdict but a pass (the verifier's side, a crash, the task, and what made a cheat or a
            # wrong answer: a verdict that differs from another run's is read from it; a cheat's line is after the
            # feedback's heading, so more of it is kept)
            "why": "" if v.status == "pass" else v.feedback[:1200]}


def real_record(batch, stats, cfg, rows: list[dict], *, per_task: int, cut: bool, wall_s: float, errors: list[str],
                gpu_samples: list[float], host_busy: float, cpu_by_kind: dict) -> dict:
    """One batch's record: ``batch`` a bench.lib.testbed.RealBatch, ``stats`` the verify entry's VerifyStats, ``cfg``
    its VerifyConfig, ``gpu_samples`` nvidia-smi utilization percents, ``cpu_by_kind`` {kind: (CPU s, processes)}."""
    from bench.lib.build_breakdown import breakdown

    s = gpu_samples
    return {"per_task": per_task, "describe": batch.describe(), "items": len(batch.items), "tasks": batch.tasks,
            "distinct": batch.distinct, "copies": batch.copies, "programs": stats.programs, "reused": stats.reused,
            "finished": len(rows), "cut": cut, "wall_s": wall_s, "errors": errors,
            "config": {k: getattr(cfg, k) for k in ("exec_workers", "exec_processes", "split_build", "time_torch_compile",
                                                    "sandbox", "trials",
                                                    "timing_trials", "timing_budget_s", "legality")},
            "slots": cfg.exec_slots(batch.items[0][1].backend) if batch.items else 0,
            "gpu_util": (sum(s) / len(s) / 100) if s else None, "host_busy": host_busy,
            "cpu_by_kind": {k: [sec, n] for k, (sec, n) in cpu_by_kind.items()}, "rows": rows,
            "builds": breakdown(cfg.build_root())}


def real_cost(record: dict):
    """The verification cost of one batch's finished verdicts over its measured wall (verifier/serve/cost.py), copies
    of one program counted once."""
    from verifier.serve.cost import verification_cost
    from kernelmill.schema import Verdict

    vs = [Verdict(candidate_id=r["id"], task_id=r["task_id"], backend=r["backend"], status=r["status"],
                  stage_seconds=r["stage_seconds"]) for r in record["rows"]]
    return verification_cost(vs, programs={r["id"]: r["program"] for r in record["rows"]}, wall_s=record["wall_s"])


# the timing phase's pieces during which the candidate's child holds the device alone (verifier/child/worker.py: the
# profile is read after the lock is let go)
HELD_ALONE = ("child_timing_warm_device", "child_timing_profiler_start", "child_timing_brackets",
              "child_timing_profiler_stop", "child_timing_probes")


def slot_lines(record: dict) -> list[str]:
    """Where an execution-bound batch stands: how busy its execution slots were (each verdict's ``execute`` seconds
    over slots x wall) and what share of the wall the candidates' timing held the device alone (the task's reference
    timings come on top), each program once; [] for a record without its slot count."""
    slots, wall = record.get("slots") or 0, record["wall_s"]
    rows = list({r.get("program", r["id"]): r for r in record["rows"]}.values())  # copies of a program once
    if not slots or wall <= 0:
        return []
    busy = sum(float(r["stage_seconds"].get("execute") or 0.0) for r in rows) / (slots * wall)
    alone = sum(float(r["stage_seconds"].get(k) or 0.0) for r in rows for k in HELD_ALONE)
    timed = sum(1 for r in rows if "child_timing_brackets" in r["stage_seconds"])
    return [f"- execution slots: {slots}, busy {busy:.2f} of their wall (each verdict's `execute` over slots x wall); "
            f"the candidates' timing held the device alone {alone:.1f} s, {alone / wall:.2f} of the wall "
            f"({alone / timed if timed else 0.0:.2f} s per timed candidate: warm-up, brackets, probes)"]


def _parts_table(per_task: list[dict], parts: tuple, title: str) -> list[str]:
    """A table of seconds by part over the tasks (total, median, most, how many tasks have the part) under ``title``;
    [] where no task has any."""
    if not any(per_task):
        return []
    out = ["", title, "", "| part | total s | median s | most s | tasks |", "| --- | --- | --- | --- | --- |"]
    for part in parts:
        vals = [float(t[part]) for t in per_task if part in t]
        if vals:
            out.append(f"| {part} | {sum(vals):.1f} | {statistics.median(vals):.3f} | {max(vals):.2f} | {len(vals)} |")
    return out


def reference_lines(record: dict) -> list[str]:
    """What the tasks' reference timings held the device alone for, each task once (the first verdict that carries
    its ``reference``): seconds per part of the hold (total and median over the tasks), the brackets per model, how
    many came late and the hints not taken back; [] where no verdict carries one."""
    by_task: dict[str, dict] = {}
    for r in record["rows"]:
        if r.get("reference") and r.get("task_id") not in by_task:
            by_task[r["task_id"]] = r["reference"]
    if not by_task:
        return []
    held = [t.get("held_s") or {} for t in by_task.values()]
    total = [sum(float(h.get(k) or 0.0) for k in ("eager", "compile")) for h in held]
    out = ["", f"The tasks' reference timings ({len(by_task)} tasks; device held alone {sum(total):.1f} s, median "
               f"{statistics.median(total):.2f} s, most {max(total):.2f} s a task; verifier/runs.py reference_hold):",
           "", "| part of the hold | total s | median s | tasks |", "| --- | --- | --- | --- |"]
    for part in ("warm_device", "template", "reference_brackets", "null_brackets", "probes", "compile"):
        vals = [float(h[part]) for h in held if part in h]
        if vals:
            out.append(f"| {part} | {sum(vals):.1f} | {statistics.median(vals):.3f} | {len(vals)} |")
    out += _parts_table([t.get("before_s") or {} for t in by_task.values()], ("load", "compile_build", "lock_wait"),
                        "Their children before the hold (the reference built, torch.compile's build, the wait for the "
                        "device lock):")
    out += _parts_table([t.get("harness_s") or {} for t in by_task.values()],
                        ("draw", "draw_lock_wait", "clock", "queue", "after"),
                        "Of the hold, the harness's own seconds (verifier/execute/harness.py: private inputs drawn, "
                        "the waits for the RNG lock before its draws, the clocked run, the checks):")
    models = sorted({m for t in by_task.values() for m in (t.get("brackets") or {})})
    out += ["", "| model | brackets | late | tasks with a late one | tasks hinted (not taken back) |",
            "| --- | --- | --- | --- | --- |"]
    for m in models:
        out.append(f"| {m} | {sum((t.get('brackets') or {}).get(m, 0) for t in by_task.values())} | "
                   f"{sum((t.get('late') or {}).get(m, 0) for t in by_task.values())} | "
                   f"{sum(bool((t.get('late') or {}).get(m)) for t in by_task.values())} | "
                   f"{sum(m in (t.get('host_waits') or []) for t in by_task.values())} |")
    return out + [""]


def retry_lines(record: dict) -> list[str]:
    """The candidates whose job the engine ran again after a set-up failure on the verifier's side (verifier/engine.py
    execute_item), with what each earlier run failed on: the seconds a straggler spent there are read from it."""
    again = [r for r in record["rows"] if r.get("setup_retries")]
    if not again:
        return ["- jobs run again after a set-up failure on the verifier's side: 0"]
    out = [f"- jobs run again after a set-up failure on the verifier's side: {len(again)} "
           f"({sum(r['setup_retries'] for r in again)} runs again; the last with the memory gate to itself: "
           f"{sum(bool(r.get('memory_alone')) for r in again)})"]
    for r in again:
        out += [f"  - {r['id']} ({r['status']}): " + "; ".join(f"run {i + 1}: {line}" for i, line in
                                                               enumerate(r.get("setup_failures") or []))]
    return out


def real_section(record: dict) -> tuple[float | None, list[str]]:
    """(candidates per hour, markdown lines) of one batch's record."""
    from verifier.serve.cost import HEADLINE_KEYS, cost_table

    cost = real_cost(record)
    k, n = record["per_task"], len(record["rows"])
    per_hour = cost.per_gpu_hour
    statuses = dict(sorted(collections.Counter(r["status"] for r in record["rows"]).items()))
    lines = [f"### {'1 candidate' if k == 1 else f'k = {k} candidates'} per task", "",
             f"Batch: {record['describe']}.", "",
             f"- {'1 candidate per task' if k == 1 else f'k = {k} per task'}: real-code batch: "
             f"**{per_hour:.0f}** per hour" if per_hour else f"- k = {k}: real-code batch: nothing finished",
             f"- distinct programs verified: {cost.programs} of {record['programs']} in the batch "
             f"({record['items']} candidates, {record['reused']} identical copies reused by the verify entry); "
             f"verdicts: {n}; wall {record['wall_s']:.1f} s"
             + (" (**cut at the budget**: the rate counts what finished over the wall up to the cut)" if record["cut"] else ""),
             f"- statuses: {statuses}",
             f"- timings with the device alone: {sum(bool(r['exclusive']) for r in record['rows'])} / {n}; GPU "
             f"utilization mean: {record['gpu_util'] if record['gpu_util'] is None else round(record['gpu_util'], 2)}; "
             f"host CPU busy: {record['host_busy']:.2f}",
             f"- timed brackets that came late (the harness opened its gate before the child had queued its calls): "
             f"{sum(r.get('late') or 0 for r in record['rows'])} in {sum(bool(r.get('late')) for r in record['rows'])}"
             f" candidates; candidates whose forward waits on the host by their child's check: "
             f"{sum(bool(r.get('host_waits')) for r in record['rows'])} (the hint taken back by a bracket in time: "
             f"{sum(bool(r.get('host_waits_taken_back')) for r in record['rows'])})",
             *retry_lines(record), *slot_lines(record), *reference_lines(record),
             *([f"- the verify entry raised: {e}" for e in record["errors"]]), "",
             "Seconds per candidate by stage (medians over the distinct programs that have the stage; "
             "from Verdict.stage_seconds):", "", *cost_table(cost, HEADLINE_KEYS), "",
             "Host CPU-seconds per distinct program by kind of process (bench/lib/proc_cpu.py):", "",
             "| processes | CPU s per program | processes seen |", "| --- | --- | --- |"]
    # every process of the box is sampled: kinds under 0.05 s per program (the shell, kernel threads) left out
    lines += [f"| {kind} | {sec / max(cost.programs, 1):.2f} | {cnt} |"
              for kind, (sec, cnt) in sorted(record["cpu_by_kind"].items(), key=lambda kv: -kv[1][0])
              if sec >= 0.05 * max(cost.programs, 1)]
    from bench.lib.lock_trace import lines as lock_lines

    return per_hour, (lines + [""] + timeline_lines(record) + filled_lines(record) + build_lines(record)
                      + lock_lines(record.get("lock") or {}))


# the timeline's columns: a short name and the pieces of proc_cpu's kind names that go to it (the first that matches)
TIMELINE_KINDS = (("torch.compile", ("torch.compile",)), ("compilers", ("compilers",)), ("build steps", ("build steps",)),
                  ("reference children", ("reference children",)),
                  ("candidate children", ("candidate execution",)), ("execution processes", ("execution processes",)),
                  ("slot processes", ("slot processes",)), ("sandbox", ("sandbox", "bubblewrap")),
                  ("benchmark", ("benchmark process",)))


def timeline_lines(record: dict) -> list[str]:
    """Where the host's cores went in each window of the batch (bench/lib/proc_cpu.py ``ProcCpu.windows``): the busy
    share and the cores each kind of process held on average (CPU-s over the window's seconds), so that a ramp's
    contention (builds, the tasks' preparations and the slots' processes all starting at once) can be read."""
    wins = record.get("cpu_windows") or []
    if len(wins) < 2:
        return []
    width = wins[1]["t"] - wins[0]["t"] or 1.0
    names = [n for n, _ in TIMELINE_KINDS] + ["other"]
    out = [f"Host cores in use by kind of process, per {width:.0f} s window of the batch (CPU-s / window s; "
           "bench/lib/proc_cpu.py):", "", "| from s | host busy | " + " | ".join(names) + " |",
           "| --- | --- | " + " | ".join("---" for _ in names) + " |"]
    for w in wins:
        cols = dict.fromkeys(names, 0.0)
        for kind, sec in w["kinds"].items():
            name = next((n for n, keys in TIMELINE_KINDS if any(k in kind for k in keys)), "other")
            cols[name] += sec
        busy = "-" if w.get("busy") is None else f"{w['busy']:.2f}"
        out.append(f"| {w['t']:.0f} | {busy} | " + " | ".join(f"{cols[n] / width:.1f}" for n in names) + " |")
    return out + [""]


def filled_lines(record: dict) -> list[str]:
    """The rate once the pipeline has filled: verdicts after the first one over the wall after it (the first verdict
    waits for a whole compile, which a batch pays once and a long run amortises), and the same from the first verdict
    of a candidate that was executed (the first verdicts are often the static stage's, a second into the batch, so the
    first line alone is about the whole batch's rate: two runs of one commit whose ramps differ are told apart by the
    second)."""
    ts = sorted(r["t"] for r in record["rows"] if r.get("t") is not None)
    if len(ts) < 5 or record["wall_s"] - ts[0] < 30:  # too few to be a rate
        return []
    rate = (len(ts) - 1) / (record["wall_s"] - ts[0]) * 3600
    minutes = int(record["wall_s"] // 60) + 1
    per_minute = [sum(1 for t in ts if m * 60 <= t < (m + 1) * 60) for m in range(minutes)]
    out = [f"- first verdict after {ts[0]:.0f} s; from it to the end of the batch ({record['wall_s'] - ts[0]:.0f} s): "
           f"**{rate:.0f}** verdicts per hour (the pipeline filled)"]
    executed = sorted(r["t"] for r in record["rows"]
                      if r.get("t") is not None and "execute" in (r.get("stage_seconds") or {}))
    if executed and record["wall_s"] - executed[0] >= 30:
        after = sum(1 for t in ts if t > executed[0])
        out.append(f"- first executed verdict after {executed[0]:.0f} s; every verdict after it to the end of the batch "
                   f"({record['wall_s'] - executed[0]:.0f} s): **{after / (record['wall_s'] - executed[0]) * 3600:.0f}** "
                   "per hour (the execution slots filled)")
    return out + ["- verdicts in each minute of the batch (its ramp: builds, the tasks' preparations, the slots' "
                  "processes): " + ", ".join(map(str, per_minute)), ""]


def build_lines(record: dict) -> list[str]:
    """The batch's builds by the variant that produced each module (bench/lib/build_breakdown.py)."""
    from bench.lib.build_breakdown import table

    summary = (record.get("builds") or {}).get("summary")
    if not summary:
        return []
    return ["Builds by the variant that produced the module (finished builds under the batch's build root; "
            "bench/lib/build_breakdown.py):", "", *table(summary), ""]


def write_real_verdicts(records: list[dict], path: Path) -> None:
    """One JSON line per verdict of every batch (id, per_task, status, cheats, correct, speedup, and the times it
    comes from: the candidate's and eager's per call, the speedup's 95% interval; a speedup alone cannot say which
    side moved between two runs; and its seconds by stage, the child's pieces included; its task's reference
    timing's hold of the device, ``reference``; the null subtracted, each side's resolution from it and the
    candidate's calls a bracket, which the next batch's speedups are read against; the engine's runs again of its job,
    ``setup_retries``, ``memory_alone`` and ``setup_failures``, whose earlier runs' seconds the stage seconds do not hold)."""
    with open(path, "w") as f:
        for rec in records:
            for r in rec["rows"]:
                f.write(json.dumps({"id": r["id"], "per_task": rec["per_task"], "status": r["status"],
                                    "cheats": r["cheats"], "correct": r["correct"], "speedup": r["speedup"],
                                    **{k: r.get(k) for k in ("t", "task_id", "runtime_us", "eager_us", "speedup_lo",
                                                             "speedup_hi", "late", "host_waits",
                                                             "host_waits_taken_back", "reference", "stage_seconds",
                                                             "null_us", "resolution_us", "calls", "setup_retries",
                                                             "memory_alone", "setup_failures", "why")}})
                        + "\n")


def real_report(records: list[dict], *, device: str, cmd: str, commit: str, versions: str, backend: str,
                pch_s: float) -> str:
    """The markdown of a real-code run: what was measured and how, then real_section of each batch."""
    cfg = records[0]["config"] if records else {}
    md = [f"# Real-code batch on {device}", "",
          f"Command: `{cmd}` at {commit}; {versions}.", "",
          "The batch: the test bed's model-written KernelBench solutions (bench/testbed_build.py; "
          "bench/lib/testbed.py picks them: tasks round-robin over the levels, the tasks with the most distinct "
          "solutions first, the same tasks at every k; up to k distinct solutions per task across sources and "
          "models), each judged against its own problem file, through the verify entry (verifier/entry.py) on the "
          f"{backend} backend with the verifier's default settings ({', '.join(f'{k}={v}' for k, v in cfg.items())}), "
          "a fresh build directory per batch (cold build cache), each batch in a fresh process (no task plan or "
          "reference timing carried over). The one-off precompiled header is built before the clock. "
          "The figure counts distinct programs per hour of wall (one GPU): identical copies, which the verify "
          "entry verifies once, never raise it. "
          f"One-off before every clock (precompiled header of the default flags + a first build): {pch_s:.1f} s.", ""]
    for rec in records:
        md += real_section(rec)[1]
    if not records:
        md += ["No batch finished inside the budget.", ""]
    return "\n".join(md)
