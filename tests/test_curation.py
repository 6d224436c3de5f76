"""Curation over real files: Parquet written through kernelmill.store, corpora built by
build_corpora, read back with datasets.load_dataset and DuckDB, tree-sitter tokens, MinHash dedup."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from curation_fixtures import (RELU, RENAMES, SIGMOID, TANH_SCALE, elementwise_candidate, grid_stride_candidate,
                               make_task, reference, softmax_candidate, standard_run)
from kernelmill import store
from flows.cli import main as cli_main


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One run, curated once into a separate corpus directory (shared: building costs seconds)."""
    from curation.corpus import build_corpora

    root = tmp_path_factory.mktemp("curate")
    info = standard_run(root / "run")
    stats = build_corpora(root / "run", root / "corpus", cfg={"rft_max_per_task": 4})
    return {"root": root, "run": root / "run", "corpus": root / "corpus", "info": info, "stats": stats}


# ---------------------------------------------------------------------------- dedup


def test_tokens_ignore_comments_layout_and_renames_but_keep_kernel_api():
    from curation.dedup import code_tokens

    base = code_tokens(elementwise_candidate(RELU))
    assert code_tokens(elementwise_candidate(RELU, names=RENAMES)) == base
    assert code_tokens(elementwise_candidate(RELU, comment="// different comment\n/* block */")) == base
    # the CUDA grammar saw the kernel inside the Python string: built-ins survive, names do not
    assert "<native>" in base and "threadIdx" in base and "fmaxf" in base and "__global__" in base
    assert "act_kernel" not in base and "cuda_source" not in base
    assert not any("comment" in t for t in code_tokens(elementwise_candidate(RELU, comment="// comment here")))
    # a different math function is a different token
    assert code_tokens(elementwise_candidate(SIGMOID)) != base


def test_dedup_catches_renamed_and_reformatted_copies_and_keeps_distinct_kernels():
    from curation.dedup import MinHashDeduper

    d = MinHashDeduper(num_perm=128, shingle=5, threshold=0.8)
    items = [
        ("relu", elementwise_candidate(RELU)),
        ("relu_renamed", elementwise_candidate(RELU, names=RENAMES)),
        ("relu_reformatted", elementwise_candidate(RELU, compact=True, comment="// reformatted copy")),
        ("relu_grid_stride", grid_stride_candidate(RELU)),
        ("relu_grid_stride_renamed", grid_stride_candidate(RELU).replace("act_vec4", "vec_relu").replace("result", "y")),
        ("softmax", softmax_candidate()),
    ]
    res = d.dedup(items)
    assert res.dropped == {"relu_renamed": "relu", "relu_reformatted": "relu",
                           "relu_grid_stride_renamed": "relu_grid_stride"}
    assert res.kept == ["relu", "relu_grid_stride", "softmax"]
    assert d.similarity(items[0][1], items[3][1]) < 0.8


def test_dedup_settings_are_validated_and_matter():
    from curation.dedup import MinHashDeduper

    with pytest.raises(ValueError, match="threshold"):
        MinHashDeduper(threshold=1.5)
    a, b = elementwise_candidate(RELU), elementwise_candidate(SIGMOID)
    sim = MinHashDeduper(num_perm=256, shingle=5).similarity(a, b)
    assert 0.7 < sim < 0.93
    # a strict threshold keeps both, a loose one drops the second
    assert MinHashDeduper(num_perm=256, threshold=0.95).dedup([("a", a), ("b", b)]).dropped == {}
    assert MinHashDeduper(num_perm=256, threshold=0.6).dedup([("a", a), ("b", b)]).dropped == {"b": "a"}
    # longer shingles make small edits cost more similarity
    assert MinHashDeduper(num_perm=256, shingle=9).similarity(a, b) < MinHashDeduper(num_perm=256, shingle=2).similarity(a, b)


