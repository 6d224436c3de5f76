"""A run killed part way (SIGKILL of its whole process group, mid-verify) and a partial write left
behind are resumed by starting the same command again; the result matches an uninterrupted run:
same row counts, same ids, same row content (timings aside)."""

import json
import os
import signal
import subprocess
import time

import pytest

from flows_fixtures import FAST_VERIFY, ROOT, kernelmill_cmd, seed_run_dir, sets, table_digest
from kernelmill import store

TABLES = ("tasks", "candidates", "verdicts")
NAMES = ["honest", "torch_fallback", "hard_coded_rows"]
VERIFY_ARGS = ["run", "--no-prefect", "--no-progress", "--stages", "verify", "--backend", "cpu",
               *sets({**FAST_VERIFY, "flows.verify_flush_rows": 1})]


def verify_cmd(run_dir) -> list[str]:
    return kernelmill_cmd(*VERIFY_ARGS[:1], "--out", str(run_dir), *VERIFY_ARGS[1:])


def start(run_dir) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(verify_cmd(run_dir), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def verify_counts(run_dir) -> dict:
    """What the last `kernelmill run` on the directory counted for its verify stage (it prints a table of it)."""
    return json.loads((run_dir / "run_counts.json").read_text())["verify"]


def committed_parts(table_dir) -> list:
    """Part files renamed into place. Not store.stored_ids: while the run writes, its glob also
    sees the writer's temporary file, which may be renamed away before it is opened."""
    return sorted(table_dir.glob("part-*.parquet")) if table_dir.is_dir() else []


def finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """The same work, never interrupted."""
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    seed_run_dir(run_dir, NAMES)
    finish(start(run_dir))
    return run_dir


def test_killed_mid_verify_then_resumed_matches_uninterrupted(reference_run, tmp_path):
    run_dir = tmp_path / "killed"
    seed_run_dir(run_dir, NAMES)
    n = len(NAMES)
    proc = start(run_dir)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if committed_parts(run_dir / "verdicts"):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed:\n" + proc.communicate()[0][-2000:]
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI, its compile workers and its execution children
    proc.wait()
    partial = len(store.stored_ids(run_dir, "verdicts"))
    assert 1 <= partial < n, partial

    # a process killed mid-write leaves a temporary file (here: truncated Parquet bytes)
    good = next((run_dir / "verdicts").glob("part-*.parquet")).read_bytes()
    stray = run_dir / "verdicts" / ".tmp-killed.parquet"
    stray.write_bytes(good[: len(good) // 2])

    finish(start(run_dir))
    assert not stray.exists()
    assert verify_counts(run_dir)["candidates"] == n - partial  # only the missing verdicts were verified again
    for table in TABLES:
        assert table_digest(run_dir, table) == table_digest(reference_run, table), table
    assert len(store.stored_ids(run_dir, "verdicts")) == n


def test_resuming_a_finished_run_adds_nothing(reference_run):
    before = {t: table_digest(reference_run, t) for t in TABLES}
    files = sorted(p.name for p in (reference_run / "verdicts").iterdir())
    finish(start(reference_run))
    assert verify_counts(reference_run)["candidates"] == 0
    assert {t: table_digest(reference_run, t) for t in TABLES} == before
    assert sorted(p.name for p in (reference_run / "verdicts").iterdir()) == files


def test_stray_partial_write_is_never_read(tmp_path):
    """Readers skip nothing by themselves (kernelmill.store globs *.parquet), so the run removes
    partial writes before it reads: a truncated temporary file must not break a resumed stage."""
    from orchestrator.pipeline import sweep_partial_writes

    seed_run_dir(tmp_path, ["torch_fallback"])
    stray = tmp_path / "candidates" / ".tmp-abc123.parquet"
    stray.write_bytes(b"PAR1 truncated")
    raw_stray = tmp_path / "raw" / "tasks" / ".tmp-def456.parquet"
    raw_stray.parent.mkdir(parents=True)
    raw_stray.write_bytes(b"")
    removed = sweep_partial_writes(tmp_path)
    assert sorted(removed) == sorted([stray, raw_stray])
    assert len(store.read_records(tmp_path, "candidates")) == 1
