"""The test bed of real model-written KernelBench solutions (issue 22) through the verifier, against each
source's own correctness judgement.

    # the run (GPU box; carry ["ext"]; each call must end inside 10 minutes, so shard):
    PYTHONPATH=. python bench/bench_testbed_gpu.py --manifest ext/testbed/manifest.jsonl --budget-s 560 --shard 0/3
    # the extraction and static stages only, on any machine (no compiler, no GPU):
    PYTHONPATH=. python bench/bench_testbed_gpu.py --manifest ext/testbed/manifest.jsonl --static-only
    # the tables again from one or more JSONL files (shards merged), with the hand classification:
    PYTHONPATH=. python bench/bench_testbed_gpu.py --report bench/results/testbed_h100_s*.jsonl --classify FILE
    # the forks' solutions (both judgements), one per problem, in four shards of about 120:
    PYTHONPATH=. python bench/bench_testbed_gpu.py --sources technoabsurdist,yenhaohuang --per-problem 1 --shard 0/4
    # two runs compared verdict by verdict: bench/testbed_compare.py --before OLD.jsonl... --after NEW.jsonl...

The set comes from bench/testbed_build.py (``ext/testbed/manifest.jsonl``). Every solution is verified with
its source's own problem file as the task, through ``verifier.api.verify_batch`` on cuda, in chunks, so a
time budget (``--budget-s``) can stop the run between chunks; a watchdog writes what is done and exits at
the budget whatever is running. Each verdict is appended to the JSONL as it arrives (a killed run keeps
them); what was not reached is listed as ``not reached``.

Writes under $OUT (else bench/results/): ``testbed_<name>.jsonl`` (one row per verdict) and
``testbed_<name>.md``: verdicts by status and by cheat code per source and level; the agreement matrix
(source judgement x verifier status) with the strict and partial pass counts where the verifier reports
them; every disagreement with a class column (candidate bug / tolerance / task at fault / verifier fault)
filled from ``--classify`` (JSON, YAML or CSV: id -> class and note) and left empty otherwise.

Settings: ``--set KEY=VALUE`` sets any ``VerifyConfig`` field; ``--legality strict|partial`` sets
``VerifyConfig.legality`` where the verifier has it (read with getattr: the script runs before and after it
exists). Defaults chosen for a bench run, not the verifier's: ``time_torch_compile=false`` and
``timing_trials=5`` (agreement on correctness and legality is the question here, not speed).

Not checked here: speedups against the source's (different GPUs, different harnesses). CUDA-L1 and the
leaderboard publish only solutions they judged correct; the two KernelBench forks publish both judgements.
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLASSES = ("candidate bug", "tolerance", "task at fault", "verifier fault")
NOT_REACHED = "not reached"
# a bench run asks about correctness and legality, not speed: no torch.compile of every reference (a minute
# each), and the fewest timed iterations that still re-check timed outputs (C16); --set overrides both
BENCH_DEFAULTS = {"time_torch_compile": False, "timing_trials": 5}


# ----------------------------------------------------------------------------- manifest and selection

def load_manifest(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in rows:
        r["_base"] = str(path.parent)
    return rows


def select(rows: list[dict], levels: str = "", sources: str = "", shard: str = "0/1", limit: int = 0,
           skip_ids: set | None = None, per_problem: int = 0) -> list[dict]:
    """The rows of this run: filtered by level and source, at most ``per_problem`` solutions of each (source,
    level, problem) (picked by a hash of the id: no model preferred; where the source judged some correct and some
    incorrect, the picks alternate between its judgements, so ``per_problem=2`` takes one of each), then shard
    ``i/n`` takes every n-th row of the list sorted by source, level and id (so each shard gets its share of every
    level and source), then ``limit``."""
    if levels:
        want = {int(x) for x in levels.split(",")}
        rows = [r for r in rows if int(r["level"]) in want]
    if sources:
        want_s = set(sources.split(","))
        unknown = sorted(want_s - {r["source"] for r in rows})
        if unknown:
            raise SystemExit(f"--sources: no solution of {', '.join(unknown)} in the manifest; it has "
                             + ", ".join(sorted({r['source'] for r in rows})))
        rows = [r for r in rows if r["source"] in want_s]
    if per_problem:
        groups = collections.defaultdict(list)
        for r in rows:
            groups[(r["source"], int(r["level"]), r["problem_id"])].append(r)
        rows = [r for g in groups.values() for r in _alternate_judgements(g)[:per_problem]]
    if skip_ids:
        rows = [r for r in rows if r["id"] not in skip_ids]
    i, n = (int(x) for x in shard.split("/"))
    if not 0 <= i < n:
        raise SystemExit(f"--shard {shard}: want i/n with 0 <= i < n")
    rows = sorted(rows, key=lambda r: (r["source"], int(r["level"]), r["id"]))[i::n]
    return rows[:limit] if limit else rows


def _alternate_judgements(group: list[dict]) -> list[dict]:
    """The group in hash order of the ids, interleaved by judgement (the first pick is the hash-first id whatever
    its judgement, so a source that judged everything correct gets the same picks as a plain hash order)."""
    ordered = sorted(group, key=lambda r: hashlib.sha1(r["id"].encode()).hexdigest())
    by_j: dict[str, list[dict]] = {}
    for r in ordered:
        by_j.setdefault(r.get("source_judgement", ""), []).append(r)
    queues = list(by_j.values())
    out: list[dict] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def read_text(r: dict, key: str) -> str:
    return (Path(r["_base"]) / r[key]).read_text()


# ----------------------------------------------------------------------------- one row per verdict

# the headline and advice lines every verdict of a kind shares (verifier/feedback.py), and build chatter
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


def verdict_row(r: dict, v, legality: str) -> dict:
    total = sum(float(x) for k, x in (v.stage_seconds or {}).items() if isinstance(x, (int, float))
                and not k.startswith("child_"))
    return {
        "id": r["id"], "source": r["source"], "level": int(r["level"]), "problem": r["problem_name"],
        "problem_id": r["problem_id"], "model": r.get("model", ""), "source_judgement": r["source_judgement"],
        "source_speedup": r.get("source_speedup"), "source_gpu": r.get("source_gpu", ""),
        "status": v.status, "stage_reached": v.stage_reached, "cheats": list(v.cheats),
        "max_abs_err": v.max_abs_err, "max_rel_err": v.max_rel_err,
        "own_kernel_share": getattr(v, "own_kernel_share", None), "fallback_ops": list(v.fallback_ops),
        "foreign_kernels": list(getattr(v, "foreign_kernels", []) or []),
        "pass_strict": getattr(v, "pass_strict", None), "pass_partial": getattr(v, "pass_partial", None),
        "speedup_eager": v.speedup_eager, "runtime_us": v.runtime_us, "eager_us": v.eager_us,
        "feedback": (v.feedback or "")[:300], "key_line": key_line(v.feedback), "findings": findings(v.feedback)[:12],
        "stage_seconds_total": round(total, 2), "legality": legality, "device": v.device or "",
    }


def not_reached_row(r: dict, legality: str, why: str, status: str = NOT_REACHED) -> dict:
    return {"id": r["id"], "source": r["source"], "level": int(r["level"]), "problem": r["problem_name"],
            "problem_id": r["problem_id"], "model": r.get("model", ""), "source_judgement": r["source_judgement"],
            "source_speedup": r.get("source_speedup"), "source_gpu": r.get("source_gpu", ""),
            "status": status, "stage_reached": "", "cheats": [], "max_abs_err": None, "max_rel_err": None,
            "own_kernel_share": None, "fallback_ops": [], "foreign_kernels": [], "pass_strict": None,
            "pass_partial": None, "speedup_eager": None, "runtime_us": None, "eager_us": None,
            "feedback": why, "key_line": why, "findings": [], "stage_seconds_total": 0.0, "legality": legality, "device": ""}


# ----------------------------------------------------------------------------- report

def merge_rows(files: list[Path]) -> list[dict]:
    """Rows of several JSONL files by id: a verdict beats ``not reached``; otherwise the later file wins."""
    by_id: dict[str, dict] = {}
    for f in files:
        for line in Path(f).read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            old = by_id.get(row["id"])
            if old is None or row["status"] != NOT_REACHED or old["status"] == NOT_REACHED:
                by_id[row["id"]] = row
    return sorted(by_id.values(), key=lambda r: (r["source"], r["level"], r["problem_id"], r["id"]))


def load_classes(path: Path | None) -> dict[str, dict]:
    """id -> {"class", "note"} from JSON / YAML ({id: class} or {id: {class, note}}) or CSV (id,class,note).
    A class outside CLASSES stops with an error naming the id."""
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
            raise SystemExit(f"--classify {path}: {k}: class {entry['class']!r} is not one of {', '.join(CLASSES)}")
        out[str(k)] = entry
    return out


# static_ok / static_ok_torch: --static-only rows that went through both stages (the second with PyTorch compute
# found, which the strict policy rejects at the end of the run and the partial one may pass)
AGREES_WITH_CORRECT = ("pass", "static_ok", "static_ok_torch")


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


def render(rows: list[dict], classes: dict[str, dict], title: str, header_lines: list[str]) -> str:
    statuses = sorted({r["status"] for r in rows}, key=lambda s: (s != "pass", s == NOT_REACHED, s))
    groups = sorted({(r["source"], r["level"]) for r in rows})
    out = [f"# {title}", ""] + header_lines + [""]
    # verdicts by status
    out += ["## Verdicts by status", "", "| source | level | n | " + " | ".join(statuses) + " |",
            "| --- | --- | --- | " + " | ".join("---" for _ in statuses) + " |"]
    for g in groups + [("all", "")]:
        rs = rows if g[0] == "all" else [r for r in rows if (r["source"], r["level"]) == g]
        c = collections.Counter(r["status"] for r in rs)
        out.append(f"| {g[0]} | {g[1]} | {len(rs)} | " + " | ".join(str(c.get(s, 0)) for s in statuses) + " |")
    # cheat codes
    codes = sorted({c for r in rows for c in r["cheats"]})
    out += ["", "## Verdicts by cheat code", ""]
    if codes:
        out += ["| source | level | " + " | ".join(codes) + " |", "| --- | --- | " + " | ".join("---" for _ in codes) + " |"]
        for g in groups + [("all", "")]:
            rs = rows if g[0] == "all" else [r for r in rows if (r["source"], r["level"]) == g]
            c = collections.Counter(x for r in rs for x in r["cheats"])
            out.append(f"| {g[0]} | {g[1]} | " + " | ".join(str(c.get(x, 0)) for x in codes) + " |")
    else:
        out.append("no cheat codes")
    # agreement
    judged = [r for r in rows if r["status"] != NOT_REACHED]
    out += ["", "## Agreement with each source's own judgement", "",
            "Rows: the source's judgement; columns: the verifier's status (pass agrees with correct, any other "
            "status with incorrect). strict / partial: how many verdicts each legality policy passes, where "
            "the verifier reports it (`pass_strict` / `pass_partial`).", "",
            "| source | judgement | n | " + " | ".join(s for s in statuses if s != NOT_REACHED) +
            " | agree | strict pass | partial pass |",
            "| --- | --- | --- | " + " | ".join("---" for s in statuses if s != NOT_REACHED) + " | --- | --- | --- |"]
    for src in sorted({r["source"] for r in judged}) + ["all"]:
        for j in ("correct", "incorrect"):
            rs = [r for r in judged if (src == "all" or r["source"] == src) and r["source_judgement"] == j]
            if not rs:
                continue
            c = collections.Counter(r["status"] for r in rs)
            agree = sum(not is_disagreement(r) for r in rs)
            ps = sum(r.get("pass_strict") is True for r in rs)
            pp = sum(r.get("pass_partial") is True for r in rs)
            out.append(f"| {src} | {j} | {len(rs)} | " + " | ".join(str(c.get(s, 0)) for s in statuses if s != NOT_REACHED)
                       + f" | {agree} ({100 * agree / len(rs):.0f}%) | {ps} | {pp} |")
    # disagreements
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


def out_dir(arg: str) -> Path:
    return Path(arg or os.environ.get("OUT") or ROOT / "bench" / "results")


# ----------------------------------------------------------------------------- runs

def verifier_commit() -> str:
    """The commit the verifier ran at: KM_VERIFIER_COMMIT where a run uses an exported copy of a commit (the
    GPU box gets `git archive` of it, whose parent directories may hold another checkout), else git here."""
    if os.environ.get("KM_VERIFIER_COMMIT"):
        return os.environ["KM_VERIFIER_COMMIT"] + " (exported tree)"
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "verifier", "kernelmill"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (head or "unknown") + (" + uncommitted verifier/kernelmill changes" if dirty else "")
    except Exception:  # noqa: BLE001 - a copy of the tree without .git
        return "unknown (no git)"


def make_config(sets: list[str], legality: str, exec_workers: int = 4):
    from verifier.api import VerifyConfig

    d = dict(BENCH_DEFAULTS, exec_workers=exec_workers)
    for s in sets:
        k, _, v = s.partition("=")
        d[k.strip().removeprefix("verify.")] = v.strip()
    names = {f.name for f in dataclasses.fields(VerifyConfig)}
    if legality:
        if "legality" in names:
            d["legality"] = legality
        else:
            print(f"note: this verifier has no VerifyConfig.legality; --legality {legality} ignored", flush=True)
    d = {k: v for k, v in d.items() if k in names or k not in BENCH_DEFAULTS or k == "exec_workers"}
    from kernelmill.config import parse_value
    from kernelmill.settings import parse_section

    cfg = parse_section("verify", {k: parse_value(v) if isinstance(v, str) else v for k, v in d.items()}, "--set")
    return cfg, getattr(cfg, "legality", "strict (no legality setting)")


def items_for(rows: list[dict], backend: str):
    from kernelmill.schema import Candidate, Origin, Task

    items = []
    for r in rows:
        task = Task.from_code(read_text(r, "problem_file"), name=f"L{r['level']}/{r['problem_name']}",
                              source="kernelbench", level=int(r["level"]),
                              origin=Origin(repo=r["repo"], path=r.get("problem_path") or r["path"], commit=r["commit"]))
        items.append((task, Candidate(candidate_id=r["id"], task_id=task.task_id, backend=backend,
                                      generator=r.get("model") or r["source"], code=read_text(r, "solution_file"))))
    return items


def run_static(rows: list[dict], legality: str) -> list[dict]:
    """Extraction and static stages only (the verifier's own front, as verify_batch runs it), cuda rules."""
    from verifier.api import _front

    out = []
    for r, (task, cand) in zip(rows, items_for(rows, "cuda")):
        w = _front(task.reference_code, cand.code, "cuda", task.task_id, cand.candidate_id)
        v = w.verdict
        torch_found = [f"Static check, {f}." for f in getattr(w, "torch_findings", None) or []]
        row = verdict_row(r, v, legality)
        if not v.status:  # went on to compile; PyTorch compute found statically is judged at the end (strict)
            row["status"] = "static_ok_torch" if torch_found else "static_ok"
            row["findings"] = torch_found[:12]
            row["key_line"] = torch_found[0][:240] if torch_found else ""
        out.append(row)
    return out


class Writer:
    """Appends rows to the JSONL as they come (one lock), and writes the markdown on demand."""

    def __init__(self, jsonl: Path):
        self.jsonl, self.lock, self.rows = jsonl, threading.Lock(), []
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        jsonl.write_text("")

    def add(self, row: dict) -> None:
        with self.lock:
            self.rows.append(row)
            with open(self.jsonl, "a") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", default=str(ROOT / "ext" / "testbed" / "manifest.jsonl"))
    ap.add_argument("--report", nargs="+", metavar="FILE.jsonl", help="only rebuild the markdown from these JSONL files")
    ap.add_argument("--classify", help="JSON / YAML / CSV: id -> class (and note) for the disagreements")
    ap.add_argument("--static-only", action="store_true", help="extraction + static stages only (no compiler, no GPU)")
    ap.add_argument("--budget-s", type=float, default=560)
    ap.add_argument("--shard", default="0/1", help="i/n: every n-th solution starting at i")
    ap.add_argument("--levels", default="")
    ap.add_argument("--sources", default="")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--per-problem", type=int, default=0, help="at most this many solutions per problem (0: all)")
    ap.add_argument("--skip-done", nargs="*", default=[], metavar="FILE.jsonl",
                    help="skip ids that already have a verdict in these files (a second call over the rest)")
    ap.add_argument("--legality", default="", choices=["", "strict", "partial"])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a VerifyConfig field")
    ap.add_argument("--chunk", type=int, default=48, help="solutions per verify_batch call")
    ap.add_argument("--exec-workers", type=int, default=4)
    ap.add_argument("--compile-workers", type=int, default=0, help="0: the cores")
    ap.add_argument("--name", default="", help="testbed_<name>.{jsonl,md}; default from the device and shard")
    ap.add_argument("--out", default="", help="default $OUT, else bench/results")
    a = ap.parse_args(argv)
    od = out_dir(a.out)
    classes = load_classes(Path(a.classify)) if a.classify else {}

    if a.report:
        rows = merge_rows([Path(f) for f in a.report])
        name = a.name or "merged"
        devs = sorted({r.get("device") or "" for r in rows} - {""})
        legal = sorted({r.get("legality") or "" for r in rows} - {""})
        text = render(rows, classes, f"Test bed of model-written KernelBench solutions: {name}",
                      [f"From {len(a.report)} file(s): " + ", ".join(Path(f).name for f in a.report) +
                       f"; {len(rows)} solutions; device: {', '.join(devs) or 'n/a'}; legality: {', '.join(legal) or 'n/a'}."])
        od.mkdir(parents=True, exist_ok=True)
        (od / f"testbed_{name}.md").write_text(text)
        print(text)
        return 0

    t0 = time.time()
    skip = {r["id"] for f in a.skip_done for r in merge_rows([Path(f)]) if r["status"] != NOT_REACHED}
    rows = select(load_manifest(Path(a.manifest)), a.levels, a.sources, a.shard, a.limit, skip, a.per_problem)
    shard_tag = "" if a.shard == "0/1" else "_s{}of{}".format(*a.shard.split("/"))
    cfg, legality = make_config(a.set, a.legality, a.exec_workers)
    cmd = "PYTHONPATH=. python bench/bench_testbed_gpu.py " + " ".join(argv if argv is not None else sys.argv[1:])

    if a.static_only:
        name = a.name or f"static_cpu{shard_tag}"
        w = Writer(od / f"testbed_{name}.jsonl")
        for row in run_static(rows, "static stages only"):
            w.add(row)
        text = render(w.rows, classes, "Test bed: extraction and static stages only (no compile, no GPU)",
                      [f"Command: `{cmd}`", f"Verifier commit: {verifier_commit()}; {len(rows)} solutions; "
                       f"{time.time() - t0:.0f} s. `static_ok`: passed both stages (went on to compile in a real run); "
                       "`static_ok_torch`: passed, with PyTorch compute found (the strict policy rejects it at "
                       "the end of a real run, the partial one may pass it)."])
        (od / f"testbed_{name}.md").write_text(text)
        print(text)
        return 0

    import torch

    from verifier.api import verify_batch

    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    backend = "cuda" if dev != "cpu" else "cpu"
    tag = "h100" if "H100" in dev else "h200" if "H200" in dev else re.sub(r"\W+", "_", dev).strip("_").lower()
    name = a.name or f"{tag}{shard_tag}"
    w = Writer(od / f"testbed_{name}.jsonl")
    done: set[str] = set()
    header = [f"Command: `{cmd}`", f"Device: {dev}; torch {torch.__version__}; verifier commit: {verifier_commit()}; "
              f"legality: {legality}; config: " + ", ".join(f"{k}={getattr(cfg, k)}" for k in
                                                            ("trials", "timing_trials", "time_torch_compile", "other_shape"))]

    def finish(reason: str) -> None:
        with w.lock:
            left = [r for r in rows if r["id"] not in done]
        for r in left:
            w.add(not_reached_row(r, legality, reason))
        text = render(w.rows, classes, f"Test bed of model-written KernelBench solutions on {dev}",
                      header + [f"{len(rows)} solutions in this run; wall {time.time() - t0:.0f} s; "
                                f"{len(left)} not reached ({reason})." if left else
                                f"{len(rows)} solutions in this run; wall {time.time() - t0:.0f} s."])
        (od / f"testbed_{name}.md").write_text(text)
        print(text, flush=True)

    def watchdog() -> None:  # the budget is a promise to the caller: exit with what is done
        print(f"budget of {a.budget_s:.0f} s reached: writing what is done and exiting", flush=True)
        finish("budget reached while running")
        os._exit(0)

    timer = threading.Timer(max(1.0, a.budget_s - (time.time() - t0)), watchdog)
    timer.daemon = True
    timer.start()
    last_chunk = 0.0
    for start in range(0, len(rows), a.chunk):
        left_s = a.budget_s - (time.time() - t0)
        if left_s < max(45.0, 0.8 * last_chunk):
            print(f"stopping before chunk {start // a.chunk}: {left_s:.0f} s left, last chunk took {last_chunk:.0f} s",
                  flush=True)
            break
        chunk = rows[start:start + a.chunk]
        c0 = time.time()
        try:
            items = items_for(chunk, backend)
        except Exception as e:  # noqa: BLE001 - an unreadable file is a row, not the end of the run
            for r in chunk:
                w.add(not_reached_row(r, legality, f"could not read: {type(e).__name__}: {e}", status="bench_error"))
                done.add(r["id"])
            continue

        def on_verdict(i: int, v, chunk=chunk) -> None:
            r = chunk[i]
            row = verdict_row(r, v, legality)
            w.add(row)
            done.add(r["id"])
            print(f"[{len(done)}/{len(rows)} {time.time() - t0:.0f}s] {r['id']}: {v.status} {','.join(v.cheats)} "
                  f"{row['key_line'][:120]}", flush=True)

        try:
            verify_batch(items, config=cfg, compile_workers=a.compile_workers or None, on_verdict=on_verdict)
        except Exception as e:  # noqa: BLE001 - the verifier raised: record it against the chunk, go on
            for r in chunk:
                if r["id"] not in done:
                    w.add(not_reached_row(r, legality, f"verify_batch raised {type(e).__name__}: {str(e)[:200]}",
                                          status="bench_error"))
                    done.add(r["id"])
        last_chunk = time.time() - c0
    timer.cancel()
    finish("budget: not started")
    return 0


if __name__ == "__main__":
    sys.exit(main())
