"""`kernelmill query` only reads, and a corrupt Parquet file is one line, never a traceback: the other views
keep answering, `curate` names the file, and `run` moves it aside and recomputes its rows. Real DuckDB, real
Parquet files, the real CLI in a subprocess, a real cpu verification."""

import json

import pytest

from flows_fixtures import FAST_VERIFY, run_kernelmill, seed_run_dir, sets
from curation.query import run_query
from kernelmill import store
from kernelmill.errors import InputError


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    seed_run_dir(d, ["honest"])
    return d


@pytest.mark.parametrize("sql", [
    "COPY (SELECT 1 AS x) TO '{out}/evil.csv'",
    "COPY (SELECT * FROM tasks) TO '{run}/tasks/evil.parquet'",
    "CREATE TABLE t AS SELECT 1",
    "ATTACH '{out}/evil.db' AS e",
    "SET enable_external_access = true",
    "SELECT 1; COPY (SELECT 1) TO '{out}/second.csv'",
])
def test_query_cannot_write(run_dir, tmp_path, sql):
    before = sorted(p.name for p in (run_dir / "tasks").iterdir())
    with pytest.raises(InputError, match="read-only|not allowed"):
        run_query(sql.format(out=tmp_path, run=run_dir), run_dir)
    assert list(tmp_path.iterdir()) == []
    assert sorted(p.name for p in (run_dir / "tasks").iterdir()) == before
    assert run_query("SELECT count(*), count(DISTINCT task_id) FROM tasks", run_dir)[1] == [(1, 1)]


def test_query_reads_only_the_views_files(run_dir):
    with pytest.raises(InputError, match="Permission|disabled|access"):
        run_query("SELECT * FROM read_csv('/etc/passwd')", run_dir)
    cols, rows = run_query("DESCRIBE tasks", run_dir)  # the read-only statement kinds still work
    assert rows and "column_name" in cols


def test_cli_query_write_is_a_clear_error(run_dir, tmp_path):
    r = run_kernelmill("query", "--corpus", str(run_dir), f"COPY (SELECT 1) TO '{tmp_path}/x.csv'")
    assert r.returncode == 2
    assert "read-only" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.csv").exists()


def test_corrupt_parquet_is_named_and_healed_by_run(tmp_path):
    seed_run_dir(tmp_path, ["honest"])
    verify = ["run", "--out", str(tmp_path), "--no-prefect", "--no-progress", "--stages", "verify", "--backend", "cpu",
              *sets(FAST_VERIFY)]
    r = run_kernelmill(*verify)
    assert r.returncode == 0, r.stderr[-2000:]
    (part,) = store.part_files(tmp_path / "verdicts")
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])  # truncated

    # query: the other views answer; one warning line names the broken file
    r = run_kernelmill("query", "--corpus", str(tmp_path), "--format", "json", "SELECT count(*) AS n FROM tasks")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"n": 1}]
    assert "Traceback" not in r.stderr and str(part) in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # curate (reads the verdicts): one line naming the file, exit 2
    r = run_kernelmill("curate", str(tmp_path), "--out", str(tmp_path / "corpus"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert str(part) in r.stderr
    # run: moves it aside and recomputes its rows
    r = run_kernelmill(*verify)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (store.aside_dir(tmp_path) / part.parent.name / part.name).is_file()  # kept aside, outside the run
    store.check_readable(part)
    assert store.unreadable_files(tmp_path) == []
    assert len(store.read_records(tmp_path, "verdicts")) == 1
