"""Two runs of the test bed (bench/bench_testbed_gpu.py), row by row: what changed between them.

    PYTHONPATH=. python bench/testbed_compare.py \
        --before bench/results/testbed_h100_s0_d820c29.jsonl bench/results/testbed_h100_s1_66c2d27.jsonl \
        --after  $OUT/testbed_h100_s0of2.jsonl $OUT/testbed_h100_s1of2.jsonl [--out FILE.md]

Each side is one or more JSONL files of verdicts (shards merged as ``--report`` merges them: a verdict beats
``not reached``). Rows are matched by solution id. Prints (and writes with ``--out``) a markdown report:

- counts: ids on both sides, only before, only after, and how many of the common ids changed;
- the status transition matrix (before x after) over the ids judged on both sides;
- pass counts (status, strict, partial) before and after per source;
- every changed verdict: status before -> after, cheat codes removed and added, the key feedback line after.

A verdict changed when its status or its set of cheat codes differs. An id that is ``not reached`` on one side
is not a change: it is counted apart (the budget, not the verifier, decided it). Speed and error magnitudes are
not compared (other runs, other noise).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_testbed_gpu import NOT_REACHED, _cell, merge_rows  # noqa: E402


def compare(before: list[dict], after: list[dict]) -> dict:
    """The row-by-row comparison of two merged runs: ``common`` (ids judged on both sides), ``changed`` (pairs
    whose status or cheat codes differ), ``only_before`` / ``only_after`` (ids on one side only) and
    ``unreached`` (ids on both sides that one side did not reach)."""
    b = {r["id"]: r for r in before}
    a = {r["id"]: r for r in after}
    both = sorted(set(b) & set(a))
    unreached = [i for i in both if NOT_REACHED in (b[i]["status"], a[i]["status"])]
    common = [i for i in both if i not in set(unreached)]
    changed = [(b[i], a[i]) for i in common
               if b[i]["status"] != a[i]["status"] or set(b[i]["cheats"]) != set(a[i]["cheats"])]
    changed.sort(key=lambda p: (p[1]["source"], p[1]["level"], p[1]["problem_id"], p[1]["id"]))
    return {"common": [(b[i], a[i]) for i in common], "changed": changed, "unreached": unreached,
            "only_before": sorted(set(b) - set(a)), "only_after": sorted(set(a) - set(b))}


def _passes(rows: list[dict]) -> tuple[int, int, int]:
    return (sum(r["status"] == "pass" for r in rows), sum(r.get("pass_strict") is True for r in rows),
            sum(r.get("pass_partial") is True for r in rows))


def render_compare(c: dict, before_files: list, after_files: list) -> str:
    common, changed = c["common"], c["changed"]
    out = ["# Test bed: two runs compared row by row", "",
           "Before: " + ", ".join(Path(f).name for f in before_files) + ".",
           "After: " + ", ".join(Path(f).name for f in after_files) + ".", ""]
    for side, k in (("before", 0), ("after", 1)):
        devs = sorted({p[k].get("device") or "" for p in common} - {""})
        legal = sorted({p[k].get("legality") or "" for p in common} - {""})
        out.append(f"- {side}: device {', '.join(devs) or 'n/a'}; legality {', '.join(legal) or 'n/a'}")
    out += ["", "## Counts", "", "| ids judged on both | changed | status changed | only cheat codes changed | "
            "not reached on one side | only before | only after |", "| --- | --- | --- | --- | --- | --- | --- |",
            f"| {len(common)} | {len(changed)} | {sum(b['status'] != a['status'] for b, a in changed)} | "
            f"{sum(b['status'] == a['status'] for b, a in changed)} | {len(c['unreached'])} | "
            f"{len(c['only_before'])} | {len(c['only_after'])} |"]
    # status transitions
    before_st = sorted({b["status"] for b, _ in common}, key=lambda s: (s != "pass", s))
    after_st = sorted({a["status"] for _, a in common}, key=lambda s: (s != "pass", s))
    t = collections.Counter((b["status"], a["status"]) for b, a in common)
    out += ["", "## Status transitions (rows: before, columns: after)", "",
            "| before \\ after | " + " | ".join(after_st) + " | all |", "| --- | " + " | ".join("---" for _ in after_st) + " | --- |"]
    for s in before_st:
        out.append(f"| {s} | " + " | ".join(str(t.get((s, x), 0)) for x in after_st)
                   + f" | {sum(n for (y, _), n in t.items() if y == s)} |")
    # passes per source
    out += ["", "## Passes per source (ids judged on both sides)", "",
            "| source | n | pass before | pass after | strict before | strict after | partial before | partial after |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for src in sorted({b["source"] for b, _ in common}) + ["all"]:
        pairs = [p for p in common if src == "all" or p[0]["source"] == src]
        pb, pa = _passes([p[0] for p in pairs]), _passes([p[1] for p in pairs])
        out.append(f"| {src} | {len(pairs)} | {pb[0]} | {pa[0]} | {pb[1]} | {pa[1]} | {pb[2]} | {pa[2]} |")
    # the changed verdicts
    out += ["", f"## Changed verdicts ({len(changed)})", ""]
    if changed:
        out += ["| id | level | problem | status before | status after | cheats removed | cheats added | "
                "key feedback line after |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for b, a in changed:
            removed = sorted(set(b["cheats"]) - set(a["cheats"]))
            added = sorted(set(a["cheats"]) - set(b["cheats"]))
            out.append(f"| {a['id']} | {a['level']} | {_cell(a['problem'])} | {b['status']} | {a['status']} | "
                       f"{','.join(removed)} | {','.join(added)} | {_cell(a.get('key_line', ''))[:200]} |")
    else:
        out.append("no verdict changed")
    for label, ids in (("Not reached on one side", c["unreached"]), ("Only before", c["only_before"]),
                       ("Only after", c["only_after"])):
        if ids:
            out += ["", f"{label} ({len(ids)}): " + ", ".join(ids[:40]) + (" ..." if len(ids) > 40 else "")]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", nargs="+", required=True, metavar="FILE.jsonl")
    ap.add_argument("--after", nargs="+", required=True, metavar="FILE.jsonl")
    ap.add_argument("--out", default="", help="also write the report to this file")
    a = ap.parse_args(argv)
    for f in a.before + a.after:
        if not Path(f).is_file():
            print(f"error: {f}: no such file", file=sys.stderr)
            return 2
    text = render_compare(compare(merge_rows(a.before), merge_rows(a.after)), a.before, a.after)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