def test_dedup_parallel_signatures_equal_serial():
    from curation.dedup import MinHashDeduper

    codes = [elementwise_candidate(RELU, names={"kern": f"k{i}"}) for i in range(150)] + \
            [grid_stride_candidate(TANH_SCALE)] * 150
    serial = MinHashDeduper(workers=1).signature_values(codes)
    parallel = MinHashDeduper(workers=2).signature_values(codes)
    assert (serial == parallel).all()


def _variants(n: int) -> list[tuple[str, str]]:
    """n distinct kernels (a random chain of 8 math calls each, in one of two layouts) and a
    renamed, reformatted copy of each."""
    import random

    rng = random.Random(0)
    ops = ["expf", "tanhf", "sinf", "cosf", "sqrtf", "fabsf", "logf", "erff", "rsqrtf", "floorf", "ceilf", "log1pf"]
    items = []
    for i in range(n):
        body = "v"
        for _ in range(8):
            body = f"{rng.choice(ops)}({body} {rng.choice('+-*')} {rng.choice(['v', '1.5f', '0.5f'])})"
        make = elementwise_candidate if i % 2 else (lambda b, **kw: grid_stride_candidate(b))
        items.append((f"k{i}", make(body)))
        items.append((f"k{i}_copy", elementwise_candidate(body, names={"kern": f"renamed_{i}", "v": "val"},
                                                          compact=True, comment="// copied") if i % 2 else
                      grid_stride_candidate(body).replace("act_vec4", f"renamed_{i}")))
    return items


def test_dedup_drops_only_exact_near_copies_and_the_workers_do_not_change_the_result():
    from curation.dedup import MinHashDeduper

    items = _variants(40)
    serial = MinHashDeduper(workers=1).dedup(items)
    # after the parent has used rensa (its thread pool), forked workers still work: they never call it
    parallel = MinHashDeduper(workers=2).dedup(items, chunk=16)
    assert parallel.kept == serial.kept and parallel.dropped == serial.dropped
    d = MinHashDeduper()
    codes = dict(items)
    for copy, orig in serial.dropped.items():
        assert d.exact_similarity(codes[copy], codes[orig]) >= 0.8  # every drop is checked exactly
    assert {f"k{i}_copy" for i in range(40)} <= set(serial.dropped)
    for a in serial.kept:
        for b in serial.kept:
            if a < b:
                assert d.exact_similarity(codes[a], codes[b]) < 0.8


def test_dedup_decides_on_exact_jaccard_not_the_estimate():
    from curation.dedup import MinHashDeduper

    a, b = elementwise_candidate(RELU), elementwise_candidate(SIGMOID)
    d = MinHashDeduper(num_perm=256)
    exact, est = d.exact_similarity(a, b), d.similarity(a, b)
    assert abs(exact - est) < 0.15
    # a threshold between the estimate and the exact value: the exact value decides
    lo, hi = sorted([exact, est])
    if hi - lo > 0.01:
        t = (lo + hi) / 2
        assert bool(MinHashDeduper(threshold=t).dedup([("a", a), ("b", b)]).dropped) == (exact >= t)
    assert MinHashDeduper(threshold=max(0.01, exact - 0.01)).dedup([("a", a), ("b", b)]).dropped == {"b": "a"}
    assert MinHashDeduper(threshold=min(1.0, exact + 0.01)).dedup([("a", a), ("b", b)]).dropped == {}


