"""Build the sft / rft / rl corpora of a run: filter, decontaminate, deduplicate, write, describe.

    build_corpora(run_dir, corpus_dir, cfg=...)
        read tasks / candidates / verdicts / dialogues          (kernelmill.store)
        -> decontaminate tasks against cfg["decontaminate_dir"]  (decontam.py)
        -> rejection filtering per corpus                        (filters.py)
        -> near-copy removal and per-task diversity              (dedup.py)
        -> sft/ rft/ rl/ shards, README.md card, report/         (this file, report.py)

Storage guarantees (what a trainer and a re-run rely on):
- each corpus table is a *snapshot*: the directory ``<corpus>/<name>/`` holds exactly the rows of
  the last build, in shards ``train-XXXXX-of-YYYYY-<digest>.parquet`` (zstd, row groups of about
  ``row_group_mb``, shards of at most about ``shard_max_mb`` uncompressed);
- idempotent: the digest is the content hash of the rows; when the shards on disk already carry
  it nothing is written (same bytes, same mtimes);
- atomic: a new snapshot is written into a hidden sibling directory and swapped in with two
  renames, so a reader sees the old snapshot or the new one, never a mix (during the two
  renames, microseconds, the folder may be absent);
- the run's own tables are only read, never modified, so curation cannot lose generation work.
When ``corpus_dir`` is not ``run_dir`` the intermediate tables (tasks, candidates, verdicts,
dialogues) are copied there as snapshots too, minus decontaminated tasks and their rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from curation import decontam, filters
from verifier.serve.cost import VerificationCost, cost_section, program_keys, verification_cost
from curation.dedup import MinHashDeduper, select_diverse
from curation.report import write_report
from kernelmill import store
from kernelmill.errors import InputError
from kernelmill.schema import TABLES, arrow_schema, to_table
from kernelmill.settings import CurateSettings, parse_settings

CORPORA = ("sft", "rft", "rl")
INTERMEDIATE = ("tasks", "candidates", "verdicts", "dialogues")
MB = 1 << 20



def curate_settings(cfg: CurateSettings | dict | None) -> CurateSettings:
    """The [curate] settings; a dict is checked like a config section (unknown key: InputError)."""
    if isinstance(cfg, CurateSettings):
        return cfg
    return parse_settings([("curate settings", {"curate": dict(cfg or {})})]).curate


# ---------------------------------------------------------------------------- snapshot tables


def _rows_digest(arrow_table) -> str:
    """Content hash of a table: sha256 of its Arrow IPC stream (one chunk, so layout is canonical)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, arrow_table.schema) as w:
        w.write_table(arrow_table.combine_chunks())
    return hashlib.sha256(sink.getvalue()).hexdigest()[:12]


def snapshot_files(root: Path, name: str) -> list[Path]:
    d = root / name
    return sorted(f for f in d.glob("*.parquet") if not f.name.startswith(".")) if d.is_dir() else []


