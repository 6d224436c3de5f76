"""A truncated part file (a disk that filled up, a copy cut short) is healed by the plain `kernelmill run`, the
Prefect flow run included, and `kernelmill report` refuses to rewrite the report from the readable rows only.
Real CLI in subprocesses, a real ephemeral Prefect server, real Parquet, a real cpu verification."""

import shutil
from pathlib import Path

import pytest

from flows_fixtures import FAST_VERIFY, run_kernelmill, seed_run_dir, sets
from kernelmill import store


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    """A run directory with a task, a candidate, its verdict and a report (copied by each test)."""
    run_dir = tmp_path_factory.mktemp("verified") / "run"
    seed_run_dir(run_dir, ["torch_fallback"])  # stops at the static stage: nothing to compile
    r = run_kernelmill(*VERIFY_ARGS(run_dir), "--no-prefect")
    assert r.returncode == 0, r.stderr[-3000:]
    r = run_kernelmill("report", str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir


def VERIFY_ARGS(run_dir) -> list[str]:
    return ["run", "--out", str(run_dir), "--stages", "verify", "--backend", "cpu", *sets(FAST_VERIFY)]


def damaged_copy(verified, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(verified, run_dir)
    (part,) = store.part_files(run_dir / "verdicts")
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])  # truncated
    return run_dir, part


def test_report_refuses_a_damaged_table_and_leaves_the_report_as_it_was(verified, tmp_path):
    run_dir, part = damaged_copy(verified, tmp_path)
    report = run_dir / "report" / "report.md"
    before = report.read_text()
    r = run_kernelmill("report", str(run_dir))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"warning: {part}: not a readable Parquet file" in r.stderr and "report not rewritten" in r.stderr
    assert "Traceback" not in r.stderr and report.read_text() == before


def test_plain_run_with_prefect_heals_a_truncated_part_file(verified, tmp_path):
    """What the error messages advise (a run on the directory) works with Prefect too: the file is moved
    aside and its rows are recomputed, under the same ids; `report` then works again."""
    run_dir, part = damaged_copy(verified, tmp_path)
    verdict_ids = store.stored_ids(verified, "verdicts")
    r = run_kernelmill(*VERIFY_ARGS(run_dir))  # with Prefect: an ephemeral server, a flow run
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "Traceback" not in r.stderr
    assert f"{part}: not a readable Parquet file; moved aside" in r.stderr
    assert (store.aside_dir(run_dir) / part.parent.name / part.name).is_file()  # kept for diagnosis, outside the run
    assert Path(run_dir).resolve() not in store.aside_dir(run_dir).parents  # never pushed with the corpus
    assert store.unreadable_files(run_dir) == []
    assert store.stored_ids(run_dir, "verdicts") == verdict_ids  # recomputed: the same verdict id
    r = run_kernelmill("report", str(run_dir))
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr[-2000:]


def test_a_truncated_raw_task_file_is_moved_aside_too(tmp_path):
    """The gathered tasks (raw/tasks) are a table like the others: a run moves a damaged file of theirs aside
    instead of failing in every stage that reads them."""
    from orchestrator.pipeline import prepare_run
    from flows_fixtures import relu_task

    store.write_records(tmp_path / "raw", "tasks", [relu_task()])
    (part,) = store.part_files(tmp_path / "raw" / "tasks")
    part.write_bytes(b"PAR1 cut short")
    prepare_run(tmp_path)
    assert not part.exists() and (store.aside_dir(tmp_path) / "raw" / "tasks" / part.name).is_file()
    assert store.unreadable_files(tmp_path / "raw") == []