def test_dedup_chain_drops_a_copy_of_a_dropped_copy():
    """a ~ b and b ~ c but not a ~ c: greedy keeps a and c; chain keeps a only."""
    from curation.dedup import MinHashDeduper

    steps = ["expf(v)", "tanhf(v)", "sinf(v)", "cosf(v)", "sqrtf(v)", "fabsf(v)", "logf(v)", "erff(v)"]
    a = elementwise_candidate(" + ".join(steps))
    b = elementwise_candidate(" + ".join(steps[:6] + ["floorf(v)", "ceilf(v)"]))
    c = elementwise_candidate(" + ".join(steps[:4] + ["rsqrtf(v)", "log1pf(v)", "floorf(v)", "ceilf(v)"]))
    d = MinHashDeduper(shingle=3)
    t = (d.exact_similarity(a, c) + min(d.exact_similarity(a, b), d.exact_similarity(b, c))) / 2
    assert d.exact_similarity(a, c) < t <= min(d.exact_similarity(a, b), d.exact_similarity(b, c))
    greedy = MinHashDeduper(shingle=3, threshold=t).dedup([("a", a), ("b", b), ("c", c)])
    assert greedy.kept == ["a", "c"] and greedy.dropped == {"b": "a"}
    chained = MinHashDeduper(shingle=3, threshold=t, chain=True).dedup([("a", a), ("b", b), ("c", c)])
    assert chained.kept == ["a"] and chained.dropped == {"b": "a", "c": "b"}


def test_dedup_boilerplate_buckets_stop_proposing():
    """A band value shared by max_bucket documents proposes nothing more; exact copies of a kernel
    still collide in the bands their own code fills."""
    from curation.dedup import MinHashDeduper

    items = _variants(60)
    full = MinHashDeduper(max_bucket=0).dedup(items)
    capped_d = MinHashDeduper(max_bucket=2)
    capped = capped_d.dedup(items)
    assert any(v == () for t in capped_d._tables for v in t.values())
    assert set(capped.dropped) <= set(full.dropped)
    assert len(capped.dropped) >= 0.9 * len(full.dropped)


# ---------------------------------------------------------------------------- corpora


def test_corpora_rows_follow_the_rejection_rules(built):
    from curation.corpus import build_corpora  # noqa: F401  (built by the fixture)

    st, info = built["stats"], built["info"]
    relu = info["relu"]
    sft = store.read_records(built["corpus"], "sft")
    rft = store.read_records(built["corpus"], "rft")
    rl = store.read_records(built["corpus"], "rl")
    # sft: relu orig + grid + repair (renamed copy of orig dropped), sigmoid ok; tanh ok; unsolved ones out
    # and tanh's second kernel: a correct first turn with no dialogue record (generate + verify, no repair) is a
    # one-turn row under its candidate id (relu's reformatted copy, also without a record, is a near-copy)
    from_dialogues = {info["dialogues"][k].dialogue_id for k in ("relu_orig", "relu_grid", "relu_repair", "sig_ok", "tanh")}
    (extra,) = [r for r in sft if r.dialogue_id not in from_dialogues]
    assert {r.dialogue_id for r in sft} >= from_dialogues and extra.task_id == info["tasks"]["tanh"].task_id
    assert extra.num_turns == 1 and [m.role for m in extra.messages] == ["system", "user", "assistant"]
    assert extra.messages[1].content == "Write a CUDA kernel for ScaledTanh."  # the prompt stored with the candidate
    assert st["removed"]["sft"] == {"near_duplicate": 2, "unsolved": 2}
    repair = next(r for r in sft if r.dialogue_id == info["dialogues"]["relu_repair"].dialogue_id)
    assert [m.role for m in repair.messages] == ["user", "assistant", "user", "assistant"]  # ends on the fix
    assert "mismatch" in repair.messages[2].content and repair.num_turns == 2
    # rft: per task, distinct correct kernels only; relu keeps grid (best reward) + orig
    by_task = {}
    for r in rft:
        by_task.setdefault(r.task_id, []).append(r.candidate_id)
    assert sorted(by_task[info["tasks"]["relu"].task_id]) == sorted([relu["grid"].candidate_id, relu["orig"].candidate_id])
    assert st["removed"]["rft"] == {"incorrect": 5, "near_duplicate": 3}
    assert all(r.correct and "ModelNew" in r.completion for r in rft)
    from curation.filters import render_prompt
    from synth.generate.prompts import first_turn_messages

    # the prompt stored with the candidates (what the generator was sent), never a rebuilt one
    relu_task = info["tasks"]["relu"]
    expected_prompt = render_prompt(first_turn_messages("Write a CUDA kernel for ReLU."))
    assert {r.prompt for r in rft if r.task_id == relu_task.task_id} == {expected_prompt}
    # rl: relu 4/5, sigmoid 1/2; tanh (all pass) and erf (none pass) left out
    rates = {r.task_id: (r.pass_rate, r.n_samples, r.difficulty) for r in rl}
    assert rates == {info["tasks"]["relu"].task_id: (0.8, 5, 0.2), info["tasks"]["sigmoid"].task_id: (0.5, 2, 0.5)}
    assert st["removed"]["rl"] == {"all_pass": 1, "none_pass": 1}
    spec = next(r.test_spec for r in rl)
    assert spec["input_specs"][0]["shape"] == [256, 4096] and spec["tolerances"]["float32"]["atol"] == 1e-4


