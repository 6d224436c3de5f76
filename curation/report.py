"""The corpus report: five PNG plots and report.md, written into ``<corpus>/report/`` on every build.

Plots (matplotlib, Agg backend, no display needed):
    tasks_by_level_source.png   tasks per level, stacked by source
    pass_rate_by_level.png      first-turn and any-turn pass rate per level (the table's columns)
    speedup_distribution.png    speedup over eager of correct verdicts (log2 histogram)
    duplicates_removed.png      rows removed per corpus and reason (near-copies, filters, decontamination)
    turns_to_repair.png         solved dialogues by the turn of their first correct answer, and unsolved ones

The numbers come from DuckDB over the directory's views (curation.query) and from the build
stats (``report/stats.json``); the verification cost (candidates per GPU-hour, seconds per candidate by stage:
verifier/serve/cost.py) from the build stats, else from the directory's verdicts. A plot with no data still gets
written, saying so, so the set of
files is the same for every run. Not guaranteed: byte-identical PNGs across matplotlib versions.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from verifier.serve.cost import VerificationCost, cost_section, run_cost
from curation.query import connect
from kernelmill.store import usual_mode, write_text_if_changed

PLOTS = ("tasks_by_level_source", "pass_rate_by_level", "speedup_distribution", "duplicates_removed",
         "turns_to_repair")

SQL_TASKS = "SELECT level, source, count(*) AS n FROM tasks GROUP BY level, source ORDER BY level, source"
SQL_PASS = """
SELECT t.level,
       count(*) FILTER (WHERE c.parent_id IS NULL OR c.parent_id = '')                   AS first_turn_samples,
       avg(CASE WHEN v.correct THEN 1.0 ELSE 0.0 END)
           FILTER (WHERE c.parent_id IS NULL OR c.parent_id = '')                        AS first_turn_pass_rate,
       avg(CASE WHEN v.correct THEN 1.0 ELSE 0.0 END)                                    AS any_turn_pass_rate
FROM candidates c JOIN verdicts v USING (candidate_id) JOIN tasks t ON t.task_id = c.task_id
GROUP BY t.level ORDER BY t.level
"""
SQL_SPEEDUP = "SELECT speedup_eager FROM verdicts WHERE correct AND speedup_eager IS NOT NULL AND speedup_eager > 0"
SQL_TURNS = "SELECT solved, list_transform(turn_verdicts, lambda x: x.correct) AS correct FROM dialogues"
SQL_STATUS = "SELECT status, count(*) AS n FROM verdicts GROUP BY status ORDER BY n DESC, status"
SQL_POLICIES = "SELECT count_if(pass_strict), count_if(pass_partial), count(*) FROM verdicts"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=path.parent)
    usual_mode(fd)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100, bbox_inches="tight", metadata={"Software": None})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        _plt().close(fig)


def _no_data(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} yet", ha="center", va="center", transform=ax.transAxes, fontsize=12)
    ax.set_xticks([])
    ax.set_yticks([])


def first_correct_turn(correct: list[bool] | None) -> int | None:
    """1-based turn of the first correct answer, or None."""
    for i, ok in enumerate(correct or []):
        if ok:
            return i + 1
    return None


def _policies(con) -> tuple | None:
    """(strict passes, partial passes, verdicts); None for a verdicts table written before the policy columns."""
    try:
        return tuple(con.sql(SQL_POLICIES).fetchall()[0])
    except Exception:  # noqa: BLE001 - duckdb's binder error on a table without the columns (duckdb stays lazy here)
        return None


def gather(corpus_dir: str | os.PathLike) -> dict:
    """The numbers behind the plots, from DuckDB over the directory's views."""
    con = connect(corpus_dir)
    try:
        turns: dict[str, int] = {}
        for solved, correct in con.sql(SQL_TURNS).fetchall():
            t = first_correct_turn(correct)
            key = str(t) if (solved and t) else "unsolved"
            turns[key] = turns.get(key, 0) + 1
        return {
            "tasks": con.sql(SQL_TASKS).fetchall(),
            "pass": con.sql(SQL_PASS).fetchall(),
            "speedups": [r[0] for r in con.sql(SQL_SPEEDUP).fetchall()],
            "turns": turns,
            "corpus_rows": {n: con.sql(f"SELECT count(*) FROM {n}").fetchall()[0][0] for n in ("sft", "rft", "rl")},
            "statuses": con.sql(SQL_STATUS).fetchall(),
            "policies": _policies(con),
        }
    finally:
        con.close()