def write_snapshot(root: str | os.PathLike, name: str, records: list, *, shard_max_mb: float = 256,
                   row_group_mb: float = 16) -> bool:
    """Make ``<root>/<name>/`` hold exactly ``records`` (see module docstring). True if written.

    An empty record list still writes one zero-row shard with the table's schema, so
    ``load_dataset`` and DuckDB see the table with its columns."""
    root = Path(root)
    cls = TABLES[name]
    records = sorted(records, key=lambda r: getattr(r, cls.id_field))
    table = to_table(records, cls) if records else arrow_schema(cls).empty_table()
    digest = _rows_digest(table)
    row_bytes = max(1, table.nbytes // max(1, table.num_rows))
    per_shard = max(1, int(shard_max_mb * MB // row_bytes))
    per_group = max(1, min(per_shard, int(row_group_mb * MB // row_bytes)))
    n_shards = max(1, -(-table.num_rows // per_shard))
    names = [f"train-{i:05d}-of-{n_shards:05d}-{digest}.parquet" for i in range(n_shards)]
    if [f.name for f in snapshot_files(root, name)] == names:
        return False
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.new-", dir=root))
    store.usual_dir_mode(tmp)  # it becomes the table's folder
    try:
        for i, fname in enumerate(names):
            part = table.slice(i * per_shard, per_shard)
            path = tmp / fname
            pq.write_table(part, path, compression="zstd", row_group_size=per_group)
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        target = root / name
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{name}.old-", dir=root))
            os.rename(target, old / name)
        try:
            os.rename(tmp, target)
        except BaseException:
            if old is not None:
                os.rename(old / name, target)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return True


# ---------------------------------------------------------------------------- building


def _read_run(run_dir: Path) -> dict[str, list]:
    if not run_dir.is_dir():
        raise InputError(f"run directory {run_dir}", "does not exist")
    if not store.table_dir(run_dir, "tasks").is_dir():
        raise InputError(f"run directory {run_dir}", "has no tasks/ table (is it a kernelmill run directory?)")
    return {name: store.read_records(run_dir, name) for name in INTERMEDIATE}


def build_corpora(run_dir: str | os.PathLike, corpus_dir: str | os.PathLike, *,
                  cfg: CurateSettings | dict | None = None) -> dict:
    """Build sft / rft / rl (+ card + report) from a run directory; returns stats.

    ``cfg`` is the [curate] settings (kernelmill.settings.CurateSettings, or a dict of its keys). Stats: ``rows`` per corpus, ``removed``
    per corpus by reason, ``decontamination`` (hits with reasons), ``inputs`` (rows read),
    ``written`` (which tables changed on disk). Re-running on unchanged inputs writes nothing."""
    s = curate_settings(cfg)
    run_dir, corpus_dir = Path(run_dir), Path(corpus_dir)
    data = _read_run(run_dir)
    tasks_all = {t.task_id: t for t in data["tasks"]}

    # 1. decontamination: whole tasks go, with every row derived from them
    hits: list = []
    near: list = []  # kept tasks that overlap a benchmark program (near misses, for a reviewer)
    bench_files = 0
    if s.decontaminate_dir:
        bench = decontam.load_benchmark(s.decontaminate_dir, n=s.decontam_ngram)
        bench_files = len(bench)
        rule = dict(overlap=s.decontam_overlap, contain=s.decontam_contain,
                    min_ngrams=s.decontam_min_ngrams)
        overlaps = decontam.task_overlaps(tasks_all.values(), bench, n=s.decontam_ngram, top=10 ** 9,
                                          common_share=s.decontam_common_share,
                                          min_ngrams=rule["min_ngrams"])
        hits = [h for h in (decontam.contamination(o, **rule) for o in overlaps) if h is not None]
        near = decontam.near_misses(overlaps, {h.task_id for h in hits})
    dirty = {h.task_id for h in hits}
    tasks = {tid: t for tid, t in tasks_all.items() if tid not in dirty}
    clean = lambda recs: [r for r in recs if r.task_id not in dirty]  # noqa: E731
    candidates, dialogues = clean(data["candidates"]), clean(data["dialogues"])
    verdicts = {v.candidate_id: v for v in data["verdicts"]}
    removed: dict[str, Counter] = {c: Counter() for c in CORPORA}
    for c in CORPORA:
        if dirty:
            removed[c]["contaminated_tasks"] = len(dirty)

    prompts = filters.prompt_map(candidates)
    deduper = MinHashDeduper(num_perm=s.minhash_num_perm, shingle=s.minhash_shingle,
                             threshold=s.minhash_threshold)

    # 2. sft: solved dialogues; near-copy trajectories (all assistant turns) dropped among the
    # dialogues of one task with the same number of turns (a repair trajectory is never a copy
    # of a first-turn answer: its wrong attempts and feedback are what it teaches)
    sft_rows, r = filters.filter_sft(dialogues, tasks, candidates, verdicts, min_speedup=s.sft_min_speedup)
    removed["sft"].update(r)
    sft_rows.sort(key=lambda x: (x.task_id, x.num_turns, -x.final_reward, x.id))
    sft_kept = []
    for _, group in _by_task(sft_rows, key=lambda x: (x.task_id, x.num_turns)).items():
        keep, dropped = select_diverse([(x.id, filters.assistant_text(x.messages)) for x in group],
                                       len(group), deduper)
        keep = set(keep)
        sft_kept += [x for x in group if x.id in keep]
        removed["sft"]["near_duplicate"] += len(dropped)

    # 3. rft: correct candidates, up to k distinct per task, best first
    k = s.rft_max_per_task
    pairs, r = filters.filter_rft(candidates, verdicts, tasks, prompts)
    removed["rft"].update(r)
    rft_kept = []
    for _, group in _by_task(pairs, key=lambda rc: rc[0].task_id).items():
        keep, dropped = select_diverse([(row.id, code) for row, code in group], k, deduper)
        keep = set(keep)
        rft_kept += [row for row, _ in group if row.id in keep]
        removed["rft"]["near_duplicate"] += len(dropped)
        removed["rft"]["over_k"] += len(group) - len(keep) - len(dropped)

    # 4. rl: tasks with measured, non-trivial pass rate
    rl_rows, r = filters.filter_rl(tasks, candidates, verdicts, prompts, keep_trivial=s.rl_keep_trivial)
    removed["rl"].update(r)

    # 5. write
    written = {}
    shard = dict(shard_max_mb=s.shard_max_mb, row_group_mb=s.row_group_mb)
    for name, rows in (("sft", sft_kept), ("rft", rft_kept), ("rl", rl_rows)):
        written[name] = write_snapshot(corpus_dir, name, rows, **shard)
    if corpus_dir.resolve() != run_dir.resolve():
        cand_ids = {c.candidate_id for c in candidates}
        # a verdict goes with its candidate; one that names a clean task is kept even without it
        kept_verdicts = [v for v in data["verdicts"] if v.candidate_id in cand_ids or (v.task_id and v.task_id not in dirty)]
        copies = {"tasks": list(tasks.values()), "candidates": candidates, "dialogues": dialogues,
                  "verdicts": kept_verdicts}
        for name in INTERMEDIATE:
            written[name] = write_snapshot(corpus_dir, name, copies[name], **shard)

    stats = {
        "run_dir": str(run_dir.resolve()),
        "inputs": {name: len(recs) for name, recs in data.items()},
        "rows": {"sft": len(sft_kept), "rft": len(rft_kept), "rl": len(rl_rows)},
        "removed": {c: dict(sorted((k_, v) for k_, v in removed[c].items() if v)) for c in CORPORA},
        "decontamination": {"benchmark_dir": s.decontaminate_dir or "", "benchmark_files": bench_files,
                            "ngram": s.decontam_ngram, "overlap": s.decontam_overlap,
                            "contain": s.decontam_contain, "min_ngrams": s.decontam_min_ngrams,
                            "removed_tasks": [h.as_dict() for h in hits], "kept_overlaps": near},
        "settings": {k_: v for k_, v in dataclasses.asdict(s).items() if k_ != "out"},  # out: where, not what
        # what verifying the run cost (verifier/serve/cost.py): every verdict of the run, one execution slot per GPU
        "verification_cost": verification_cost(data["verdicts"], programs=program_keys(data["candidates"])).as_dict(),
    }
    stats_changed = store.write_text_if_changed(corpus_dir / "report" / "stats.json",
                                           json.dumps(stats, indent=1, sort_keys=True, default=str) + "\n")
    write_report(corpus_dir, stats)
    write_card(corpus_dir, stats)
    stats["written"] = {**written, "stats": stats_changed}
    return stats


def _by_task(items: list, key=lambda x: x.task_id) -> dict:
    out: dict = defaultdict(list)
    for it in items:
        out[key(it)].append(it)
    return dict(out)


def load_stats(corpus_dir: str | os.PathLike) -> dict | None:
    p = Path(corpus_dir) / "report" / "stats.json"
    return json.loads(p.read_text()) if p.is_file() else None


# ---------------------------------------------------------------------------- dataset card

_CARD_INTRO = """\
# kernelmill GPU-kernel corpora

Training data for models that write native GPU kernels, produced by kernelmill (a pipeline after
the data pipeline of the MusaCoder paper, arXiv 2606.04847) from PyTorch programs: every completion was compiled and run by
kernelmill's execution verifier (correctness over several trials with fresh inputs, anti-cheat
checks, timing against eager PyTorch and `torch.compile`).

```python
from datasets import load_dataset
CORPUS = "path/to/this/directory"  # or its Hub repo id
sft = load_dataset(CORPUS, "sft")["train"]   # multi-turn repair dialogues ending in a correct kernel
rft = load_dataset(CORPUS, "rft")["train"]   # prompt / verified completion pairs, up to k distinct per task
rl  = load_dataset(CORPUS, "rl")["train"]    # tasks with test spec and measured pass rate
```

SQL over the same files: `kernelmill query --corpus path/to/this/directory "SELECT level, count(*) FROM sft GROUP BY level"`
(views: tasks, candidates, verdicts, dialogues, sft, rft, rl; examples in docs/QUERIES.md).

## Configs

- **sft**: one row per solved repair dialogue whose final answer the verifier found correct;
  `messages` is the whole dialogue (prompt, every attempt, every verifier-feedback turn) up to and
  including the final correct answer. Near-copy trajectories of one task are dropped.
- **rft**: correct verified candidates, best reward first, at most k per task, no two near-copies
  (MinHash LSH over tree-sitter tokens; identifiers and literals normalised, comments dropped).
- **rl**: one row per (task, backend): prompt, reference program, `test_spec` (JSON: input/output
  specs, tolerances), `pass_rate` of the generator's first-turn samples, `difficulty = 1 - pass_rate`;
  tasks solved by all or none of the samples are left out unless configured otherwise.
- **tasks / candidates / verdicts / dialogues**: the intermediate tables the corpora were built
  from (present when they are stored in this directory), for analysis and provenance.

Decontamination: when a benchmark directory was given, tasks whose reference program matches a
benchmark program (normalised exact match, the same tokens up to names and sizes, token n-gram
overlap) or contains one (a share of its n-grams) are removed with everything derived from them;
`report/stats.json` and `report/report.md` list each removal, its reason and the other programs the
task overlaps, and the kept tasks that come close.
"""

_LICENSE_NOTE = """\
## License

Rows derive from PyTorch reference programs of several origins (`tasks.source`, `tasks.origin`):
seed programs shipped with kernelmill and NNSmith-generated graphs (Apache-2.0, like kernelmill),
and code mined from public repositories, kept only under permissive licenses; each mined task
records its repository, commit and license in `tasks.origin`. Generated completions carry the terms
of the model that wrote them. Check both before redistributing; the card says `license: other`.
"""


def _yaml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid YAML scalar


def _type_str(t) -> str:
    return str(t).replace("\n", " ")


def _portable(value):
    """A setting as the card shows it: an absolute local path by its last part only."""
    return Path(value).name if isinstance(value, str) and os.path.isabs(value) else value


def _run_dir_named(run_dir: str, corpus_dir: Path) -> str:
    """How the card names the run it was built from: never a local absolute path (the card travels)."""
    if not run_dir:
        return "a kernelmill run directory"
    if Path(run_dir) == corpus_dir.resolve():
        return "the run directory's tables, stored beside this card"
    return f"a kernelmill run directory (`{Path(run_dir).name}`)"


def write_card(corpus_dir: str | os.PathLike, stats: dict | None = None) -> Path:
    """Write ``<corpus>/README.md``: YAML configs (sft default, rft, rl, and the stored
    intermediate tables), schema, provenance, license note, stats. Returns its path.

    Only tables with Parquet files get a config (``load_dataset`` fails on an empty glob).
    The text depends only on the directory's contents and ``stats`` (no timestamps), so writing
    it twice changes nothing. ``stats`` defaults to ``report/stats.json`` when present."""
    root = Path(corpus_dir)
    if stats is None:
        stats = load_stats(root) or {}
    present = [n for n in (*CORPORA, *INTERMEDIATE) if snapshot_files(root, n)]
    lines = ["---", "license: other", "pretty_name: kernelmill GPU-kernel corpora",
             "tags:", "- code", "- cuda", "- gpu-kernels", "- kernelbench", "configs:"]
    for n in present:
        lines += [f"- config_name: {n}", "  data_files:", "  - split: train", f"    path: {_yaml_str(n + '/*.parquet')}"]
        if n == "sft":
            lines.append("  default: true")
    lines += ["---", ""]
    body = [_CARD_INTRO, "## Schema", ""]
    for n in present:
        cls = TABLES[n]
        body += [f"### {n} (`{cls.__name__}`, key `{cls.id_field}`)", "", "| column | type |", "| --- | --- |"]
        body += [f"| {f.name} | `{_type_str(f.type)}` |" for f in arrow_schema(cls)]
        body.append("")
    body += ["## Provenance", ""]
    if stats:
        body.append(f"Built by `kernelmill curate` from {_run_dir_named(stats.get('run_dir', ''), root)}.")
        settings = stats.get("settings", {})
        if settings:
            body += ["", "Settings: " + ", ".join(f"`{k}={_portable(v)}`" for k, v in sorted(settings.items())) + "."]
        body += ["", "## Stats", "", "| corpus | rows | removed (reason: count) |", "| --- | --- | --- |"]
        for c in CORPORA:
            rem = stats.get("removed", {}).get(c, {})
            body.append(f"| {c} | {stats.get('rows', {}).get(c, 0)} | "
                        + (", ".join(f"{k}: {v}" for k, v in sorted(rem.items())) or "none") + " |")
        dec = stats.get("decontamination", {})
        if dec.get("benchmark_dir"):
            body += ["", f"Decontaminated against `{_portable(dec['benchmark_dir'])}` ({dec.get('benchmark_files', 0)} programs; "
                     f"{dec.get('ngram')}-gram Jaccard >= {dec.get('overlap')}, >= {dec.get('contain')} of a program "
                     f"contained, or an exact / token-for-token match): "
                     f"{len(dec.get('removed_tasks', []))} tasks removed."]
        if stats.get("verification_cost"):
            body += ["", *cost_section(VerificationCost.from_dict(stats["verification_cost"]), "## Verification cost")]
        body += ["", "Plots and details: `report/report.md`."]
    else:
        body.append("Built by kernelmill; no build stats recorded in this directory.")
    body += ["", _LICENSE_NOTE]
    path = root / "README.md"
    store.write_text_if_changed(path, "\n".join(lines) + "\n".join(body))
    return path