def test_load_dataset_works_for_every_config(built):
    import datasets

    corpus, cache = built["corpus"], built["root"] / "hf_cache"
    expect = {"sft": 6, "rft": 5, "rl": 2, "tasks": 4, "candidates": 13, "verdicts": 13, "dialogues": 8}
    for name, n in expect.items():
        ds = datasets.load_dataset(str(corpus), name, cache_dir=str(cache))["train"]
        assert ds.num_rows == n, name
    sft = datasets.load_dataset(str(corpus), "sft", cache_dir=str(cache))["train"]
    assert set(sft[0]["messages"][0]) == {"role", "content"}
    card = (corpus / "README.md").read_text()
    assert card.startswith("---\n") and "config_name: rl" in card and "## Schema" in card and "License" in card
    assert "| sft | 6 |" in card


def test_rebuild_is_idempotent_and_options_change_the_snapshot(built, tmp_path):
    import shutil

    from curation.corpus import build_corpora

    corpus = tmp_path / "corpus"
    shutil.copytree(built["corpus"], corpus)
    before = {p: p.stat().st_mtime_ns for p in corpus.rglob("*.parquet")}
    again = build_corpora(built["run"], corpus, cfg={"rft_max_per_task": 4})
    assert not any(again["written"].values())
    assert {p: p.stat().st_mtime_ns for p in corpus.rglob("*.parquet")} == before
    assert again["rows"] == built["stats"]["rows"]
    # k = 1 and a speedup floor shrink the snapshots (rows are replaced, not appended)
    st = build_corpora(built["run"], corpus, cfg={"rft_max_per_task": 1, "sft_min_speedup": 1.5, "rl_keep_trivial": True})
    assert st["rows"] == {"sft": 3, "rft": 3, "rl": 4}
    assert st["removed"]["rft"] == {"incorrect": 5, "over_k": 5} and st["removed"]["sft"]["below_min_speedup"] == 3
    assert len(store.read_records(corpus, "rft")) == 3 and len(list((corpus / "rft").glob("*.parquet"))) == 1
    assert not [p for p in corpus.rglob(".*") if p.name != ".gitattributes"]  # no temp leftovers


def test_snapshot_shards_and_row_groups(tmp_path):
    import pyarrow.parquet as pq

    from curation.corpus import write_snapshot
    from kernelmill.schema import Message, SFTRow

    rows = [SFTRow(id=f"s{i:04d}", task_id="t", messages=[Message("user", "x" * 2000), Message("assistant", "y" * 2000)],
                   source="seed", generator="teacher", backend="cpu", level=1, num_turns=1, final_reward=2.0)
            for i in range(300)]
    assert write_snapshot(tmp_path, "sft", rows, shard_max_mb=0.25, row_group_mb=0.05)
    files = sorted((tmp_path / "sft").glob("*.parquet"))
    assert len(files) > 1 and all(f"-of-{len(files):05d}-" in f.name for f in files)
    meta = pq.ParquetFile(files[0]).metadata
    assert meta.num_row_groups > 1 and meta.row_group(0).column(0).compression == "ZSTD"
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == 300
    assert not write_snapshot(tmp_path, "sft", list(reversed(rows)), shard_max_mb=0.25, row_group_mb=0.05)
    # empty table: one zero-row shard with the schema
    assert write_snapshot(tmp_path, "rl", [])
    assert pq.read_table(next((tmp_path / "rl").glob("*.parquet"))).num_rows == 0


