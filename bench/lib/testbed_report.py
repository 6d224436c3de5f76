"""The test bed's verdict rows and reports: one JSONL row per verdict (bench/lib/testbed.py ``run_testbed`` writes
them), shards merged, the markdown tables against each source's own judgement, the hand classification of the
disagreements, and two runs compared row by row (``compare``, ``regressions``: what the gpu suite asserts).

    rows = merge_rows([Path("testbed_h100_s0of2.jsonl"), Path("testbed_h100_s1of2.jsonl")])
    text = render(rows, load_classes(Path("bench/results/testbed_classes.csv")), "title", [])
    c = compare(merge_rows(before_files), merge_rows(after_files)); print(render_compare(c, before_files, after_files))

Guarantees: ``merge_rows`` keeps a verdict over ``not reached`` whatever the file order (else the later file
wins); a row that was not reached is never a disagreement nor a change (the budget decided it, not the
verifier); ``compare`` calls a verdict changed when its status or its set of cheat codes differs. Not compared:
speed and error magnitudes (other runs, other noise); speedups against the sources' (other GPUs and harnesses).
"""

from __future__ import annotations

import collections
import csv
import json
import re
from pathlib import Path

from kernelmill.errors import InputError

CLASSES = ("candidate bug", "tolerance", "task at fault", "verifier fault")
NOT_REACHED = "not reached"
# static_ok / static_ok_torch: static-only rows that went through both stages (the second with PyTorch compute
# found, which the strict policy rejects at the end of a run and the partial one may pass)
AGREES_WITH_CORRECT = ("pass", "static_ok", "static_ok_torch")

# the headline and advice lines every verdict of a kind shares (verifier/judge/feedback.py), and build chatter
_GENERIC = re.compile(r"^(Your (kernel|program|extension) |Anti-cheat C\d\d_[A-Z_]+: |Compute the result|Reply with|"
                      r"I could not find|First compiler errors:|\[verifier\]|Traceback|File \")")
_SPECIFIC = re.compile(r"(?i)\[C\d\d_|static check|runtime check|mismatch|differ|max abs|error:|illegal|timed out|crash|"
                       r"never launched|no code|not found|tolerance|expected")


def findings(feedback: str) -> list[str]:
    """The lines of the feedback that name what was found (not the generic advice around them)."""
    lines = [ln.strip() for ln in (feedback or "").splitlines() if ln.strip()]
    return [ln for ln in lines if not _GENERIC.match(ln) and _SPECIFIC.search(ln)]


def key_line(feedback: str) -> str:
    """The line of the feedback that says why: the first specific finding, else the first non-generic line."""
    lines = [ln.strip() for ln in (feedback or "").splitlines() if ln.strip()]
    found = findings(feedback)
    if found:
        return found[0][:240]
    rest = [ln for ln in lines if not _GENERIC.match(ln)]
    return (rest or lines or [""])[0][:240]


def _base_row(s, legality: str) -> dict:
    return {"id": s.id, "source": s.source, "level": int(s.level), "problem": s.problem_name,
            "problem_id": s.problem_id, "model": s.model, "source_judgement": s.source_judgement,
            "source_speedup": s.source_speedup, "source_gpu": s.source_gpu, "legality": legality}


def verdict_row(s, v, legality: str) -> dict:
    """The JSONL row of solution ``s`` (a bench.lib.testbed.TestbedSolution) and its Verdict ``v``."""
    total = sum(float(x) for k, x in (v.stage_seconds or {}).items() if isinstance(x, (int, float))
                and not k.startswith("child_"))
    return {**_base_row(s, legality),
            "status": v.status, "stage_reached": v.stage_reached, "cheats": list(v.cheats),
            "max_abs_err": v.max_abs_err, "max_rel_err": v.max_rel_err,
            "own_kernel_share": getattr(v, "own_kernel_share", None), "fallback_ops": list(v.fallback_ops),
            "foreign_kernels": list(getattr(v, "foreign_kernels", []) or []),
            "pass_strict": getattr(v, "pass_strict", None), "pass_partial": getattr(v, "pass_partial", None),
            "speedup_eager": v.speedup_eager, "runtime_us": v.runtime_us, "eager_us": v.eager_us,
            "feedback": (v.feedback or "")[:300], "key_line": key_line(v.feedback),
            "findings": findings(v.feedback)[:12], "stage_seconds_total": round(total, 2), "device": v.device or ""}