def _plot_tasks(data, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = data["tasks"]
    if not rows:
        _no_data(ax, "tasks")
    else:
        levels = sorted({r[0] for r in rows})
        sources = sorted({r[1] for r in rows})
        bottom = [0] * len(levels)
        for s in sources:
            counts = [sum(r[2] for r in rows if r[0] == lv and r[1] == s) for lv in levels]
            ax.bar([str(lv) for lv in levels], counts, bottom=bottom, label=s)
            bottom = [b + c for b, c in zip(bottom, counts)]
        ax.set_xlabel("level")
        ax.set_ylabel("tasks")
        ax.legend(title="source")
    ax.set_title("Tasks by level and source")
    _save(fig, path)


def pass_series(rows) -> tuple[list, list[float], list[float]]:
    """What the pass-rate plot draws: per level the first-turn and the any-turn pass rate, the same columns as the
    report's table beside it (level, first-turn samples, first-turn pass rate, any-turn pass rate)."""
    return [r[0] for r in rows], [r[2] or 0.0 for r in rows], [r[3] or 0.0 for r in rows]


def _plot_pass(data, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = data["pass"]
    if not rows:
        _no_data(ax, "verdicts")
    else:
        levels, first, any_turn = pass_series(rows)
        xs = range(len(levels))
        w = 0.38
        ax.bar([x - w / 2 for x in xs], first, width=w, label="first-turn pass rate")
        ax.bar([x + w / 2 for x in xs], any_turn, width=w, label="any-turn pass rate")
        ax.set_xticks(list(xs), [str(lv) for lv in levels])
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("level")
        ax.set_ylabel("rate")
        # below the axes: a legend inside covered the bars of a level whose rates are near 1
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax.set_title("Pass rate by level")
    _save(fig, path)


def _plot_speedup(data, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    sp = [s for s in data["speedups"] if s and s > 0]
    if not sp:
        _no_data(ax, "correct timed verdicts")
    else:
        logs = [math.log2(s) for s in sp]
        ax.hist(logs, bins=min(40, max(5, len(sp) // 3)))
        ax.axvline(0.0, color="k", linestyle="--", linewidth=1)
        ax.set_xlabel("log2(speedup over eager)   (right of dashed line: faster)")
        ax.set_ylabel("correct candidates")
    ax.set_title("Speedup distribution")
    _save(fig, path)


def _plot_removed(stats, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    removed = (stats or {}).get("removed", {})
    bars = [(f"{c}:{reason}", n) for c in ("sft", "rft", "rl") for reason, n in sorted(removed.get(c, {}).items()) if n]
    if not bars:
        _no_data(ax, "removals")
    else:
        colors = ["tab:red" if "duplicate" in k else "tab:purple" if "contaminat" in k else "tab:gray" for k, _ in bars]
        ax.barh([k for k, _ in bars], [n for _, n in bars], color=colors)
        ax.invert_yaxis()
        ax.set_xlabel("rows removed (red: near-duplicates, purple: decontamination)")
    ax.set_title("Rows removed by corpus and reason")
    _save(fig, path)


def _plot_turns(data, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    turns = data["turns"]
    if not turns:
        _no_data(ax, "dialogues")
    else:
        keys = sorted((k for k in turns if k != "unsolved"), key=int) + (["unsolved"] if "unsolved" in turns else [])
        ax.bar(keys, [turns[k] for k in keys], color=["tab:green"] * (len(keys) - ("unsolved" in turns))
               + (["tab:red"] if "unsolved" in turns else []))
        ax.set_xlabel("turn of the first correct answer")
        ax.set_ylabel("dialogues")
    ax.set_title("Turns to repair")
    _save(fig, path)


def _md_table(header: list[str], rows: list) -> list[str]:
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else ("" if v is None else str(v))  # noqa: E731
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)] + \
        ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]


def report_cost(root: Path, stats: dict) -> VerificationCost | None:
    """The run's verification cost: the one the build recorded (over the run's verdicts, before decontamination),
    else the one of the verdicts stored in ``root``."""
    if stats.get("verification_cost"):
        return VerificationCost.from_dict(stats["verification_cost"])
    return run_cost(root)


def write_report(corpus_dir: str | os.PathLike, stats: dict | None = None) -> Path:
    """Write the five plots and ``report/report.md``; returns the report.md path.

    ``stats`` (from build_corpora) adds the removal and decontamination sections; without it,
    ``report/stats.json`` is used when present."""
    root = Path(corpus_dir)
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    if stats is None:
        p = out / "stats.json"
        stats = json.loads(p.read_text()) if p.is_file() else {}
    data = gather(root)
    _plot_tasks(data, out / "tasks_by_level_source.png")
    _plot_pass(data, out / "pass_rate_by_level.png")
    _plot_speedup(data, out / "speedup_distribution.png")
    _plot_removed(stats, out / "duplicates_removed.png")
    _plot_turns(data, out / "turns_to_repair.png")

    md = ["# Corpus report", ""]
    md += ["Rows per corpus: " + ", ".join(f"{k} {v}" for k, v in data["corpus_rows"].items()) + ".", ""]
    md += ["## Tasks by level and source", "", *_md_table(["level", "source", "tasks"], data["tasks"]),
           "", "![](tasks_by_level_source.png)", ""]
    md += ["## Pass rate by level", "",
           *_md_table(["level", "first-turn samples", "first-turn pass rate", "any-turn pass rate"], data["pass"]),
           "", "![](pass_rate_by_level.png)", ""]
    faults = {st: n for st, n in data["statuses"] if st in ("verifier_error", "task_error")}
    md += ["## Verdicts", "", *_md_table(["status", "verdicts"], data["statuses"]), "",
           f"Not the candidates' outcome, left out of every pass rate, reward and corpus: "
           f"{faults.get('task_error', 0)} task faults (`task_error`: the task's reference output does not depend "
           f"on its inputs) and {faults.get('verifier_error', 0)} verifier faults (`verifier_error`)."]
    if data["policies"]:
        strict, partial, total = data["policies"]
        md += [f"Legality policies over the same {total} verdicts: {strict} pass strict (no PyTorch compute in "
               f"forward, the corpora's rule), {partial} pass partial (KernelBench's rule)."]
    md += [""]
    sp = sorted(data["speedups"])
    if sp:
        med = sp[len(sp) // 2] if len(sp) % 2 else (sp[len(sp) // 2 - 1] + sp[len(sp) // 2]) / 2
        md += ["## Speedup distribution", "", f"{len(sp)} correct timed candidates; median speedup over eager "
               f"{med:.3f}x; faster than eager: {sum(s > 1 for s in sp)}.", "", "![](speedup_distribution.png)", ""]
    else:
        md += ["## Speedup distribution", "", "No correct timed candidates.", "", "![](speedup_distribution.png)", ""]
    md += ["## Removed rows", ""]
    removed = stats.get("removed", {})
    rem_rows = [(c, reason, n) for c in ("sft", "rft", "rl") for reason, n in sorted(removed.get(c, {}).items())]
    md += (_md_table(["corpus", "reason", "rows"], rem_rows) if rem_rows else ["Nothing removed."])
    md += ["", "Reasons: `near_duplicate` (MinHash near-copy of a kept row of the same task), `over_k` (beyond "
           "the per-task rft cap), `unsolved` / `final_incorrect` / `below_min_speedup` (sft filters), `incorrect` / "
           "`unverified` (rft), `all_pass` / `none_pass` / `no_samples` (rl: no learning signal or no measurement), "
           "`contaminated_tasks` (tasks removed by decontamination, with all their rows).", "",
           "![](duplicates_removed.png)", ""]
    dec = stats.get("decontamination", {})
    md += ["## Decontamination", ""]
    if dec.get("benchmark_dir"):
        hits = dec.get("removed_tasks", [])
        md += [f"Benchmark `{dec['benchmark_dir']}`: {dec.get('benchmark_files', 0)} programs; {dec.get('ngram')}-grams; "
               f"a task is removed at Jaccard >= {dec.get('overlap')} with a program, or when it contains >= "
               f"{dec.get('contain')} of a program of >= {dec.get('min_ngrams')} uncommon n-grams, or matches one "
               f"exactly or token for token; {len(hits)} tasks removed.", ""]

        def others(xs):
            return "; ".join(f"{x['path']} ({x['jaccard']:.2f} / {x['contained']:.2f})" for x in xs[:3]) or "-"

        if hits:
            md += _md_table(["task_id", "task", "reason", "benchmark program", "Jaccard", "contained",
                             "also overlaps (Jaccard / contained)"],
                            [(h["task_id"], h["task_name"], h["reason"], h["benchmark_path"], h["overlap"],
                              h.get("contained", 1.0), others(h.get("others", []))) for h in hits])
        near = dec.get("kept_overlaps", [])
        if near:
            md += ["", "Kept, but overlapping a benchmark program (Jaccard >= 0.3 or >= half of it contained): "
                   f"{len(near)} tasks.", "",
                   *_md_table(["task_id", "task", "overlapping programs (Jaccard / contained)"],
                              [(x["task_id"], x["task_name"], others(x["programs"])) for x in near])]
    else:
        md += ["No benchmark directory given (set `[curate] decontaminate_dir` or `--decontaminate DIR`)."]
    md += ["", *cost_section(report_cost(root, stats))]
    turns = data["turns"]
    md += ["", "## Turns to repair", "",
           *_md_table(["first correct turn", "dialogues"], sorted(turns.items(), key=lambda kv: (kv[0] == "unsolved", kv[0]))),
           "", "![](turns_to_repair.png)", ""]
    path = out / "report.md"
    write_text_if_changed(path, "\n".join(md))
    return path