# ---------------------------------------------------------------------------- DuckDB


def test_views_and_example_queries(built):
    from curation.query import connect, run_query

    con = connect(built["corpus"])
    names = {r[0] for r in con.sql("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"tasks", "candidates", "verdicts", "dialogues", "sft", "rft", "rl"} <= names
    cols, rows = run_query("""
        SELECT t.level, round(avg(CASE WHEN v.correct THEN 1 ELSE 0 END), 3) AS pass_rate
        FROM verdicts v JOIN tasks t USING (task_id) GROUP BY t.level ORDER BY t.level""", built["corpus"])
    assert cols == ["level", "pass_rate"] and rows == [(1, 0.667), (2, 0.5)]
    _, unsolved = run_query("""SELECT t.name FROM tasks t WHERE NOT EXISTS
        (SELECT 1 FROM verdicts v WHERE v.task_id = t.task_id AND v.correct)""", built["corpus"])
    assert unsolved == [("Erf",)]
    _, msgs = run_query("SELECT count(*) FROM sft, unnest(messages) AS m(msg) WHERE msg.role = 'assistant'", built["corpus"])
    assert msgs == [(7,)]


def test_empty_views_exist_with_columns_on_a_fresh_run(tmp_path):
    from curation.query import run_query

    store.write_records(tmp_path, "tasks", [make_task("ReLU", "torch.relu(x)")])
    cols, rows = run_query("SELECT task_id, prompt, pass_rate FROM rl", tmp_path)
    assert cols == ["task_id", "prompt", "pass_rate"] and rows == []
    _, rows = run_query("SELECT count(*) FROM sft JOIN tasks USING (task_id)", tmp_path)
    assert rows == [(0,)]


def test_query_cli_formats_default_corpus_and_errors(built, tmp_path, capsys, monkeypatch):
    from kernelmill.config import record_latest_run

    monkeypatch.setenv("KERNELMILL_HOME", str(tmp_path / "home"))
    assert cli_main(["query", "SELECT 1"]) == 2  # no run recorded yet
    assert "no run was started from this directory" in capsys.readouterr().err
    record_latest_run(built["corpus"])  # for the working directory
    assert cli_main(["query", "--format", "json", "SELECT level, count(*) AS n FROM rl GROUP BY level"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"level": 1, "n": 2}]
    assert cli_main(["query", "--corpus", str(built["corpus"]), "--format", "csv", "SELECT name FROM tasks ORDER BY name"]) == 0
    assert capsys.readouterr().out.split() == ["name", "Erf", "ReLU", "ScaledTanh", "Sigmoid"]
    assert cli_main(["query", "--corpus", str(built["corpus"]), "SELECT count(*) AS n FROM sft"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].strip() == "n" and "(1 row)" in out
    assert cli_main(["query", "--corpus", str(built["corpus"]), "SELECT nope FROM sft"]) == 2
    assert "SQL query" in capsys.readouterr().err


# ---------------------------------------------------------------------------- decontamination


def test_decontamination_removes_benchmark_tasks_and_reports_why(built, tmp_path, capsys):
    info = built["info"]
    bench = tmp_path / "KernelBench" / "level1"
    bench.mkdir(parents=True)
    # exact: the sigmoid reference reformatted, with comments added and the docstring changed
    sig_ref = info["tasks"]["sigmoid"].reference_code
    (bench / "21_Sigmoid.py").write_text("# KernelBench problem\n" + sig_ref.replace('"""Sigmoid"""', '"""Applies sigmoid."""')
                                         .replace("    def forward", "\n\n    def forward"))
    # ngram: the relu reference with another batch size and an extra helper
    (bench / "19_ReLU.py").write_text(reference("ReLU", "torch.relu(x)", batch=16) + "\n\ndef helper():\n    return 0\n")
    (bench / "99_Other.py").write_text(reference("Conv", "torch.conv2d(x, x)", dim=33))
    out = tmp_path / "corpus"
    code = cli_main(["curate", str(built["run"]), "--out", str(out), "--decontaminate", str(tmp_path / "KernelBench")])
    assert code == 0
    printed = capsys.readouterr().out
    hits = {h["task_name"]: h for h in json.loads((out / "report" / "stats.json").read_text())["decontamination"]["removed_tasks"]}
    assert set(hits) == {"Sigmoid", "ReLU"}
    assert hits["Sigmoid"]["reason"] == "exact" and hits["Sigmoid"]["benchmark_path"] == "level1/21_Sigmoid.py"
    assert hits["ReLU"]["reason"] == "ngram" and hits["ReLU"]["overlap"] >= 0.5
    assert "19_ReLU.py" in printed
    dirty = {info["tasks"]["relu"].task_id, info["tasks"]["sigmoid"].task_id}
    for table in ("sft", "rft", "rl", "tasks", "candidates", "dialogues"):
        assert not {r.task_id for r in store.read_records(out, table)} & dirty, table
    report = (out / "report" / "report.md").read_text()
    assert "level1/21_Sigmoid.py" in report and "exact" in report and "2 tasks removed" in report
    # the run directory itself is never modified
    assert len(store.read_records(built["run"], "tasks")) == 4


def test_card_is_portable_and_files_get_the_usual_modes(built, tmp_path, capsys):
    """`kernelmill curate RUN --out CORPUS`: the dataset card names no placeholder link and no local absolute
    path (it travels to the Hub with the corpus), and every file written has the mode any new file gets under
    the umask (0644 under 022), not mkstemp's 0600."""
    bench = tmp_path / "bench" / "level1"
    bench.mkdir(parents=True)
    (bench / "99_Other.py").write_text(reference("Conv", "torch.conv2d(x, x)", dim=33))
    out = tmp_path / "corpus"
    assert cli_main(["curate", str(built["run"]), "--out", str(out), "--decontaminate", str(bench.parent)]) == 0
    capsys.readouterr()
    card = (out / "README.md").read_text()
    assert "https://github.com/)" not in card and "](https://github.com" not in card
    for local in (str(tmp_path), str(built["root"]), str(built["root"].resolve()), "/tmp/"):
        assert local not in card, local
    assert "from a kernelmill run directory (`run`)" in card and "Decontaminated against `bench`" in card
    mask = os.umask(0o022)
    os.umask(mask)
    files = [p for p in out.rglob("*") if p.is_file()] + list(built["run"].rglob("part-*.parquet"))  # + the store's
    assert any(p.suffix == ".parquet" for p in files) and any(p.suffix == ".png" for p in files)
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {oct(0o666 & ~mask)}
    assert {oct(p.stat().st_mode & 0o777) for p in out.rglob("*") if p.is_dir()} == {oct(0o777 & ~mask)}


def test_bad_inputs_are_named_and_lose_nothing(built, tmp_path, capsys):
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(built["corpus"], corpus)
    before = sorted(p.name for p in corpus.rglob("*.parquet"))
    assert cli_main(["curate", str(built["run"]), "--out", str(corpus), "--decontaminate", str(tmp_path / "missing")]) == 2
    assert "benchmark directory" in capsys.readouterr().err
    assert sorted(p.name for p in corpus.rglob("*.parquet")) == before
    assert cli_main(["curate", str(tmp_path / "no_run")]) == 2
    assert "does not exist" in capsys.readouterr().err
    empty_bench = tmp_path / "empty_bench"
    empty_bench.mkdir()
    assert cli_main(["curate", str(built["run"]), "--out", str(corpus), "--decontaminate", str(empty_bench)]) == 2
    assert "no *.py programs" in capsys.readouterr().err
    assert cli_main(["curate", str(built["run"]), "--rft-k", "0"]) == 2


# ---------------------------------------------------------------------------- report


def test_report_plots_are_written_with_every_build(built, capsys):
    from curation.report import PLOTS

    rep = built["corpus"] / "report"
    for name in PLOTS:
        png = rep / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, name
    md = (rep / "report.md").read_text()
    assert "| sft | near_duplicate | 2 |" in md and "![](turns_to_repair.png)" in md
    assert "| 2 | 1 |" in md  # one dialogue first correct at turn 2
    # verdicts by status, with the task and verifier faults counted apart from the candidates' outcomes
    assert "## Verdicts" in md and "| status | verdicts |" in md
    assert "0 task faults (`task_error`" in md and "verifier faults (`verifier_error`)" in md
    for p in rep.glob("*.png"):
        p.unlink()
    assert cli_main(["report", str(built["corpus"])]) == 0
    assert sorted(p.stem for p in rep.glob("*.png")) == sorted(PLOTS)
    assert os.path.exists(json.loads(capsys.readouterr().out)["report"])


def test_curate_in_place_keeps_run_tables(tmp_path):
    """The default run's case: corpus_dir == run_dir; the run's own tables are read, not rewritten."""
    from curation.corpus import build_corpora

    standard_run(tmp_path)
    before = sorted(p.name for p in (tmp_path / "tasks").glob("*.parquet"))
    st = build_corpora(tmp_path, tmp_path, cfg={})
    assert st["rows"] == {"sft": 6, "rft": 5, "rl": 2} and "tasks" not in st["written"]
    assert sorted(p.name for p in (tmp_path / "tasks").glob("*.parquet")) == before
    assert (tmp_path / "README.md").is_file() and (tmp_path / "report" / "report.md").is_file()


def test_documented_example_queries_run(built):
    """Every SQL statement in docs/QUERIES.md runs over a built corpus (the README links them)."""
    import re

    from curation.query import run_query

    doc = (Path(__file__).resolve().parent.parent / "docs" / "QUERIES.md").read_text()
    statements = [s.strip() for block in re.findall(r"```sql\n(.*?)```", doc, re.S) for s in block.split(";") if s.strip()]
    assert len(statements) >= 7
    results = {}
    for sql in statements:
        results[sql.splitlines()[0]] = run_query(sql, built["corpus"])
    unsolved = next(rows for head, (cols, rows) in results.items() if head.startswith("SELECT t.task_id, t.name"))
    assert [r[1] for r in unsolved] == ["Erf"]


def test_a_candidate_stored_without_its_prompt_stops_curation(tmp_path):
    """Curate uses the prompt stored with each first-turn candidate; one without it is an error naming the
    candidate, not a silently rebuilt prompt."""
    from curation.corpus import build_corpora
    from kernelmill.errors import InputError

    info = standard_run(tmp_path / "run")
    c = info["relu"]["orig"]
    c.prompt = ""
    store.write_records(tmp_path / "bad", "tasks", info["builder"].tasks)
    store.write_records(tmp_path / "bad", "candidates", [c])
    store.write_records(tmp_path / "bad", "verdicts", [v for v in info["builder"].verdicts if v.candidate_id == c.candidate_id])
    with pytest.raises(InputError, match=c.candidate_id):
        build_corpora(tmp_path / "bad", tmp_path / "bad", cfg={})


def test_pass_rate_plot_draws_the_columns_of_the_table_beside_it():
    """pass_rate_by_level.png plots the first-turn and the any-turn pass rate per level, the table's columns
    (it plotted 'dialogues solved', a number the report's table does not have, beside it)."""
    from curation.report import pass_series

    rows = [(1, 12, 0.5, 0.75), (2, 8, None, 0.25)]
    assert pass_series(rows) == ([1, 2], [0.5, 0.0], [0.75, 0.25])