def not_reached_row(s, legality: str, why: str, status: str = NOT_REACHED) -> dict:
    """The row of a solution without a verdict: ``not reached`` (the budget) or ``bench_error`` (unreadable)."""
    return {**_base_row(s, legality),
            "status": status, "stage_reached": "", "cheats": [], "max_abs_err": None, "max_rel_err": None,
            "own_kernel_share": None, "fallback_ops": [], "foreign_kernels": [], "pass_strict": None,
            "pass_partial": None, "speedup_eager": None, "runtime_us": None, "eager_us": None,
            "feedback": why, "key_line": why, "findings": [], "stage_seconds_total": 0.0, "device": ""}


def merge_rows(files) -> list[dict]:
    """Rows of several JSONL files by id: a verdict beats ``not reached``; otherwise the later file wins.
    InputError naming the file and line for a missing file or a row that is not JSON or has no id/status."""
    by_id: dict[str, dict] = {}
    for f in files:
        if not Path(f).is_file():
            raise InputError(str(f), "no such verdict file")
        for n, line in enumerate(Path(f).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                old = by_id.get(row["id"])
                status = row["status"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise InputError(f"{f} line {n}", f"not a verdict row ({type(e).__name__}: {e})") from None
            if old is None or status != NOT_REACHED or old["status"] == NOT_REACHED:
                by_id[row["id"]] = row
    return sorted(by_id.values(), key=lambda r: (r["source"], r["level"], r["problem_id"], r["id"]))


def load_classes(path: Path | None) -> dict[str, dict]:
    """id -> {"class", "note"} from JSON / YAML ({id: class} or {id: {class, note}}) or CSV (id,class,note).
    InputError naming the file and id for a class outside CLASSES."""
    if not path:
        return {}
    text = Path(path).read_text()
    if str(path).endswith(".csv"):
        raw = {row["id"]: {"class": row.get("class", ""), "note": row.get("note", "")}
               for row in csv.DictReader(text.splitlines())}
    elif str(path).endswith((".yaml", ".yml")):
        import yaml

        raw = yaml.safe_load(text) or {}
    else:
        raw = json.loads(text)
    out = {}
    for k, v in raw.items():
        entry = {"class": v, "note": ""} if isinstance(v, str) else {"class": v.get("class", ""), "note": v.get("note", "")}
        if entry["class"] not in CLASSES:
            raise InputError(f"{path}: {k}", f"class {entry['class']!r} is not one of {', '.join(CLASSES)}")
        out[str(k)] = entry
    return out


def is_disagreement(row: dict) -> bool:
    if row["status"] == NOT_REACHED:
        return False
    return (row["source_judgement"] == "correct") != (row["status"] in AGREES_WITH_CORRECT)


def finding_kind(line: str) -> str:
    """A finding with its specifics (line numbers, names in backticks, function lists) blanked out."""
    k = re.sub(r"line \d+", "line N", line)
    k = re.sub(r"`[^`]*`", "`X`", k)
    return re.sub(r"\([a-z_0-9, ]+\) is ever called", "(X) is ever called", k)[:200]


def _cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _num(x, fmt: str = ".2e") -> str:
    return "" if x is None else format(x, fmt) if isinstance(x, (int, float)) else str(x)


def _by_group(rows: list[dict], groups, head: str, cols, count) -> list[str]:
    out = [f"| source | level | {head}" + " | ".join(cols) + " |",
           "| --- | --- | " + ("--- | " if head else "") + " | ".join("---" for _ in cols) + " |"]
    for g in groups + [("all", "")]:
        rs = rows if g[0] == "all" else [r for r in rows if (r["source"], r["level"]) == g]
        c = count(rs)
        out.append(f"| {g[0]} | {g[1]} | " + (f"{len(rs)} | " if head else "") + " | ".join(str(c.get(s, 0)) for s in cols) + " |")
    return out


def render(rows: list[dict], classes: dict[str, dict], title: str, header_lines: list[str]) -> str:
    """The markdown report: verdicts by status and by cheat code per source and level, the agreement with each
    source's judgement, every disagreement with its class, the findings by kind, what was not reached."""
    statuses = sorted({r["status"] for r in rows}, key=lambda s: (s != "pass", s == NOT_REACHED, s))
    groups = sorted({(r["source"], r["level"]) for r in rows})
    out = [f"# {title}", ""] + header_lines + ["", "## Verdicts by status", ""]
    out += _by_group(rows, groups, "n | ", statuses, lambda rs: collections.Counter(r["status"] for r in rs))
    codes = sorted({c for r in rows for c in r["cheats"]})
    out += ["", "## Verdicts by cheat code", ""]
    if codes:
        out += _by_group(rows, groups, "", codes, lambda rs: collections.Counter(x for r in rs for x in r["cheats"]))
    else:
        out.append("no cheat codes")
    judged = [r for r in rows if r["status"] != NOT_REACHED]
    sts = [s for s in statuses if s != NOT_REACHED]
    out += ["", "## Agreement with each source's own judgement", "",
            "Rows: the source's judgement; columns: the verifier's status (pass agrees with correct, any other "
            "status with incorrect). strict / partial: how many verdicts each legality policy passes, where "
            "the verifier reports it (`pass_strict` / `pass_partial`).", "",
            "| source | judgement | n | " + " | ".join(sts) + " | agree | strict pass | partial pass |",
            "| --- | --- | --- | " + " | ".join("---" for _ in sts) + " | --- | --- | --- |"]
    for src in sorted({r["source"] for r in judged}) + ["all"]:
        for j in ("correct", "incorrect"):
            rs = [r for r in judged if (src == "all" or r["source"] == src) and r["source_judgement"] == j]
            if not rs:
                continue
            c = collections.Counter(r["status"] for r in rs)
            agree = sum(not is_disagreement(r) for r in rs)
            ps = sum(r.get("pass_strict") is True for r in rs)
            pp = sum(r.get("pass_partial") is True for r in rs)
            out.append(f"| {src} | {j} | {len(rs)} | " + " | ".join(str(c.get(s, 0)) for s in sts)
                       + f" | {agree} ({100 * agree / len(rs):.0f}%) | {ps} | {pp} |")
    dis = [r for r in rows if is_disagreement(r)]
    cc = collections.Counter(classes.get(r["id"], {}).get("class", "") or "(unclassified)" for r in dis)
    out += ["", f"## Disagreements ({len(dis)})", "",
            "Class (by hand, `--classify`): candidate bug / tolerance / task at fault / verifier fault. " +
            ", ".join(f"{k}: {n}" for k, n in sorted(cc.items())), "",
            "| id | level | problem | status | cheats | max abs / rel err | own share | key feedback line | class | note |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in dis:
        cl = classes.get(r["id"], {})
        out.append(f"| {r['id']} | {r['level']} | {_cell(r['problem'])} | {r['status']} | {','.join(r['cheats'])} | "
                   f"{_num(r['max_abs_err'])} / {_num(r['max_rel_err'])} | {_num(r['own_kernel_share'], '.2f')} | "
                   f"{_cell(r['key_line'])} | {cl.get('class', '')} | {_cell(cl.get('note', ''))} |")
    kinds: dict[str, list] = collections.defaultdict(list)
    for r in rows:
        for k in {finding_kind(f) for f in r.get("findings", [])}:
            kinds[k].append(r)
    if kinds:
        out += ["", "## Findings by kind", "", "Each kind of finding line (names blanked), how many solutions have it, how "
                "many have it as their only kind, and the names found.", "",
                "| finding | solutions | only kind | names (count) |", "| --- | --- | --- | --- |"]
        only = collections.Counter(next(iter(ks)) for r in rows
                                   if len(ks := {finding_kind(f) for f in r.get("findings", [])}) == 1)
        for k, rs in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            names = collections.Counter(m for r in rs for f in r.get("findings", []) if finding_kind(f) == k
                                        for m in re.findall(r"`([^`]*)`", f))
            out.append(f"| {_cell(k)} | {len(rs)} | {only.get(k, 0)} | "
                       + _cell(", ".join(f"{n} ({c})" for n, c in names.most_common(12))) + " |")
    unknown = sorted(set(classes) - {r["id"] for r in dis})
    if unknown:
        out += ["", "Classified ids that are not disagreements in these rows: " + ", ".join(unknown)]
    nr = [r for r in rows if r["status"] == NOT_REACHED]
    if nr:
        out += ["", f"Not reached ({len(nr)}): " + ", ".join(r["id"] for r in nr[:40]) + (" ..." if len(nr) > 40 else "")]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- two runs compared

def compare(before: list[dict], after: list[dict]) -> dict:
    """The row-by-row comparison of two merged runs: ``common`` (pairs judged on both sides), ``changed`` (pairs
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


def regressions(before: list[dict], after: list[dict]) -> list[str]:
    """What the gpu suite fails on, one line each (id, before -> after, the key feedback line): a solution that
    passed before and has another status now, and a solution its source judged correct that got
    ``verifier_error`` now. Rows not reached on either side are not judged."""
    c = compare(before, after)
    out = [f"{a['id']}: pass -> {a['status']}: {a.get('key_line', '')}" for b, a in c["changed"]
           if b["status"] == "pass" and a["status"] != "pass"]
    out += [f"{r['id']}: verifier_error on a solution its source judged correct: {r.get('key_line', '')}"
            for r in after if r["status"] == "verifier_error" and r.get("source_judgement") == "correct"]
    return out


def _passes(rows: list[dict]) -> tuple[int, int, int]:
    return (sum(r["status"] == "pass" for r in rows), sum(r.get("pass_strict") is True for r in rows),
            sum(r.get("pass_partial") is True for r in rows))


def render_compare(c: dict, before_files: list, after_files: list) -> str:
    """The markdown of :func:`compare`: counts, the status transition matrix, passes per source, every changed
    verdict (status before -> after, cheat codes removed and added, the key feedback line after)."""
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
    before_st = sorted({b["status"] for b, _ in common}, key=lambda s: (s != "pass", s))
    after_st = sorted({a["status"] for _, a in common}, key=lambda s: (s != "pass", s))
    t = collections.Counter((b["status"], a["status"]) for b, a in common)
    out += ["", "## Status transitions (rows: before, columns: after)", "",
            "| before \\ after | " + " | ".join(after_st) + " | all |", "| --- | " + " | ".join("---" for _ in after_st) + " | --- |"]
    for s in before_st:
        out.append(f"| {s} | " + " | ".join(str(t.get((s, x), 0)) for x in after_st)
                   + f" | {sum(n for (y, _), n in t.items() if y == s)} |")
    out += ["", "## Passes per source (ids judged on both sides)", "",
            "| source | n | pass before | pass after | strict before | strict after | partial before | partial after |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for src in sorted({b["source"] for b, _ in common}) + ["all"]:
        pairs = [p for p in common if src == "all" or p[0]["source"] == src]
        pb, pa = _passes([p[0] for p in pairs]), _passes([p[1] for p in pairs])
        out.append(f"| {src} | {len(pairs)} | {pb[0]} | {pa[0]} | {pb[1]} | {pa[1]} | {pb[2]} | {pa[2]} |")
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
